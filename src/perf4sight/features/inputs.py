"""What every feature set checks first: the stage and the batch sizes it is asked for."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from perf4sight.architecture import Architecture
from perf4sight.device.definitions import check_batch_sizes, check_stage
from perf4sight.errors import NetworkError

__all__ = ["checked_batch_sizes"]


def checked_batch_sizes(arch: Architecture, batch_sizes: Sequence[int], stage: str) -> np.ndarray:
    """`batch_sizes` as a float vector, once `stage` is known and every size a positive
    integer: both feature sets refuse the same input with the same message."""
    check_stage(stage, "stage")
    return np.asarray(check_batch_sizes(batch_sizes, f"network '{arch.name}': batch sizes", NetworkError), dtype=float)
