"""`perf4sight run --config FILE.ini`: every section of a config, in toolflow order."""

from __future__ import annotations

from pathlib import Path

import typer

from perf4sight.pipeline import run_config

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add `run` to the perf4sight app."""

    @app.command("run")
    def run(
        config: Path = typer.Option(..., "--config", "-c", help="config.ini to execute."),
    ) -> None:
        """Run the config's sections: [create_network_dataset], [profile], [fingerprint]."""
        run_config(config)
