"""The compiled caching-allocator replay: its rules, and its peaks against a plain Python
replay of the same rules on real and random timelines (identical to the byte)."""

from __future__ import annotations

import bisect
from pathlib import Path

import numpy as np
import pytest

from perf4sight.architecture import Detail, Timeline
from perf4sight.config import NetworkDatasetSettings
from perf4sight.features.caching_allocator import AllocatorPeaks, replay, replays
from perf4sight.networks import create_network_dataset, load_architecture

MIB = 1 << 20
NETWORKS = ("resnet18", "mobilenet_v2", "googlenet", "squeezenet1_0")
# The grid `replay_peaks` replays at, and sizes between its points and beyond it.
BATCH_SIZES = sorted({1, *(2**k for k in range(1, 17)), *(3 * 2**k for k in range(15)),
                      5, 7, 10, 13, 17, 31, 33, 57, 100, 129, 200, 255, 1000, 70000})


# a plain Python replay of the allocator's rules (the implementation the compiled one replaced)

class _Block:
    def __init__(self, address: int, size: int, small: bool) -> None:
        self.address, self.size, self.small = address, size, small
        self.prev: _Block | None = None
        self.next: _Block | None = None
        self.free = True


class _ReferenceAllocator:
    """Blocks linked to their neighbours, each pool's free blocks a list sorted by (size, address)."""

    def __init__(self) -> None:
        self.pools: dict[bool, list[tuple[int, int, _Block]]] = {True: [], False: []}
        self.blocks: dict[int, _Block] = {}
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0

    def malloc(self, tensor: int, nbytes: int) -> None:
        size = max(512, -(-nbytes // 512) * 512)
        small = size <= MIB
        pool = self.pools[small]
        index = bisect.bisect_left(pool, (size, -1))  # the smallest that fits, then the lowest address
        if index < len(pool):
            block = pool.pop(index)[2]
        else:
            segment = 2 * MIB if small else 20 * MIB if size < 10 * MIB else -(-size // (2 * MIB)) * 2 * MIB
            block = _Block(self.reserved, segment, small)
            self.reserved += segment
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        rest = block.size - size
        if (rest >= 512) if small else (rest > MIB):
            remainder = _Block(block.address + size, rest, small)
            remainder.prev, remainder.next = block, block.next
            if block.next is not None:
                block.next.prev = remainder
            block.next = remainder
            block.size = size
            bisect.insort(pool, (remainder.size, remainder.address, remainder))
        block.free = False
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.blocks[tensor] = block

    def free(self, tensor: int) -> None:
        block = self.blocks.pop(tensor, None)
        if block is None:
            return
        self.allocated -= block.size
        block.free = True
        pool = self.pools[block.small]
        previous, following = block.prev, block.next
        if previous is not None and previous.free:
            pool.remove((previous.size, previous.address, previous))
            block.address = previous.address
            block.size += previous.size
            block.prev = previous.prev
            if previous.prev is not None:
                previous.prev.next = block
        if following is not None and following.free:
            pool.remove((following.size, following.address, following))
            block.size += following.size
            block.next = following.next
            if following.next is not None:
                following.next.prev = block
        bisect.insort(pool, (block.size, block.address, block))


def _reference(timeline: Timeline, batch_size: int) -> AllocatorPeaks:
    allocator = _ReferenceAllocator()
    events = zip(timeline.tensor.tolist(), timeline.allocates.tolist(), timeline.sizes(batch_size).tolist())
    for tensor, allocates, size in events:
        if not allocates:
            allocator.free(tensor)
        elif size:
            allocator.malloc(tensor, size)
    return AllocatorPeaks(allocator.peak_allocated, allocator.peak_reserved)


def _both(timeline: Timeline, batch_sizes: list[int]) -> tuple[list[AllocatorPeaks], list[AllocatorPeaks]]:
    """The compiled replay's peaks at each batch size, and the reference's."""
    return replays(timeline, batch_sizes), [_reference(timeline, size) for size in batch_sizes]


# the rules ------------------------------------------------------------------------------------

def _peaks(events: list[int | tuple[int, int]]) -> AllocatorPeaks:
    """The replay's peaks after `events`: (tensor, bytes) allocates, a bare tensor frees."""
    allocates = [isinstance(event, tuple) for event in events]
    tensor = [event[0] if isinstance(event, tuple) else event for event in events]
    nbytes = [event[1] if isinstance(event, tuple) else 0 for event in events]
    timeline = Timeline(tensor=np.array(tensor, dtype=np.int64), allocates=np.array(allocates),
                        fixed_bytes=np.array(nbytes, dtype=np.int64), per_sample_bytes=np.zeros(len(events), np.int64))
    peaks = replay(timeline, 1)
    assert peaks == _reference(timeline, 1)
    return peaks


def test_small_requests_share_a_2_mib_segment_and_large_ones_get_their_own():
    events = [(0, 100), (1, 1000)]  # rounded to 512 and 1024 bytes, from one new 2 MiB segment
    assert _peaks(events) == (512 + 1024, 2 * MIB)
    events += [(2, 3 * MIB), (3, 11 * MIB)]  # a 20 MiB segment for requests between 1 and 10 MiB, then the 17 MiB left
    assert _peaks(events).peak_reserved == (2 + 20) * MIB
    events.append((4, 11 * MIB + 1))  # a segment of its own, rounded up to 2 MiB: 12 MiB
    assert _peaks(events).peak_reserved == (2 + 20 + 12) * MIB


def test_a_freed_block_serves_a_smaller_request_but_not_a_larger_one():
    events = [(0, 40 * MIB), 0, (1, 30 * MIB)]  # fits in the cached 40 MiB segment (split)
    assert _peaks(events).peak_reserved == 40 * MIB
    events.append((2, 10 * MIB))  # the 10 MiB left over after the split
    assert _peaks(events).peak_reserved == 40 * MIB
    events += [1, 2, (3, 40 * MIB)]  # 2 merges with its free neighbour: 40 MiB in one block again
    assert _peaks(events).peak_reserved == 40 * MIB
    events.append((4, 50 * MIB))  # nothing cached fits: a new segment
    assert _peaks(events) == (90 * MIB, 90 * MIB)


def test_growing_requests_after_frees_fragment_the_cache():
    """Gradients in backward come in the reverse order of the activations: none fits."""
    events: list[int | tuple[int, int]] = [(tensor, size * MIB) for tensor, size in enumerate((40, 30, 20))]
    for tensor, size in zip((0, 1, 2), (20, 30, 40)):
        events += [tensor, (10 + tensor, (size + 5) * MIB)]
    peaks = _peaks(events)
    assert peaks.peak_allocated < peaks.peak_reserved


# the same peaks as the reference --------------------------------------------------------------

@pytest.fixture(scope="module")
def real_timelines(tmp_path_factory) -> dict[str, Timeline]:
    """Each network's training and inference timelines, and those of a pruned spec of each."""
    specs = tmp_path_factory.mktemp("specs")
    create_network_dataset(NetworkDatasetSettings(networks=list(NETWORKS), pruning_perc=[50], model_path=specs))
    sources = [*NETWORKS, *sorted(specs.glob("*.json"))]
    return {f"{Path(str(source)).stem} {stage}": load_architecture(source, needs=Detail.LIFETIMES, stage=stage)
            .lifetimes[stage] for source in sources for stage in ("training", "inference")}


@pytest.mark.slow
def test_real_timelines_replay_as_the_reference_does(real_timelines):
    assert len(real_timelines) == 4 * len(NETWORKS)
    for name, timeline in real_timelines.items():
        compiled, reference = _both(timeline, BATCH_SIZES)
        assert compiled == reference, name
    assert all(type(peak) is int for run in compiled for peak in run)  # as Python's, kept with the timeline
    # the replays split, merge and reuse blocks: the reserved peak is above the live one
    assert all(run.peak_reserved > run.peak_allocated for run in replays(real_timelines["resnet18 training"], [1, 64]))


def _random_timeline(seed: int, events: int = 400) -> Timeline:
    """Allocations and frees in random order, of sizes at and between the allocator's
    boundaries (512 bytes, 1 MiB, 2 MiB, 10 MiB, 20 MiB), some growing with the batch size,
    some of no bytes; tensor ids sparse, and some used again after their free."""
    rng = np.random.default_rng(seed)
    boundaries = np.array([512, MIB, 2 * MIB, 10 * MIB, 20 * MIB])
    live: list[int] = []
    freed: list[int] = []
    rows = []
    for _ in range(events):
        if live and rng.random() < 0.45:
            tensor = live.pop(int(rng.integers(len(live))))
            freed.append(tensor)
            rows.append((tensor, False, 0, 0))
            continue
        tensor = freed.pop(int(rng.integers(len(freed)))) if freed and rng.random() < 0.2 else 7 * len(rows) + 1000
        live.append(tensor)
        kind = rng.random()
        if kind < 0.05:
            fixed = per_sample = 0
        elif kind < 0.5:  # at a boundary, give or take a few bytes
            fixed, per_sample = int(rng.choice(boundaries)) + int(rng.integers(-3, 4)), 0
        else:
            fixed = int(np.exp(rng.uniform(0, np.log(40 * MIB))))
            per_sample = int(np.exp(rng.uniform(0, np.log(4 * MIB)))) if rng.random() < 0.6 else 0
        rows.append((tensor, True, fixed, per_sample))
    tensor, allocates, fixed, per_sample = (np.array(column) for column in zip(*rows))
    return Timeline(tensor=tensor.astype(np.int64), allocates=allocates.astype(bool),
                    fixed_bytes=fixed.astype(np.int64), per_sample_bytes=per_sample.astype(np.int64))


@pytest.mark.parametrize("seed", range(40))
def test_random_timelines_replay_as_the_reference_does(seed):
    timeline = _random_timeline(seed)
    sizes = timeline.sizes(1)[timeline.allocates]
    assert (sizes <= MIB).any() and (sizes > 10 * MIB).any()  # both pools, and segments of their own
    compiled, reference = _both(timeline, [1, 2, 3, 5, 8, 64, 1000])
    assert compiled == reference


def test_an_empty_timeline_holds_nothing():
    empty = np.zeros(0, np.int64)
    assert replays(Timeline(empty, empty.astype(bool), empty, empty), [1, 8]) == [(0, 0), (0, 0)]
    assert replays(Timeline(empty, empty.astype(bool), empty, empty), []) == []
