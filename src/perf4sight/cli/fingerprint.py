"""CLI for the fingerprint stage: `perf4sight fingerprint --config FILE.ini`."""

from __future__ import annotations

from pathlib import Path

import typer

from perf4sight.config import load_section
from perf4sight.errors import in_settings

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add this stage's commands to the perf4sight app."""

    @app.command("fingerprint")
    def fingerprint(
        config: Path = typer.Option(..., "--config", "-c", help="config.ini with a [fingerprint] section."),
    ) -> None:
        """Fit the device's memory and latency models from its logs and evaluate them."""
        settings = load_section(config, "fingerprint")  # read and checked before scikit-learn and torch load
        from perf4sight.fit import fingerprint_device

        with in_settings(f"{config}: [fingerprint]"):
            fingerprint_device(settings)
