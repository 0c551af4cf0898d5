"""`perf4sight profile run` on the host: the device's campaign (`perf4sight.device`, the
code a bundle runs) with the host's model loader, model check and console."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from perf4sight import console
from perf4sight.config import ProfileSettings
from perf4sight.device.backends import backend_name
from perf4sight.device.campaign import CampaignSummary, check_run
from perf4sight.device.campaign import profile_campaign as device_campaign
from perf4sight.device.test_config import ProfileTest, read_test_config
from perf4sight.profile.lab import Lab, check_cluster
from perf4sight.profile.models import LOADER, check_models, check_network_recipes
from perf4sight.profile.passes import check_passes, run_in_passes
from perf4sight.profile.test_config import check_budget, check_test_config_keys, create_test_config

__all__ = ["check_settings", "profile_campaign", "run_test_config", "profile_from_settings"]


def profile_campaign(tests: Sequence[ProfileTest], **options: Any) -> CampaignSummary:
    """Run `tests` as the device's `profile_campaign` does with `options` (log_dir, device,
    iterations, ...), loading and checking models with the host's perf4sight.networks."""
    return device_campaign(tests, loader=LOADER, check_models=check_models, console=console, **options)


def check_settings(settings: ProfileSettings, *, test_config: bool | None = None) -> None:
    """The profile stage's check: refuse values that would stop it part-way (a config's
    earlier stages would have run for nothing). The keys of the test config to be made are
    checked when `test_config` is True (by default, when the settings list networks and
    `create_config` is on), the recipes against their networks among them, then the run
    keys. ArgumentError names the key."""
    if test_config if test_config is not None else bool(settings.network and settings.create_config):
        check_test_config_keys(settings)
        check_network_recipes(settings)
    else:
        check_budget(settings.budget_minutes)
    backend_name(settings.device)
    check_run(settings.iterations, settings.warmup, settings.memory_limit_mib)
    check_passes(settings.latency_passes, settings.save)
    check_cluster(settings.cluster, settings.devices)


def run_test_config(settings: ProfileSettings) -> CampaignSummary:
    """Run the test config named by `settings.test_config` with the profile run keys, on this
    machine's device or, with `cluster`, on a lab's (`lab.py`); with `budget_minutes`, no test
    starts once this run's tests have held the device(s) that long; with `latency_passes`
    above 1, the latency tests in passes (`passes.py`)."""
    tests = read_test_config(settings.test_config)
    options = dict(
        log_dir=settings.log_dir,
        device=settings.device,
        gpu_id=settings.gpu_id,
        iterations=settings.iterations,
        warmup=settings.warmup,
        till_first_fail=settings.till_first_fail,
        retry_failed=settings.retry_failed,
        save=settings.save,
        memory_limit_mib=settings.memory_limit_mib,
        runner=Lab(settings.cluster, settings.devices) if settings.cluster is not None else None,
        budget_s=None if settings.budget_minutes is None else 60.0 * settings.budget_minutes,
    )
    check_passes(settings.latency_passes, settings.save)
    if settings.latency_passes == 1:
        return profile_campaign(tests, **options)
    return run_in_passes(tests, settings.latency_passes, campaign=profile_campaign, **options)


def profile_from_settings(settings: ProfileSettings) -> CampaignSummary | None:
    """The [profile] section: create the test config when it lists networks and `create_config`
    is on (the host's half), then run it when `run_profiling` is on (the device's half)."""
    if settings.network and settings.create_config:
        path = create_test_config(settings)
        console.info(f"test config written to {path}")
    return run_test_config(settings) if settings.run_profiling else None
