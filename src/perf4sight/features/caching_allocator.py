"""A replay of tensor lifetimes through a model of PyTorch's CUDA caching allocator.

The allocator never returns memory to the device during training: it keeps every segment
it once asked for and serves later requests from the free blocks in them. A request
takes the smallest free block that fits (splitting off the rest when enough is left) or
else a new segment; a freed block merges with free neighbours in its segment. So what it
holds at the end is the peak of the segments, which exceeds the peak of live tensors by
however badly the order of sizes fits the freed blocks: in backward, the gradients of a
plain chain of layers come in the reverse order of the activations, and a freed small
block serves no larger request.

The rules are those of `c10/cuda/CUDACachingAllocator.cpp` (the default configuration):
sizes rounded up to 512 bytes; requests up to 1 MiB served from 2 MiB segments of a small
pool, up to 10 MiB from 20 MiB segments, larger ones from a segment of their own rounded
up to 2 MiB; a block is split when the rest is at least 512 bytes (small pool) or more
than 1 MiB (large pool). The cache starts empty, as the profiler empties it before a
memory test.

The replay is compiled (numba, cached beside this file) over flat arrays, all the batch sizes
of a query in one call: in Python it cost 1.5-2 us per event, 10-90 ms for the 16 replays of
one network's query. The first call in a process loads the compiled code (0.1-0.3 s) or,
where no cache is, compiles it (3-4 s).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numba
import numpy as np

from perf4sight.architecture import Timeline
from perf4sight.features.allocator_grid import compiled_replays, peaks_on_grid
from perf4sight.features.free_pool import insert, position, remove_at

__all__ = ["AllocatorPeaks", "replay", "replay_peaks", "replays"]

_MIN_BLOCK = 512
_SMALL_SIZE = 1 << 20
_SMALL_BUFFER = 2 << 20
_LARGE_BUFFER = 20 << 20
_MIN_LARGE_ALLOC = 10 << 20
_ROUND_LARGE = 2 << 20


class AllocatorPeaks(NamedTuple):
    """The most the allocator held during a replay, in bytes: in live blocks, and in segments."""

    peak_allocated: int
    peak_reserved: int


def replay(timeline: Timeline, batch_size: int) -> AllocatorPeaks:
    """The allocator's peaks after the timeline's events at `batch_size`."""
    return replays(timeline, [batch_size])[0]


def replays(timeline: Timeline, batch_sizes: Sequence[int]) -> list[AllocatorPeaks]:
    """The allocator's peaks at each batch size, replayed in one compiled call (a Python loop
    over the events cost 1.5-2 us each, and a query replays 16 batch sizes)."""
    return [AllocatorPeaks(*peaks) for peaks in compiled_replays(_replay, timeline, batch_sizes)]


def replay_peaks(timeline: Timeline, batch_sizes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Peak bytes of live tensors, and peak bytes reserved beyond them, at each batch size,
    non-decreasing in it (`peaks_on_grid`)."""
    return peaks_on_grid(timeline, batch_sizes, "cuda_caching", replays)


