"""A replay of tensor lifetimes through a model of the C library's heap (glibc's malloc), as
PyTorch's CPU allocator calls it.

On a CPU, PyTorch asks the C library for every tensor (`posix_memalign`, 64-byte aligned) and
hands it back when the tensor dies. What the process then holds is not the live tensors: it
is every page of the heap below the highest top reached since the heap was last trimmed, in
use or free, plus the tensors mapped on their own. How much of that heap is free holes depends
on the order of sizes: `posix_memalign` asks malloc for the size plus its worst-case padding,
so a hole of exactly one tensor's size never serves another of that size, and the optimizer's
temporaries between its momentum buffers each leave one. Measured on a plain loop, the heap
held 105 MiB of holes after a ConvNeXt-Tiny step at batch size 2, a third of its live tensors.

The rules are those of glibc's `malloc/malloc.c` (2.26 on: the versions of Linux systems and
JetPacks), its default settings and the main arena: a request of n bytes is a chunk of n + 8
rounded up to 16 (at least 32); `posix_memalign(64)` asks malloc for a chunk 64 + 32 larger,
then frees the lead before the aligned address and the tail after the request. malloc takes
the smallest free chunk that fits (splitting off the rest), else the top where it holds the
chunk, else maps a chunk at or above the mmap threshold on its own, else grows the heap (128
KiB beyond what it needs). The threshold starts at 128 KiB and rises to the size of any mapped
chunk freed, up to 32 MiB; a freed chunk merges with its free neighbours and into the top,
which is trimmed back to 128 KiB when it exceeds twice the threshold. A tensor's pages count
once written, which the replay takes to be at allocation.

The replay is compiled (numba, cached beside this file) over flat arrays, all the batch sizes
of a query in one call, as the caching allocator's is (`perf4sight.features.caching_allocator`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numba
import numpy as np

from perf4sight.architecture import Timeline
from perf4sight.features.allocator_grid import compiled_replays, peaks_on_grid
from perf4sight.features.free_pool import insert, position, remove_at

__all__ = ["HeapPeaks", "heap_peaks", "heap_replay", "heap_replays"]

_MIN_CHUNK = 32
_SIZE_FIELD = 8
_HEADER = 16  # from a chunk's start to the address malloc returns
_ALIGNMENT = 64  # c10's alloc_cpu
_PAGE = 4096
_TOP_PAD = 128 << 10
_MMAP_THRESHOLD = 128 << 10
_MMAP_THRESHOLD_MAX = 32 << 20
_CONSOLIDATION = 64 << 10  # a freed chunk at least this large may trim the top
# A replay's scalars, in one array that its helpers update: free chunks in the pool, chunk
# rows used, the top's address, the heap's end (brk), the highest top since the last trim,
# the chunk next to the top (-1: none), bytes mapped, the mmap threshold, the trim threshold.
_COUNT, _ROWS, _TOP, _END, _TOUCHED, _LAST, _MAPPED, _THRESHOLD, _TRIM = range(9)


class HeapPeaks(NamedTuple):
    """The most a replay held, in bytes: in live tensors, and resident (heap pages and mappings)."""

    peak_live: int
    peak_resident: int


def heap_replay(timeline: Timeline, batch_size: int) -> HeapPeaks:
    """The heap's peaks after the timeline's events at `batch_size`."""
    return heap_replays(timeline, [batch_size])[0]


def heap_replays(timeline: Timeline, batch_sizes: Sequence[int]) -> list[HeapPeaks]:
    """The heap's peaks at each batch size, replayed in one compiled call."""
    return [HeapPeaks(*peaks) for peaks in compiled_replays(_replay, timeline, batch_sizes)]


