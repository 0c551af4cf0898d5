"""CLI for the profile stage: `perf4sight profile create-config`, `plan`, `probes`, `run` and `bundle`.

The config is read and checked before the stage's modules (torch) are imported."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer
from rich.markup import escape

from perf4sight import console
from perf4sight.config import ProfileSettings, config_section, load_config, load_section
from perf4sight.errors import UsageError, in_settings

__all__ = ["register"]

_CONFIG = typer.Option(..., "--config", "-c", help="config.ini with a [profile] section.")


def _settings(path: Path) -> ProfileSettings:
    return load_section(path, "profile")


def register(app: typer.Typer) -> None:
    """Add this stage's commands to the perf4sight app."""
    profile_app = typer.Typer(
        name="profile", help="Profile training/inference memory and latency on a device.",
        no_args_is_help=True,
    )

    @profile_app.command("create-config")
    def create_config(config: Path = _CONFIG) -> None:
        """On the host: write the test config listing the models of [profile] network."""
        settings = _settings(config)
        from perf4sight.profile import create_test_config

        with in_settings(f"{config}: [profile]"):
            path = create_test_config(settings)
        console.info(f"test config written to {path}; copy it to the device with the models")

    @profile_app.command("plan")
    def plan(
        config: Path = _CONFIG,
        minutes: float = typer.Option(..., "--minutes", "-m", help="The campaign's time budget on this machine."),
    ) -> None:
        """On the machine that profiles: write a test config of [profile]'s tests that fits
        MINUTES here (each network timed first; [profile] budget_minutes in a config)."""
        from perf4sight.profile.test_config import budget_problem

        problem = budget_problem(minutes)
        if problem is not None:
            raise UsageError(f"--minutes: {problem}")
        settings = dataclasses.replace(_settings(config), budget_minutes=minutes)
        from perf4sight.profile import create_test_config

        with in_settings(f"{config}: [profile]"):
            path = create_test_config(settings)
        console.info(f"test config written to {path}; run it with `perf4sight profile run --config {config}`")

    @profile_app.command("probes")
    def probes(config: Path = _CONFIG) -> None:
        """On the host: write the layer-level tests of [profile]'s networks (one probe network
        per distinct convolution and linear layer shape) beside their models; add 'probe' to
        [profile] network to profile them."""
        settings = _settings(config)
        from perf4sight.profile.layer_probes import PROBE_NET, network_probes

        with in_settings(f"{config}: [profile]"):
            paths = network_probes(settings)
        console.info(escape(f"{len(paths)} probes in {settings.local_model_loc}; add '{PROBE_NET}' to [profile] "
                            "network to profile them"))

    @profile_app.command("run")
    def run(
        config: Path = _CONFIG,
        ray: str = typer.Option(None, "--ray", help="Run on a lab's devices on Ray: auto (the cluster this machine "
                                                     "belongs to) or the head's address ([profile] cluster); "
                                                     "[profile] devices names their resources."),
    ) -> None:
        """On the device (or a lab's devices): run the test config named by [profile] test_config."""
        settings = _settings(config)
        if ray is not None:
            settings = dataclasses.replace(settings, cluster=ray)
        from perf4sight.profile.lab import check_cluster

        with in_settings(f"{config}: [profile]"):
            check_cluster(settings.cluster, settings.devices)
        from perf4sight.profile import run_test_config

        with in_settings(f"{config}: [profile]"):
            run_test_config(settings)

    @profile_app.command("bundle")
    def bundle(
        config: Path = _CONFIG,
        out: Path = typer.Option(..., "--out", "-o", help="Folder to write the bundle to."),
    ) -> None:
        """On the host: write a folder that profiles [profile]'s tests on a device without
        perf4sight (Python >= 3.6 and PyTorch >= 1.8): `python3 OUT/run_profile.py` there."""
        read = load_config(config)
        config_section(read, "profile")
        from perf4sight.profile import write_bundle

        write_bundle(read, out)

    app.add_typer(profile_app, name="profile")
