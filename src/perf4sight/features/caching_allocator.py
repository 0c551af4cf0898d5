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
"""

from __future__ import annotations

import bisect
import gc
from collections.abc import Sequence

import numpy as np

from perf4sight.architecture import Timeline

__all__ = ["AllocatorPeaks", "replay", "replay_peaks"]

_MIN_BLOCK = 512
_SMALL_SIZE = 1 << 20
_SMALL_BUFFER = 2 << 20
_LARGE_BUFFER = 20 << 20
_MIN_LARGE_ALLOC = 10 << 20
_ROUND_LARGE = 2 << 20
# Batch sizes the peaks are replayed at (`replay_peaks`): 1, 2, 3, 4, 6, 8, 12, ... 65536.
_GRID = tuple(sorted({1, *(2**k for k in range(1, 17)), *(3 * 2**k for k in range(15))}))


class _Block:
    __slots__ = ("address", "size", "small", "prev", "next", "free")

    def __init__(self, address: int, size: int, small: bool) -> None:
        self.address = address
        self.size = size
        self.small = small
        self.prev: _Block | None = None
        self.next: _Block | None = None
        self.free = True


def _rounded(size: int) -> int:
    return _MIN_BLOCK if size < _MIN_BLOCK else -(-size // _MIN_BLOCK) * _MIN_BLOCK


def _segment_size(size: int) -> int:
    if size <= _SMALL_SIZE:
        return _SMALL_BUFFER
    if size < _MIN_LARGE_ALLOC:
        return _LARGE_BUFFER
    return -(-size // _ROUND_LARGE) * _ROUND_LARGE


class AllocatorPeaks:
    """The allocator's state as allocations and frees are replayed; peaks in bytes."""

    def __init__(self) -> None:
        # free blocks by (size, address): the allocator picks the smallest, then the lowest
        self._pools: dict[bool, list[tuple[int, int, _Block]]] = {True: [], False: []}
        self._blocks: dict[int, _Block] = {}
        self.allocated = self.reserved = 0
        self.peak_allocated = self.peak_reserved = 0

    def malloc(self, tensor: int, nbytes: int) -> None:
        size = _rounded(nbytes)
        small = size <= _SMALL_SIZE
        pool = self._pools[small]
        index = bisect.bisect_left(pool, (size, -1))
        if index < len(pool):
            block = pool.pop(index)[2]
        else:
            # Segments take addresses in the order they are made, as from an empty device.
            block = _Block(self.reserved, _segment_size(size), small)
            self.reserved += block.size
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        rest = block.size - size
        if (rest >= _MIN_BLOCK) if small else (rest > _SMALL_SIZE):
            remainder = _Block(block.address + size, rest, small)
            remainder.prev, remainder.next = block, block.next
            if block.next is not None:
                block.next.prev = remainder
            block.next = remainder
            block.size = size
            self._insert(remainder)
        block.free = False
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self._blocks[tensor] = block

    def free(self, tensor: int) -> None:
        block = self._blocks.pop(tensor, None)
        if block is None:  # a storage of no bytes
            return
        self.allocated -= block.size
        block.free = True
        previous, following = block.prev, block.next
        if previous is not None and previous.free:
            self._remove(previous)
            block.address = previous.address
            block.size += previous.size
            block.prev = previous.prev
            if previous.prev is not None:
                previous.prev.next = block
        if following is not None and following.free:
            self._remove(following)
            block.size += following.size
            block.next = following.next
            if following.next is not None:
                following.next.prev = block
        self._insert(block)

    def _insert(self, block: _Block) -> None:
        bisect.insort(self._pools[block.small], (block.size, block.address, block))

    def _remove(self, block: _Block) -> None:
        pool = self._pools[block.small]
        del pool[bisect.bisect_left(pool, (block.size, block.address))]


def replay(timeline: Timeline, batch_size: int) -> AllocatorPeaks:
    """The allocator after the timeline's events at `batch_size`."""
    allocator = AllocatorPeaks()
    sizes = timeline.sizes(batch_size).tolist()
    # The blocks link to their neighbours: garbage collections of the process's whole heap,
    # which the new blocks would trigger, cost more than the replay (up to 30 ms each).
    collecting = gc.isenabled()
    gc.disable()
    try:
        for tensor, allocates, size in zip(timeline.tensor.tolist(), timeline.allocates.tolist(), sizes):
            if not allocates:
                allocator.free(tensor)
            elif size:
                allocator.malloc(tensor, size)
    finally:
        if collecting:
            gc.enable()
    return allocator


def replay_peaks(timeline: Timeline, batch_sizes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Peak bytes of live tensors, and peak bytes reserved beyond them, at each batch size.

    An allocator's peaks do not always grow with the batch size (a larger request may split
    a cached block where a smaller one did not), but predictions must: each peak is replayed
    at the batch sizes of `_GRID` up to the largest asked for, made non-decreasing (the
    running maximum), and interpolated between them (beyond the grid, in proportion). The
    replays are kept with the timeline: another query of it replays only new grid sizes.
    """
    sizes = np.asarray(batch_sizes, dtype=float)
    top = float(sizes.max())
    # the grid's sizes below the largest asked for, and the first at or above it (if any)
    grid = [size for size in _GRID if size < top] + [size for size in _GRID if size >= top][:1]
    for size in grid:
        if size not in timeline.peaks:
            run = replay(timeline, size)
            timeline.peaks[size] = (run.peak_allocated, run.peak_reserved)
    runs = [timeline.peaks[size] for size in grid]
    allocated = np.maximum.accumulate([peak for peak, _ in runs])
    cached = np.maximum.accumulate([reserved - peak for peak, reserved in runs])

    def at(values: np.ndarray) -> np.ndarray:
        inside = np.interp(sizes, grid, values)
        return np.where(sizes > grid[-1], values[-1] * sizes / grid[-1], inside)

    return at(allocated.astype(float)), at(cached.astype(float))