@numba.njit(cache=True)
def _rounded(size: int) -> int:
    return _MIN_BLOCK if size < _MIN_BLOCK else -(-size // _MIN_BLOCK) * _MIN_BLOCK


@numba.njit(cache=True)
def _segment_size(size: int) -> int:
    if size <= _SMALL_SIZE:
        return _SMALL_BUFFER
    if size < _MIN_LARGE_ALLOC:
        return _LARGE_BUFFER
    return -(-size // _ROUND_LARGE) * _ROUND_LARGE


@numba.njit(cache=True)
def _replay(tensor: np.ndarray, allocates: np.ndarray, sizes: np.ndarray, tensors: int) -> np.ndarray:
    """(peak allocated, peak reserved) for each row of `sizes` (the events' sizes at one batch size).

    Blocks are rows of a table, linked to their neighbours in a segment by row (-1: none); a
    block merged into a neighbour is left unused. Pool 1 holds the small pool's free blocks,
    pool 0 the large pool's. A request makes at most two blocks (a segment and a split's
    remainder), so the table needs at most twice as many rows as there are events.
    """
    runs, events = sizes.shape
    rows = 2 * events
    address_of = np.empty(rows, np.int64)
    size_of = np.empty(rows, np.int64)
    pool_of = np.empty(rows, np.int64)
    prev_of = np.empty(rows, np.int64)
    next_of = np.empty(rows, np.int64)
    free_of = np.empty(rows, np.bool_)
    pools = np.empty((2, rows), np.int64)
    counts = np.empty(2, np.int64)
    block_of = np.empty(tensors, np.int64)
    peaks = np.empty((runs, 2), np.int64)
    for run in range(runs):
        block_of[:] = -1
        counts[:] = 0
        blocks = allocated = reserved = peak_allocated = peak_reserved = 0
        for event in range(events):
            if not allocates[event]:
                block = block_of[tensor[event]]
                if block < 0:  # a storage of no bytes
                    continue
                block_of[tensor[event]] = -1
                allocated -= size_of[block]
                free_of[block] = True
                kind = pool_of[block]
                previous, following = prev_of[block], next_of[block]
                if previous >= 0 and free_of[previous]:
                    place = position(pools[kind], counts[kind], size_of, address_of,
                                      size_of[previous], address_of[previous])
                    remove_at(pools[kind], counts[kind], place)
                    counts[kind] -= 1
                    address_of[block] = address_of[previous]
                    size_of[block] += size_of[previous]
                    prev_of[block] = prev_of[previous]
                    if prev_of[previous] >= 0:
                        next_of[prev_of[previous]] = block
                if following >= 0 and free_of[following]:
                    place = position(pools[kind], counts[kind], size_of, address_of,
                                      size_of[following], address_of[following])
                    remove_at(pools[kind], counts[kind], place)
                    counts[kind] -= 1
                    size_of[block] += size_of[following]
                    next_of[block] = next_of[following]
                    if next_of[following] >= 0:
                        prev_of[next_of[following]] = block
                insert(pools[kind], counts[kind], size_of, address_of, block)
                counts[kind] += 1
                continue
            if sizes[run, event] == 0:
                continue
            size = _rounded(sizes[run, event])
            small = size <= _SMALL_SIZE
            kind = 1 if small else 0
            # the smallest free block that fits, then the lowest address (addresses are >= 0)
            place = position(pools[kind], counts[kind], size_of, address_of, size, -1)
            if place < counts[kind]:
                block = pools[kind, place]
                remove_at(pools[kind], counts[kind], place)
                counts[kind] -= 1
            else:
                # Segments take addresses in the order they are made, as from an empty device.
                block = blocks
                blocks += 1
                address_of[block] = reserved
                size_of[block] = _segment_size(size)
                pool_of[block] = kind
                prev_of[block] = next_of[block] = -1
                reserved += size_of[block]
                peak_reserved = max(peak_reserved, reserved)
            rest = size_of[block] - size
            if (rest >= _MIN_BLOCK) if small else (rest > _SMALL_SIZE):
                remainder = blocks
                blocks += 1
                address_of[remainder] = address_of[block] + size
                size_of[remainder] = rest
                pool_of[remainder] = kind
                prev_of[remainder] = block
                next_of[remainder] = next_of[block]
                free_of[remainder] = True
                if next_of[block] >= 0:
                    prev_of[next_of[block]] = remainder
                next_of[block] = remainder
                size_of[block] = size
                insert(pools[kind], counts[kind], size_of, address_of, remainder)
                counts[kind] += 1
            free_of[block] = False
            allocated += size_of[block]
            peak_allocated = max(peak_allocated, allocated)
            block_of[tensor[event]] = block
        peaks[run, 0] = peak_allocated
        peaks[run, 1] = peak_reserved
    return peaks
