"""Making the test config on the host, where the pruned models live.

The test config itself (its layout, its tests, its reader) is the device's
(`perf4sight.device.test_config`); here the [profile] settings become one: the models
of each network found in `local_model_loc`, their paths rewritten to where they will be
on the device (`device_model_loc`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from perf4sight import console
from perf4sight.config import ProfileSettings
from perf4sight.device.backends import BACKENDS, backend_name
from perf4sight.device.definitions import DATASETS, STAGES, TEST_VARIABLES, check_batch_sizes, check_choices
from perf4sight.device.recipe import DEFAULT_RECIPE, RECIPE_COLUMNS, Recipe, check_recipe
from perf4sight.errors import ArgumentError
from perf4sight.files import write_text
from perf4sight.profile.selection import spread_tests

__all__ = [
    "budget_problem", "check_budget", "check_test_config_keys", "create_test_config", "find_model_files", "network_models", "network_recipe_lists",
    "network_recipes", "test_config_text",
]

_MODEL_SUFFIXES = (".py", ".json")
# A week: beyond it a budget plans nothing a full campaign would not.
_MAX_BUDGET_MINUTES = 7 * 24 * 60


def find_model_files(directory: Path, network: str) -> list[Path]:
    """Model files `<network>_<level>.py|.json` in `directory`, by level; .py wins a tie.

    A .py model file is what the original tool loads, so it is listed when both exist.
    """
    pattern = re.compile(rf"^{re.escape(network)}_([^_]+)$")
    by_stem: dict[str, Path] = {}
    for path in sorted(directory.iterdir()):
        if path.suffix in _MODEL_SUFFIXES and pattern.match(path.stem):
            if path.stem not in by_stem or path.suffix == ".py":
                by_stem[path.stem] = path
    return sorted(by_stem.values(), key=lambda p: _level_key(pattern.match(p.stem).group(1)))


def _level_key(level: str) -> tuple[int, float, str]:
    try:
        return (0, float(level), "")
    except ValueError:
        return (1, 0.0, level)


def check_test_config_keys(settings: ProfileSettings) -> None:
    """Refuse profile settings no test config can hold (the models are looked up later): the
    part of the profile stage's check (`campaign.check_settings`) that making one needs."""
    if not settings.network:
        raise ArgumentError("network: no network listed to create a test config for")
    check_choices("profile_variables", settings.profile_variables, TEST_VARIABLES)
    check_choices("stage", settings.stage, STAGES)
    check_choices("dataset", [settings.dataset], tuple(DATASETS))
    check_batch_sizes(settings.bs, "bs")
    if settings.max_tests is not None and settings.max_tests < 1:
        raise ArgumentError(f"max_tests: {settings.max_tests}; expected a positive number of tests, or none for all")
    check_budget(settings.budget_minutes)
    if settings.local_model_loc is None:
        raise ArgumentError("local_model_loc: needed to find the models of the test config")
    check_recipe_keys(settings)


def budget_problem(minutes: float | None) -> str | None:
    """Why `minutes` is no campaign's time budget (above 0, at most a week); None when it is one
    (or none is given)."""
    if minutes is None or 0 < minutes <= _MAX_BUDGET_MINUTES:
        return None
    return f"{minutes}; expected minutes above 0 and up to {_MAX_BUDGET_MINUTES}"


def check_budget(minutes: float | None) -> None:
    """`budget_minutes`'s check (`budget_problem`): the test config's plan and the run's stop read it."""
    problem = budget_problem(minutes)
    if problem is not None:
        raise ArgumentError(f"budget_minutes: {problem}, or none for no time budget")


def check_recipe_keys(settings: ProfileSettings) -> None:
    """Refuse recipe values no network can run: an unknown optimizer or precision, a
    `network:layer` of a network not listed, a network left without a `trainable` value,
    and, when the settings run the tests, a precision their device lacks (fp16 off CUDA).
    Layer names and segment counts are checked against the networks (`models.check_network_recipes`)."""
    for item in settings.trainable:
        network, named, layer = item.partition(":")
        if named and (network not in settings.network or not layer):
            raise ArgumentError(f"trainable: {item!r} names no layer of a [profile] network "
                                f"({', '.join(settings.network)}); write network:layer")
    for network in settings.network:
        lists = network_recipe_lists(settings, network)
        if not lists["trainable"]:
            raise ArgumentError(f"trainable: no value for network {network}; every item names another network")
        for recipe in network_recipes(settings, network):
            check_recipe(recipe, where="")
    if settings.run_profiling:
        backend = BACKENDS[backend_name(settings.device)]
        for precision in settings.precision:
            problem = backend.precision_problem(precision)
            if problem:
                raise ArgumentError(problem)


def network_recipe_lists(settings: ProfileSettings, network: str) -> dict[str, list]:
    """The recipe lists (`RECIPE_COLUMNS`) of `network`'s test config section: [profile]'s,
    with a `trainable` item `network:layer` kept (as `layer`) for its own network only."""
    trainable = []
    for item in settings.trainable:
        owner, named, layer = item.partition(":")
        if not named:
            trainable.append(item)
        elif owner == network:
            trainable.append(layer)
    lists = {key: list(getattr(settings, key)) for key in RECIPE_COLUMNS}
    lists["trainable"] = trainable
    return lists


