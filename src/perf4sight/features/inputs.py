"""What every feature set declares and checks first: what it needs from the architecture,
the stage and the batch sizes it is asked for."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from perf4sight.architecture import Architecture, Detail
from perf4sight.config import check_batch_sizes, check_stage
from perf4sight.errors import NetworkError

__all__ = ["checked_batch_sizes", "needs"]

Function = TypeVar("Function", bound=Callable)


def needs(detail: Detail) -> Callable[[Function], Function]:
    """Declare, as the function's `needs` attribute, what a feature function reads from an
    architecture: the loader then gives it a description that holds that much (and no more
    than it must build)."""

    def declare(function: Function) -> Function:
        function.needs = detail  # type: ignore[attr-defined]
        return function

    return declare


def checked_batch_sizes(arch: Architecture, batch_sizes: Sequence[int], stage: str) -> np.ndarray:
    """`batch_sizes` as a float vector, once `stage` is known and every size a positive
    integer: both feature sets refuse the same input with the same message."""
    check_stage(stage, "stage")
    return np.asarray(check_batch_sizes(batch_sizes, f"network '{arch.name}': batch sizes", NetworkError), dtype=float)
