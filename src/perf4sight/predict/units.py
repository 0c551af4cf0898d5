"""Memory budgets and latency limits as people write them: '7.5GiB', '512MB', '500ms'; the
dataset size an epoch's time is counted in. Checked without torch (the CLI's options, before
any model loads)."""

from __future__ import annotations

import math
import re

import psutil

from perf4sight.device.definitions import is_positive_int
from perf4sight.errors import UsageError

__all__ = ["parse_memory_mib", "parse_duration_ms", "device_memory_mib", "check_dataset_size"]

_MEMORY_UNITS = {
    "b": 1 / 2**20, "kb": 1e3 / 2**20, "kib": 1 / 2**10, "mb": 1e6 / 2**20, "mib": 1.0,
    "gb": 1e9 / 2**20, "gib": 2**10, "tb": 1e12 / 2**20, "tib": 2**20,
}
_DURATION_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "min": 60e3}
_NUMBER = re.compile(r"^\s*(-?[0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def _parse(text: str, units: dict[str, float], default: str, what: str) -> float:
    match = _NUMBER.match(text)
    unit = (match.group(2).lower() or default) if match else ""
    if not match or unit not in units:
        raise UsageError(f"{what} '{text}' is not a number with a unit ({', '.join(units)})")
    value = float(match.group(1)) * units[unit]
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{what} '{text}' must be positive and finite")
    return value


def parse_memory_mib(text: str) -> float:
    """'7.5GiB' -> 7680.0 MiB; a bare number is MiB. 'auto' is the local device's memory."""
    if text.strip().lower() == "auto":
        return device_memory_mib()
    return _parse(text, _MEMORY_UNITS, "mib", "memory budget")


def parse_duration_ms(text: str) -> float:
    """'500ms' -> 500.0, '2s' -> 2000.0; a bare number is milliseconds."""
    return _parse(text, _DURATION_UNITS, "ms", "latency limit")


def check_dataset_size(dataset_size: int | None) -> None:
    """Refuse a dataset size (images per epoch) that is not a positive integer; None: no epoch time."""
    if dataset_size is not None and not is_positive_int(dataset_size):
        raise UsageError(f"dataset size {dataset_size!r}: expected a positive number of images per epoch")


def device_memory_mib() -> float:
    """Total memory of the local training device: the first CUDA GPU, else system memory."""
    import torch  # only here: the budgets and limits are parsed without it

    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory / 2**20
    return psutil.virtual_memory().total / 2**20
