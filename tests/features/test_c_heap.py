"""The compiled replay of the C library's heap: its rules, and its peaks against a plain Python
replay of the same rules on real and random timelines (identical to the byte)."""

from __future__ import annotations

import bisect

import numpy as np
import pytest

from perf4sight.architecture import Detail, Timeline
from perf4sight.features import FEATURE_SETS, feature_table
from perf4sight.features.c_heap import HeapPeaks, heap_peaks, heap_replay, heap_replays
from perf4sight.features.network import FRESH_PAGES_MS, PROCESS_MEMORY_COLUMNS
from perf4sight.networks import load_architecture

KIB, MIB = 1 << 10, 1 << 20
PAGE, TOP_PAD, MIN_CHUNK, ALIGNMENT = 4096, 128 * KIB, 32, 64


def _chunk(size: int) -> int:
    return max(MIN_CHUNK, (size + 8 + 15) // 16 * 16)


def _pages(size: int) -> int:
    return -(-size // PAGE) * PAGE


class _ReferenceHeap:
    """glibc's main arena as dictionaries of free chunks by start and end, and a list sorted by
    (size, address); the top an address, the heap's end another."""

    def __init__(self) -> None:
        self.by_size: list[tuple[int, int]] = []
        self.starts: dict[int, int] = {}
        self.ends: dict[int, int] = {}
        self.top = self.end = self.touched = self.mapped = 0
        self.threshold, self.trim = 128 * KIB, 256 * KIB

    def _take(self, address: int) -> int:
        size = self.starts.pop(address)
        del self.ends[address + size]
        self.by_size.remove((size, address))
        return size

    def free(self, address: int, size: int) -> None:
        if address in self.ends:
            previous = self.ends[address]
            size += self._take(previous)
            address = previous
        if address + size in self.starts:
            size += self._take(address + size)
        if address + size != self.top:
            self.starts[address], self.ends[address + size] = size, address
            bisect.insort(self.by_size, (size, address))
            return
        self.top = address
        if size >= 64 * KIB and self.end - self.top >= self.trim:
            self.end = _pages(self.top + TOP_PAD + MIN_CHUNK)
            self.touched = min(self.touched, self.end)

    def _carve(self, size: int) -> tuple[int, int]:
        address = self.top
        self.top += size
        if self.top + MIN_CHUNK > self.end:
            self.end = _pages(self.top + TOP_PAD + MIN_CHUNK)
        self.touched = max(self.touched, self.top)
        return address, size

    def memalign(self, nbytes: int) -> tuple[str, int, int]:
        request = _chunk(nbytes)
        padded = _chunk(request + ALIGNMENT + MIN_CHUNK)
        index = bisect.bisect_left(self.by_size, (padded, -1))
        if index < len(self.by_size):
            size, address = self.by_size[index]
            self._take(address)
            if size - padded >= MIN_CHUNK:
                rest = (address + padded, size - padded)
                self.starts[rest[0]], self.ends[rest[0] + rest[1]] = rest[1], rest[0]
                bisect.insort(self.by_size, (rest[1], rest[0]))
                size = padded
        elif self.end - self.top >= padded + MIN_CHUNK:
            address, size = self._carve(padded)
        elif padded >= self.threshold:
            mapped = _pages(padded + 8)
            self.mapped += mapped
            return "mapped", mapped, 0
        else:
            address, size = self._carve(padded)
        lead = -(address + 16) % ALIGNMENT
        if lead:
            lead += ALIGNMENT if lead < MIN_CHUNK else 0
            self.free(address, lead)
            address, size = address + lead, size - lead
        if size - request >= MIN_CHUNK:
            self.free(address + request, size - request)
            size = request
        return "heap", address, size

    def release(self, where: tuple[str, int, int]) -> None:
        if where[0] == "heap":
            self.free(where[1], where[2])
            return
        self.mapped -= where[1]
        if self.threshold < where[1] <= 32 * MIB:
            self.threshold, self.trim = where[1], 2 * where[1]


def _reference(timeline: Timeline, batch_size: int) -> HeapPeaks:
    heap, held, nbytes = _ReferenceHeap(), {}, {}
    live = peak_live = peak_resident = 0
    for tensor, allocates, size in zip(timeline.tensor.tolist(), timeline.allocates.tolist(),
                                       timeline.sizes(batch_size).tolist()):
        if not allocates:
            if tensor in held:
                heap.release(held.pop(tensor))
                live -= nbytes.pop(tensor)
            continue
        if size:
            held[tensor], nbytes[tensor] = heap.memalign(size), size
            live += size
            peak_live, peak_resident = max(peak_live, live), max(peak_resident, heap.touched + heap.mapped)
    return HeapPeaks(peak_live, peak_resident)


def _timeline(events: list[int | tuple[int, int]]) -> Timeline:
    """(tensor, bytes) allocates, a bare tensor frees."""
    allocates = [isinstance(event, tuple) for event in events]
    tensor = [event[0] if isinstance(event, tuple) else event for event in events]
    nbytes = [event[1] if isinstance(event, tuple) else 0 for event in events]
    return Timeline(tensor=np.array(tensor, dtype=np.int64), allocates=np.array(allocates),
                    fixed_bytes=np.array(nbytes, dtype=np.int64), per_sample_bytes=np.zeros(len(events), np.int64))


def _peaks(events: list[int | tuple[int, int]]) -> HeapPeaks:
    timeline = _timeline(events)
    peaks = heap_replay(timeline, 1)
    assert peaks == _reference(timeline, 1)
    return peaks


# the rules ------------------------------------------------------------------------------------

def _step(size: int, count: int) -> list[int | tuple[int, int]]:
    """An optimizer's first step as SGD takes it: per parameter, a temporary (the decayed
    gradient), its momentum buffer kept, the temporary freed; after a 4 MiB tensor mapped and
    freed, which raises the mmap threshold above `size`."""
    events: list[int | tuple[int, int]] = [(0, 4 * MIB), 0]
    for i in range(count):
        events += [(1000 + i, size), (2000 + i, size), 1000 + i]
    return events


def test_a_temporary_between_kept_buffers_leaves_a_hole_no_request_of_its_size_fits():
    peaks = _peaks(_step(MIB, 8))
    assert peaks.peak_live == 9 * MIB  # eight buffers and a temporary
    assert peaks.peak_resident - 8 * MIB == pytest.approx(8 * MIB, rel=0.01)  # a hole beside each buffer


def test_a_hole_serves_a_smaller_request():
    events = [(0, 4 * MIB), 0]
    for i in range(8):  # each temporary smaller than the one before: it fits that one's hole
        events += [(1000 + i, MIB - i * 64 * KIB), (2000 + i, MIB), 1000 + i]
    peaks = _peaks(events)
    kept = 8 * MIB
    assert peaks.peak_resident - kept < 1.1 * MIB


def test_requests_beyond_the_thresholds_reach_are_always_mapped_and_leave_no_holes():
    mapped = _peaks([(0, MIB)])  # the heap is empty: at or above 128 KiB, a mapping of its own
    assert mapped.peak_resident == _pages(_chunk(_chunk(MIB) + ALIGNMENT + MIN_CHUNK) + 8)
    peaks = _peaks(_step(40 * MIB, 4))  # above 32 MiB the threshold never reaches: each mapped
    assert peaks.peak_resident - peaks.peak_live < MIB


def test_a_freed_chunk_beside_the_top_returns_to_it():
    # allocated and freed in turn, each from the top and back: resident as one
    assert _peaks([(0, 100 * KIB), 0, (1, 100 * KIB), 1, (2, 100 * KIB)]).peak_resident < 200 * KIB


# against the reference ----------------------------------------------------------------------

def _random_timeline(seed: int, events: int = 400) -> Timeline:
    """Allocations and frees in random order, sizes from bytes to megabytes, per sample or fixed."""
    rng = np.random.default_rng(seed)
    rows, live = [], []
    for _ in range(events):
        if live and rng.random() < 0.45:
            tensor = live.pop(int(rng.integers(len(live))))
            rows.append((tensor, False, 0, 0))
            continue
        tensor = len(rows) + 1
        fixed = int(np.exp(rng.uniform(0, np.log(8 * MIB))))
        per_sample = int(np.exp(rng.uniform(0, np.log(MIB)))) if rng.random() < 0.6 else 0
        rows.append((tensor, True, fixed, per_sample))
        live.append(tensor)
    tensor, allocates, fixed, per_sample = (np.array(column) for column in zip(*rows))
    return Timeline(tensor=tensor.astype(np.int64), allocates=allocates.astype(bool),
                    fixed_bytes=fixed.astype(np.int64), per_sample_bytes=per_sample.astype(np.int64))


@pytest.mark.parametrize("seed", range(6))
def test_random_timelines_replay_as_the_reference_does(seed):
    timeline = _random_timeline(seed)
    sizes = [1, 2, 3, 8, 32]
    assert heap_replays(timeline, sizes) == [_reference(timeline, size) for size in sizes]


@pytest.fixture(scope="module")
def resnet18():
    return load_architecture("resnet18", needs=Detail.LIFETIMES, stage="training", input_size=(3, 32, 32))


def test_a_real_timeline_replays_as_the_reference_does(resnet18):
    timeline = resnet18.lifetimes["training"]
    sizes = [1, 2, 8, 32, 96]
    assert heap_replays(timeline, sizes) == [_reference(timeline, size) for size in sizes]


def test_the_heap_features_never_fall_with_the_batch_size(resnet18):
    sizes = [1, 2, 3, 5, 8, 13, 32, 100]
    live, holes = heap_peaks(resnet18.lifetimes["training"], sizes)
    assert (holes >= 0).all() and (np.diff(holes) >= 0).all() and (np.diff(live) >= 0).all()
    table = FEATURE_SETS["heap"](resnet18, sizes, "training")
    assert table["heap_hole_bytes"].tolist() == holes.tolist()
    # what the heap holds beyond the live tensors: some of resnet18's step leaves holes
    assert holes.max() > MIB


def test_the_holes_count_only_where_the_process_memory_is_measured(resnet18):
    sizes = [2, 8]
    cpu = feature_table(resnet18, sizes, "heap", "training", fresh_pages_ms_per_mib=0.1)
    gpu = feature_table(resnet18, sizes, "heap", "training")  # no fresh pages measured: a GPU's profiler
    assert (cpu["heap_hole_bytes"] > 0).all() and (gpu["heap_hole_bytes"] == 0).all()
    assert gpu.drop(columns=list(PROCESS_MEMORY_COLUMNS) + [FRESH_PAGES_MS]).equals(
        cpu.drop(columns=list(PROCESS_MEMORY_COLUMNS) + [FRESH_PAGES_MS]))
