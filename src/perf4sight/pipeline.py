"""Run a whole config file: the toolflow's stages in their original order."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from perf4sight import console
from perf4sight.config import Config, load_config
from perf4sight.errors import in_settings

__all__ = ["STAGE_CHECKS", "check_section", "run_config"]

# The module of each section's stage that holds its one `check_settings` (imported when
# used: each stage loads torch).
STAGE_CHECKS = {
    "create_network_dataset": "perf4sight.networks.network_dataset",
    "profile": "perf4sight.profile.campaign",
    "fingerprint": "perf4sight.fit.fingerprint",
}


def run_config(path: str | Path) -> Config:
    """Execute the sections present in the config at `path`; returns the parsed config.

    Every section's values are checked first: a bad value in [fingerprint] must not wait
    for the pruning and profiling before it to finish. An error about a value names the
    file, the section and the key.
    """
    config = load_config(path)
    for name in config.sections():
        with in_settings(f"{path}: [{name}]"):
            check_section(name, getattr(config, name))
    outputs: list[tuple[str, Path]] = []
    if config.create_network_dataset is not None:
        from perf4sight.networks import create_network_dataset

        console.info("[bold]create_network_dataset[/bold]")
        with in_settings(f"{path}: [create_network_dataset]"):
            create_network_dataset(config.create_network_dataset)
        outputs.append(("architecture specs", config.create_network_dataset.spec_dir))
    if config.profile is not None:
        from perf4sight.profile import profile_from_settings

        console.info("[bold]profile[/bold]")
        with in_settings(f"{path}: [profile]"):
            profile_from_settings(config.profile)
        if config.profile.network and config.profile.create_config:
            outputs.append(("test config", config.profile.test_config))
        if config.profile.run_profiling:
            outputs.append(("profiling logs", config.profile.log_dir))
    if config.fingerprint is not None:
        from perf4sight.fit import fingerprint_device

        console.info("[bold]fingerprint[/bold]")
        with in_settings(f"{path}: [fingerprint]"):
            fingerprint_device(config.fingerprint)
        outputs.append(("fitted models", config.fingerprint.model_storedir))
        if config.fingerprint.report is not None:
            outputs.append(("evaluation report", config.fingerprint.report))
    _print_outputs(outputs)
    return config


def check_section(name: str, settings: Any) -> None:
    """The one check of a stage's settings (section `name`), run before anything of any
    stage: ArgumentError naming the key, which the caller places in its file and section
    (`in_settings`)."""
    importlib.import_module(STAGE_CHECKS[name]).check_settings(settings)


def _print_outputs(outputs: list[tuple[str, Path]]) -> None:
    """Where everything went, and the folder that holds it all."""
    if not outputs:
        return
    resolved = [path.resolve() for _, path in outputs]
    common = Path(os.path.commonpath(resolved))
    console.print_table("outputs", ["what", "where"], [(what, str(path)) for what, path in outputs])
    console.out.print(f"all outputs are under {common}")
