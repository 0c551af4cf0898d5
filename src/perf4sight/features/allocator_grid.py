"""An allocator replay's peaks at any batch size, from replays at a fixed grid of them.

An allocator's peaks do not always grow with the batch size (a larger request may split a
free block where a smaller one did not), but predictions must: each allocator's peaks are
replayed at the batch sizes of `GRID` up to the largest asked for, made non-decreasing (the
running maximum), and interpolated between them (beyond the grid, in proportion). The
replays are kept with the timeline, by allocator: another query replays only new grid sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from perf4sight.architecture import Timeline

__all__ = ["GRID", "compiled_replays", "peaks_on_grid"]

# Batch sizes the peaks are replayed at: 1, 2, 3, 4, 6, 8, 12, ... 65536.
GRID = tuple(sorted({1, *(2**k for k in range(1, 17)), *(3 * 2**k for k in range(15))}))

# A replay: (peak live bytes, peak bytes held) at each of a list of batch sizes.
Replays = Callable[[Timeline, Sequence[int]], Sequence[tuple[int, int]]]
# A compiled replay: (peak live, peak held) per row of sizes, from each event's tensor (numbered
# from 0, so that it finds the tensor's block by index), whether the event allocates, its sizes
# at each batch size (one row each) and the number of tensors.
Compiled = Callable[[np.ndarray, np.ndarray, np.ndarray, int], np.ndarray]


def compiled_replays(replay: Compiled, timeline: Timeline, batch_sizes: Sequence[int]) -> list[tuple[int, int]]:
    """(peak live, peak held) at each batch size, from one call of the compiled `replay`."""
    if not batch_sizes:  # nothing to compile or load the compiled code for
        return []
    ids, tensor = np.unique(timeline.tensor, return_inverse=True)
    sizes = np.array([timeline.sizes(size) for size in batch_sizes], dtype=np.int64)
    peaks = replay(tensor.astype(np.int64), timeline.allocates.astype(np.bool_), sizes, len(ids))
    return [(int(live), int(held)) for live, held in peaks]


def peaks_on_grid(timeline: Timeline, batch_sizes: Sequence[int], allocator: str,
                  replays: Replays) -> tuple[np.ndarray, np.ndarray]:
    """Peak bytes of live tensors, and peak bytes the allocator holds beyond them, at each
    batch size; `replays` gives the peaks of live and of held bytes at a list of them."""
    sizes = np.asarray(batch_sizes, dtype=float)
    top = float(sizes.max())
    # the grid's sizes below the largest asked for, and the first at or above it (if any)
    grid = [size for size in GRID if size < top] + [size for size in GRID if size >= top][:1]
    missing = [size for size in grid if (allocator, size) not in timeline.peaks]
    timeline.peaks.update(((allocator, size), tuple(run)) for size, run in zip(missing, replays(timeline, missing)))
    runs = np.array([(live, held - live) for live, held in (timeline.peaks[(allocator, size)] for size in grid)],
                    dtype=float)
    monotone = np.maximum.accumulate(runs, axis=0)
    inside = np.stack([np.interp(sizes, grid, values) for values in monotone.T])
    beyond = monotone[-1][:, None] * sizes / grid[-1]
    first, second = np.where(sizes > grid[-1], beyond, inside)
    return first, second
