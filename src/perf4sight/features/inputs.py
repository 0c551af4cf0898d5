"""What every feature set declares and checks first, at its door: what it needs from the
architecture, the stage and the batch sizes it is asked for."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
import pandas as pd

from perf4sight.architecture import Architecture, Detail
from perf4sight.device.definitions import MAX_BATCH_SIZE, BatchSizes, check_batch_sizes, check_stage
from perf4sight.errors import NetworkError

__all__ = ["checked_batch_sizes", "needs"]

Function = TypeVar("Function", bound=Callable[..., pd.DataFrame])

# What a description lacking a detail is told to be loaded with.
_MISSING = {
    Detail.LAYERS: "every layer, and this is a spec's Conv2d/Linear table (load the network traced: "
                   "load_architecture(..., needs=Detail.LAYERS))",
    Detail.LIFETIMES: "the tensor lifetimes of its {stage} iteration, which this description does not hold "
                      "(load it with them: load_architecture(..., needs=Detail.LIFETIMES, stage='{stage}'))",
}


def needs(detail: Detail) -> Callable[[Function], Function]:
    """Declare what a feature function reads from an architecture, as its `needs` attribute
    (the loader gives it a description holding that much, and builds no more), and refuse a
    description that does not hold it, naming the network and how to load it, an unknown
    stage, or batch sizes that are not positive integers; the function gets them as
    `BatchSizes` (returned as they are when a caller checked them already)."""

    def declare(function: Function) -> Function:
        @functools.wraps(function)
        def checked(arch: Architecture, batch_sizes: Sequence[int], stage: str = "training") -> pd.DataFrame:
            check_stage(stage, "stage")
            sizes = checked_batch_sizes(arch, batch_sizes)
            if not arch.holds(detail, stage):
                raise NetworkError(f"network '{arch.name}': {function.__name__} needs "
                                   + _MISSING[detail].format(stage=stage))
            return function(arch, sizes, stage)

        checked.needs = detail  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]

    return declare


def checked_batch_sizes(arch: Architecture, batch_sizes: Sequence[int]) -> BatchSizes:
    """`batch_sizes` asked of `arch`'s features, checked (`check_batch_sizes`): every feature
    set and the feature tables refuse the same input with the same message. A query frame's
    column of integers in range passes in one vectorised test: checked one by one, the 4096
    batch sizes of a `max_batch_size` search cost 1 ms per feature table (30 ms a variant)."""
    if (isinstance(batch_sizes, np.ndarray) and batch_sizes.dtype.kind in "iu" and batch_sizes.size
            and batch_sizes.min() >= 1 and batch_sizes.max() <= MAX_BATCH_SIZE):
        return BatchSizes(batch_sizes.tolist())
    return check_batch_sizes(batch_sizes, f"network '{arch.name}': batch sizes", NetworkError)