def network_recipes(settings: ProfileSettings, network: str) -> list[Recipe]:
    """Every recipe `network` is profiled with: the product of its recipe lists."""
    lists = network_recipe_lists(settings, network)
    return [Recipe(*values) for values in itertools.product(*(lists[key] for key in RECIPE_COLUMNS))]


def network_models(settings: ProfileSettings, local: Path) -> dict[str, list[Path]]:
    """The model files of each [profile] network in `local`; ArgumentError for a network with none."""
    if not local.is_dir():
        raise ArgumentError(f"local_model_loc: directory not found: {local}")
    models = {}
    for network in settings.network:
        files = find_model_files(local, network)
        if not files:
            # the network-dataset stage writes into model_path/<dataset> where a dataset is named
            below = [d for d in sorted(local.iterdir()) if d.is_dir() and find_model_files(d, network)]
            hint = f" (there are some in {below[0]}: set local_model_loc to it)" if below else ""
            raise ArgumentError(
                f"network '{network}': no model file {network}_<level>.py or .json "
                f"in local_model_loc {local}{hint}"
            )
        models[network] = files
    return models


def create_test_config(settings: ProfileSettings) -> Path:
    """Write the test config for `settings.network` to `settings.test_config`; returns its path."""
    check_test_config_keys(settings)
    assert settings.local_model_loc is not None  # check_test_config_keys refuses a missing one
    device_dir = settings.device_model_loc
    local = network_models(settings, settings.local_model_loc)
    models = {network: [str(device_dir / f.name) if device_dir is not None else str(f) for f in files]
              for network, files in local.items()}
    path = settings.test_config
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, test_config_text(settings, models, local))
    return path


def test_config_text(settings: ProfileSettings, models: dict[str, Sequence[str]],
                     local: dict[str, Sequence[Path]] | None = None) -> str:
    """The test config of the [profile] settings for `models` (network -> model paths): a
    section per network, every model at every batch size; with `max_tests` or
    `budget_minutes`, a section per model that `spread_tests` picks, at the batch sizes picked
    for it, the budget's tests timed on this machine from the models here (`local`, network ->
    files, in `models`' order; `models` themselves where not given). The sections come in the
    order of their models' first picks: a campaign stopped at its budget has run the first."""
    if settings.max_tests is None and settings.budget_minutes is None:
        return "\n".join(_section_text(network, settings, paths, settings.bs) for network, paths in models.items())
    local = local or {network: [Path(p) for p in paths] for network, paths in models.items()}
    rows = [(network, path, str(here), level, bs) for network, paths in models.items()
            for path, here, level in zip(paths, local[network], _levels(network, paths)) for bs in settings.bs]
    tests = pd.DataFrame(rows, columns=["net", "path", "local", "level", "bs"])
    seconds = None
    if settings.budget_minutes is not None:
        from perf4sight.profile.plan import from_what_has_run, time_tests

        tests["seconds"], start = time_tests(settings, tests, local)
        tests["seconds"] = from_what_has_run(settings, tests)
        seconds = 60.0 * settings.budget_minutes - start
    picked = tests.iloc[spread_tests(tests, settings.max_tests, seconds=seconds)]  # in the order picked
    if seconds is not None:
        console.info(f"planned {len(picked)} of {len(tests)} tests (model, batch size), about "
                     f"{(picked['seconds'].sum() + start) / 60:.1f} of {settings.budget_minutes:g} minutes on this "
                     "machine")
    return "\n".join(_section_text(network, settings, [path], sorted(group["bs"]), name=Path(path).stem)
                     for (network, path), group in picked.groupby(["net", "path"], sort=False))


def _levels(network: str, paths: Sequence[str]) -> list[float]:
    """The pruning levels of a network's models `<network>_<level>`, as numbers where they all
    are, else their places in `paths` over 0-100."""
    keys = [_level_key(Path(path).stem[len(network) + 1:]) for path in paths]
    if all(kind == 0 for kind, _, _ in keys):
        return [number for _, number, _ in keys]
    return [100.0 * place / max(len(paths) - 1, 1) for place in range(len(paths))]


def _section_text(network: str, settings: ProfileSettings, models: Sequence[str], bs: Sequence[int],
                  name: str | None = None) -> str:
    """The section (`name`, else the network's) of `models` at batch sizes `bs`: the
    original's keys, then the recipe keys that are not the default recipe's alone (a section
    without them runs the default)."""
    head = "model= ["
    model_lines = ",\n".join(
        (head if i == 0 else " " * len(head)) + repr(m) for i, m in enumerate(models)
    )
    recipe_lines = "".join(
        f"{key}= {values!r}\n" for key, values in network_recipe_lists(settings, network).items()
        if values != [getattr(DEFAULT_RECIPE, key)]
    )
    return (
        f"[{(name or network).upper()}]\n"
        f"test_var= {list(settings.profile_variables)!r}\n"
        f"bs= {[int(size) for size in bs]!r}\n"
        f"dataset= {[settings.dataset]!r}\n"
        f"net_name= {[network]!r}\n"
        f"exec_stage= {list(settings.stage)!r}\n"
        f"{model_lines}]\n"
        f"{recipe_lines}"
    )
