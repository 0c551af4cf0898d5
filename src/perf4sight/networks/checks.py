"""The network stage's value checks that need no torch: pruning level, mode and seed, input size
and class count, and [create_network_dataset]'s settings but for the networks' names.

They live apart from pruning and loading, which import torch, so that the CLI refuses a bad
option before loading it; the stage itself runs the same checks (`network_dataset.check_settings`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from perf4sight.config import NetworkDatasetSettings, check_output_path
from perf4sight.device.definitions import input_size_problem, num_classes_problem
from perf4sight.errors import ArgumentError, NetworkError

__all__ = [
    "MODES", "MAX_LEVEL", "MAX_SEED", "check_level", "check_mode", "check_seed", "check_input_size",
    "check_num_classes", "check_settings_values",
]

MODES = ("random", "l1-norm")
MAX_LEVEL = 95
# The largest seed: what every RNG takes (torch's are 64-bit, numpy's legacy ones 32-bit).
MAX_SEED = 2**32 - 1


def check_level(level: float) -> float:
    """Refuse a pruning level outside [0, MAX_LEVEL]."""
    if not isinstance(level, (int, float)) or isinstance(level, bool) or not 0 <= level <= MAX_LEVEL:
        raise NetworkError(f"pruning level {level!r} is outside [0, {MAX_LEVEL}] (percent of parameters removed)")
    return float(level)


def check_mode(mode: str) -> None:
    """Refuse a pruning mode other than MODES."""
    if mode not in MODES:
        raise NetworkError(f"unknown pruning mode '{mode}'; known modes: {', '.join(MODES)}")


def check_seed(seed: int) -> None:
    """Refuse a seed that is not an integer in [0, MAX_SEED]."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise NetworkError(f"pruning seed {seed!r} is not an integer in [0, {MAX_SEED}]")


def check_input_size(input_size: Sequence[int]) -> tuple[int, int, int]:
    """`input_size` as (channels, height, width) of positive integers up to MAX_INPUT_EXTENT,
    or NetworkError."""
    size = tuple(input_size)
    problem = input_size_problem(list(size), "input size")
    if problem is not None:
        raise NetworkError(problem)
    return size  # type: ignore[return-value]


def check_num_classes(num_classes: int | None) -> None:
    """Refuse a class count that is not a positive integer up to MAX_CLASSES (None: the
    network's own)."""
    problem = None if num_classes is None else num_classes_problem(num_classes)
    if problem is not None:
        raise NetworkError(problem)


def check_settings_values(settings: NetworkDatasetSettings) -> None:
    """Refuse bad [create_network_dataset] values (ArgumentError naming the key), all but
    whether each network can be found, which needs torchvision."""
    if not settings.networks:
        raise ArgumentError("networks: no network given")
    if not settings.pruning_perc:
        raise ArgumentError("pruning_perc: no level given")
    if settings.dataset is not None and Path(settings.dataset).name != settings.dataset:
        raise ArgumentError(f"dataset: '{settings.dataset}' is not a folder name")
    if settings.model_desc_dir is not None and not settings.model_desc_dir.is_dir():
        raise ArgumentError(f"model_desc_dir: directory not found: {settings.model_desc_dir}")
    check_output_path(settings.spec_dir, "folder", "model_path")
    checks: list[tuple[str, Callable[[Any], Any], Any]] = [
        ("mode", check_mode, settings.mode),
        ("seed", check_seed, settings.seed),
        *(("pruning_perc", check_level, level) for level in settings.pruning_perc),
        ("input_size", check_input_size, settings.input_size),
        ("num_classes", check_num_classes, settings.num_classes),
    ]
    for key, check, value in checks:
        try:
            check(value)
        except NetworkError as exc:
            raise ArgumentError(f"{key}: {exc}") from None
