"""What every feature set checks first: the stage and the batch sizes it is asked for."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from perf4sight.architecture import Architecture
from perf4sight.config import check_stage
from perf4sight.errors import NetworkError

__all__ = ["checked_batch_sizes"]


def checked_batch_sizes(arch: Architecture, batch_sizes: Sequence[int], stage: str) -> np.ndarray:
    """`batch_sizes` as a float vector, once `stage` is known and every size a positive
    integer: both feature sets refuse the same input with the same message."""
    check_stage(stage, "stage")
    bs = np.asarray(batch_sizes, dtype=float)
    if bs.ndim != 1 or not len(bs) or (bs < 1).any() or (bs != np.round(bs)).any():
        raise NetworkError(f"network '{arch.name}': batch sizes must be positive integers, got {list(batch_sizes)}")
    return bs
