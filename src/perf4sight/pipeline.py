"""Run a whole config file: the toolflow's stages in their original order."""

from __future__ import annotations

from pathlib import Path

from perf4sight import console
from perf4sight.config import Config, load_config

__all__ = ["run_config"]


def run_config(path: str | Path) -> Config:
    """Execute the sections present in the config at `path`; returns the parsed config."""
    config = load_config(path)
    if config.create_network_dataset is not None:
        from perf4sight.networks import create_network_dataset

        console.info("[bold]create_network_dataset[/bold]")
        create_network_dataset(config.create_network_dataset)
    if config.profile is not None:
        from perf4sight.profile import profile_from_settings

        console.info("[bold]profile[/bold]")
        profile_from_settings(config.profile)
    if config.fingerprint is not None:
        from perf4sight.fit import fingerprint_device

        console.info("[bold]fingerprint[/bold]")
        fingerprint_device(config.fingerprint)
    return config
