"""`perf4sight profile bundle`: what a device without perf4sight needs to profile.

The bundle is a folder: the test config, a standalone model file per model (needing only
torch) with its spec beside it (for the input size), the device package copied as plain
files (`perf4sight.device`, the code `perf4sight profile run` runs), its record
`bundle.json` (the [profile] run settings, the runner's defaults, `budget_minutes` among
them) and `run_profile.py`. On the device, `python3 run_profile.py` writes `logs/` in the
layout of `profile run`.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone
from pathlib import Path

from perf4sight import __version__, console
from perf4sight.config import Config, ProfileSettings, config_section, load_config
from perf4sight.device import runner
from perf4sight.errors import ArgumentError, ConfigError, in_settings
from perf4sight.files import write_text
from perf4sight.profile.campaign import check_settings
from perf4sight.profile.test_config import find_model_files, network_models, test_config_text

__all__ = ["PACKAGE", "RUNNER", "TEST_CONFIG", "MODELS", "write_bundle"]

PACKAGE = "perf4sight_device"  # the device package's name in a bundle: no clash with an installed perf4sight
RUNNER = "run_profile.py"
TEST_CONFIG = "test_config.ini"
MODELS = "models"
LOGS = "logs"

_RUNNER_SOURCE = '''#!/usr/bin/env python3
"""Profile this bundle's tests on this device into logs/ (`python3 run_profile.py --help`).

Written by perf4sight {version}; needs Python >= 3.6 and PyTorch >= 1.8, nothing of perf4sight.
"""

import os
import sys

if sys.version_info < (3, 6):
    sys.exit("run_profile.py needs Python 3.6 or later")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from {package}.runner import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(HERE, sys.argv[1:]))
'''


def write_bundle(config: Config | str | Path, out: str | Path) -> Path:
    """Write the bundle of the [profile] section of `config` (a config file, or one read by
    `load_config`: the CLI reads it before torch loads) to `out`."""
    if not isinstance(config, Config):
        config = load_config(config)
    config_section(config, "profile")
    settings = _with_models(config)
    with in_settings(f"{config.path}: [profile]"):
        check_settings(settings, test_config=True)
        if settings.latency_passes != 1:
            raise ArgumentError(f"latency_passes = {settings.latency_passes}: a bundle runs each latency test once; "
                                "set 1 (passes are for `perf4sight profile run` on the device itself)")
    assert settings.local_model_loc is not None  # _with_models sets it
    with in_settings(f"{config.path}: [create_network_dataset]"):
        _make_specs(config, settings)
    out = Path(out)
    (out / MODELS).mkdir(parents=True, exist_ok=True)
    models: dict[str, list[str]] = {}
    with in_settings(f"{config.path}: [profile]"):
        found = network_models(settings, settings.local_model_loc)
        for network, files in found.items():
            models[network] = [_bundle_model(network, path, settings, out) for path in files]
    write_text(out / TEST_CONFIG, test_config_text(_device_plan(settings, models), models))
    _copy_device_package(out / PACKAGE)
    write_text(out / runner.BUNDLE_FILE, json.dumps(_record(settings), indent=2) + "\n")
    write_text(out / RUNNER, _RUNNER_SOURCE.format(version=__version__, package=PACKAGE))
    (out / RUNNER).chmod(0o755)
    count = sum(len(paths) for paths in models.values())
    console.info(f"bundle of {count} models written to {out}; copy it to the device and run "
                 f"`python3 {out.name}/{RUNNER}` there")
    return out


def _device_plan(settings: ProfileSettings, models: dict[str, list[str]]) -> ProfileSettings:
    """The settings of a bundle's test config: the device is not here to time a budget's tests,
    so with `budget_minutes` every test (or `max_tests` of them) is listed in the order
    `spread_tests` picks them, and the device's runner stops at the budget (its default)."""
    if settings.budget_minutes is None:
        return settings
    every = sum(len(paths) for paths in models.values()) * len(settings.bs)
    return dataclasses.replace(settings, budget_minutes=None, max_tests=settings.max_tests or every)


def _with_models(config: Config) -> ProfileSettings:
    """The [profile] settings with the folder the models come from: local_model_loc, or the
    specs [create_network_dataset] writes."""
    settings = config.profile
    assert settings is not None
    if settings.local_model_loc is not None:
        return settings
    if config.create_network_dataset is None:
        raise ConfigError(f"{config.path}: [profile] local_model_loc: needed to find the models to bundle "
                          "(or a [create_network_dataset] section whose specs to bundle)")
    return dataclasses.replace(settings, local_model_loc=config.create_network_dataset.spec_dir)


def _make_specs(config: Config, settings: ProfileSettings) -> None:
    """Run [create_network_dataset] when the specs it writes are what is bundled and some
    network has none yet."""
    section = config.create_network_dataset
    local = settings.local_model_loc
    if section is None or local is None or section.spec_dir.resolve() != local.resolve():
        return
    if local.is_dir() and all(find_model_files(local, network) for network in settings.network):
        return
    from perf4sight.networks import create_network_dataset

    create_network_dataset(section)


def _bundle_model(network: str, path: Path, settings: ProfileSettings, out: Path) -> str:
    """Write the standalone model file of `path` (a spec or a model file) and the spec beside
    it into the bundle; returns its path in the test config (relative to the bundle)."""
    from perf4sight.networks import load_network, write_model_file

    spec = path.with_suffix(".json")
    target = out / MODELS / f"{path.stem}.py"
    if path.suffix == ".json":
        loaded = load_network(path)
        write_model_file(loaded.module, target, net=network, name=path.stem,
                         num_classes=loaded.num_classes, input_size=loaded.input_size)
    else:
        write_text(target, path.read_text(encoding="utf-8"))
    if spec.is_file():
        write_text(target.with_suffix(".json"), spec.read_text(encoding="utf-8"))
    elif settings.dataset == "spec":
        raise ArgumentError(f"dataset = spec: the model file {path} has no spec {spec.name} beside it "
                            "to take its input size from; add it or name a dataset")
    return f"{MODELS}/{target.name}"


def _copy_device_package(target: Path) -> None:
    """The device package's modules, as plain files (they import each other relatively)."""
    source = Path(runner.__file__).parent
    target.mkdir(parents=True, exist_ok=True)
    for module in sorted(source.glob("*.py")):
        write_text(target / module.name, module.read_text(encoding="utf-8"))


def _record(settings: ProfileSettings) -> dict:
    """bundle.json: who made the bundle, and the runner's defaults ([profile]'s run keys)."""
    return {
        "made_by": f"perf4sight {__version__}",
        "made_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "defaults": {"test_config": TEST_CONFIG, "log_dir": LOGS,
                     **{key: getattr(settings, key) for key in runner.RUN_KEYS}},
    }