def heap_peaks(timeline: Timeline, batch_sizes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Peak bytes of live tensors, and peak bytes resident beyond them (the heap's free holes
    and the padding of its chunks), at each batch size, both non-decreasing in it
    (`peaks_on_grid`): a larger batch's activations may fill holes a smaller one's left, but a
    prediction must not fall with the batch size."""
    return peaks_on_grid(timeline, batch_sizes, "c_heap", heap_replays)


@numba.njit(cache=True)
def _chunk(size: int) -> int:
    return max(_MIN_CHUNK, (size + _SIZE_FIELD + 15) // 16 * 16)


@numba.njit(cache=True)
def _pages(size: int) -> int:
    return -(-size // _PAGE) * _PAGE


@numba.njit(cache=True)
def _new_chunk(state: np.ndarray, address_of: np.ndarray, size_of: np.ndarray, prev_of: np.ndarray,
               next_of: np.ndarray, address: int, size: int, previous: int, following: int) -> int:
    """A row for the chunk at `address`, linked between its neighbours (-1: none)."""
    chunk = state[_ROWS]
    state[_ROWS] += 1
    address_of[chunk], size_of[chunk] = address, size
    prev_of[chunk], next_of[chunk] = previous, following
    if previous >= 0:
        next_of[previous] = chunk
    if following >= 0:
        prev_of[following] = chunk
    return chunk


@numba.njit(cache=True)
def _unpool(state: np.ndarray, pool: np.ndarray, size_of: np.ndarray, address_of: np.ndarray, chunk: int) -> None:
    place = position(pool, state[_COUNT], size_of, address_of, size_of[chunk], address_of[chunk])
    remove_at(pool, state[_COUNT], place)
    state[_COUNT] -= 1


@numba.njit(cache=True)
def _free(chunk: int, state: np.ndarray, pool: np.ndarray, address_of: np.ndarray, size_of: np.ndarray,
          prev_of: np.ndarray, next_of: np.ndarray, free_of: np.ndarray) -> None:
    """Free `chunk`: merged with its free neighbours, and into the top (trimmed) when next to it."""
    previous = prev_of[chunk]
    if previous >= 0 and free_of[previous]:
        _unpool(state, pool, size_of, address_of, previous)
        address_of[chunk] = address_of[previous]
        size_of[chunk] += size_of[previous]
        prev_of[chunk] = prev_of[previous]
        if prev_of[previous] >= 0:
            next_of[prev_of[previous]] = chunk
    following = next_of[chunk]
    if following >= 0 and free_of[following]:
        _unpool(state, pool, size_of, address_of, following)
        size_of[chunk] += size_of[following]
        next_of[chunk] = next_of[following]
        if next_of[following] >= 0:
            prev_of[next_of[following]] = chunk
    if next_of[chunk] >= 0:
        free_of[chunk] = True
        insert(pool, state[_COUNT], size_of, address_of, chunk)
        state[_COUNT] += 1
        return
    # the chunk next to the top: the top takes it back
    free_of[chunk] = False
    state[_TOP] = address_of[chunk]
    state[_LAST] = prev_of[chunk]
    if prev_of[chunk] >= 0:
        next_of[prev_of[chunk]] = -1
    if size_of[chunk] >= _CONSOLIDATION and state[_END] - state[_TOP] >= state[_TRIM]:
        state[_END] = _pages(state[_TOP] + _TOP_PAD + _MIN_CHUNK)
        state[_TOUCHED] = min(state[_TOUCHED], state[_END])


@numba.njit(cache=True)
def _from_top(state: np.ndarray, address_of: np.ndarray, size_of: np.ndarray, prev_of: np.ndarray,
              next_of: np.ndarray, free_of: np.ndarray, size: int) -> int:
    """A chunk of `size` carved from the top, the heap grown where the top is too small."""
    chunk = _new_chunk(state, address_of, size_of, prev_of, next_of, state[_TOP], size, state[_LAST], -1)
    free_of[chunk] = False
    state[_LAST] = chunk
    state[_TOP] += size
    if state[_TOP] + _MIN_CHUNK > state[_END]:
        state[_END] = _pages(state[_TOP] + _TOP_PAD + _MIN_CHUNK)
    state[_TOUCHED] = max(state[_TOUCHED], state[_TOP])
    return chunk


@numba.njit(cache=True)
def _malloc(state: np.ndarray, pool: np.ndarray, address_of: np.ndarray, size_of: np.ndarray,
            prev_of: np.ndarray, next_of: np.ndarray, free_of: np.ndarray, size: int) -> int:
    """The smallest free chunk that fits `size` (the rest split off), else the top where it
    holds it; -1 where malloc would ask the system."""
    place = position(pool, state[_COUNT], size_of, address_of, size, -1)
    if place < state[_COUNT]:
        chunk = pool[place]
        remove_at(pool, state[_COUNT], place)
        state[_COUNT] -= 1
        free_of[chunk] = False
        rest = size_of[chunk] - size
        if rest >= _MIN_CHUNK:
            remainder = _new_chunk(state, address_of, size_of, prev_of, next_of, address_of[chunk] + size,
                                   rest, chunk, next_of[chunk])
            size_of[chunk] = size
            free_of[remainder] = True
            insert(pool, state[_COUNT], size_of, address_of, remainder)
            state[_COUNT] += 1
        return chunk
    if state[_END] - state[_TOP] >= size + _MIN_CHUNK:
        return _from_top(state, address_of, size_of, prev_of, next_of, free_of, size)
    return -1


@numba.njit(cache=True)
def _replay(tensor: np.ndarray, allocates: np.ndarray, sizes: np.ndarray, tensors: int) -> np.ndarray:
    """(peak live, peak resident) for each row of `sizes` (the events' sizes at one batch size).

    Chunks are rows of a table, linked to their address neighbours by row (-1: none); a chunk
    merged into another is left unused. An allocation makes at most four rows (the chunk, a
    split's remainder, the lead and the tail)."""
    runs, events = sizes.shape
    rows = 4 * events + 4
    address_of = np.empty(rows, np.int64)
    size_of = np.empty(rows, np.int64)
    prev_of = np.empty(rows, np.int64)
    next_of = np.empty(rows, np.int64)
    free_of = np.zeros(rows, np.bool_)
    pool = np.empty(rows, np.int64)
    chunk_of = np.empty(tensors, np.int64)
    mapped_of = np.empty(tensors, np.int64)
    bytes_of = np.empty(tensors, np.int64)
    state = np.empty(9, np.int64)
    peaks = np.empty((runs, 2), np.int64)
    for run in range(runs):
        chunk_of[:] = -1
        mapped_of[:] = 0
        bytes_of[:] = 0
        state[:] = 0
        state[_LAST] = -1
        state[_THRESHOLD] = _MMAP_THRESHOLD
        state[_TRIM] = 2 * _MMAP_THRESHOLD
        live = peak_live = peak_resident = 0
        for event in range(events):
            owner = tensor[event]
            if not allocates[event]:
                live -= bytes_of[owner]
                bytes_of[owner] = 0
                if chunk_of[owner] >= 0:
                    _free(chunk_of[owner], state, pool, address_of, size_of, prev_of, next_of, free_of)
                    chunk_of[owner] = -1
                elif mapped_of[owner] > 0:
                    state[_MAPPED] -= mapped_of[owner]
                    if state[_THRESHOLD] < mapped_of[owner] <= _MMAP_THRESHOLD_MAX:
                        state[_THRESHOLD] = mapped_of[owner]
                        state[_TRIM] = 2 * mapped_of[owner]
                    mapped_of[owner] = 0
                continue
            if sizes[run, event] == 0:  # no storage: nothing asked of malloc
                continue
            request = _chunk(sizes[run, event])
            padded = _chunk(request + _ALIGNMENT + _MIN_CHUNK)
            chunk = _malloc(state, pool, address_of, size_of, prev_of, next_of, free_of, padded)
            if chunk < 0 and padded >= state[_THRESHOLD]:
                mapped_of[owner] = _pages(padded + _SIZE_FIELD)
                state[_MAPPED] += mapped_of[owner]
            else:
                if chunk < 0:
                    chunk = _from_top(state, address_of, size_of, prev_of, next_of, free_of, padded)
                lead = (_ALIGNMENT - (address_of[chunk] + _HEADER) % _ALIGNMENT) % _ALIGNMENT
                if lead:
                    lead += _ALIGNMENT if lead < _MIN_CHUNK else 0
                    piece = _new_chunk(state, address_of, size_of, prev_of, next_of, address_of[chunk], lead,
                                       prev_of[chunk], chunk)
                    address_of[chunk] += lead
                    size_of[chunk] -= lead
                    _free(piece, state, pool, address_of, size_of, prev_of, next_of, free_of)
                if size_of[chunk] - request >= _MIN_CHUNK:
                    piece = _new_chunk(state, address_of, size_of, prev_of, next_of, address_of[chunk] + request,
                                       size_of[chunk] - request, chunk, next_of[chunk])
                    size_of[chunk] = request
                    if state[_LAST] == chunk:
                        state[_LAST] = piece
                    _free(piece, state, pool, address_of, size_of, prev_of, next_of, free_of)
                chunk_of[owner] = chunk
            bytes_of[owner] = sizes[run, event]
            live += sizes[run, event]
            peak_live = max(peak_live, live)
            peak_resident = max(peak_resident, state[_TOUCHED] + state[_MAPPED])
        peaks[run, 0] = peak_live
        peaks[run, 1] = peak_resident
    return peaks
