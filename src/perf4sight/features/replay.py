"""Whole-network features plus an allocator's peaks from a lifetime replay: PyTorch's CUDA
caching allocator (`replay`), or the C library's heap that a CPU's tensors live in (`heap`).

`network_features` bounds what the allocator holds from above and below; a replay
(`perf4sight.features.caching_allocator`, `perf4sight.features.c_heap`, over
`perf4sight.architecture.lifetimes`) follows the iteration's tensors through the allocator's
rules, so it sees what those bounds cannot: how much the order of sizes leaves held but
unused. It needs an architecture that holds the iteration's tensor lifetimes
(`Detail.LIFETIMES`: loaded with them from a spec, a model file, a torchvision name or a
module), not a bare layer table.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from perf4sight.architecture import Architecture, Detail
from perf4sight.features.inputs import needs
from perf4sight.features.network import COPIES_TERMS, HEAP_HOLES, NETWORK_TERMS, network_features
from perf4sight.features.terms import Role, Term, TermSet

__all__ = ["HEAP_TERMS", "REPLAY_TERMS", "heap_features", "replay_features"]

_ALLOCATED = "replay_allocated_bytes"
_CACHED = "replay_cached_bytes"
# Memory: the runtime's footprint (and cuBLAS's and the layer kinds', as for `network`
# features), plus the peak of live tensors, which includes the weights, gradients, momentum
# buffers and the optimizer's temporaries, as it is, plus a fitted multiple of what the
# caching allocator holds beyond it. Latency: the `network` features' model.
REPLAY_TERMS = TermSet(
    "replay",
    memory=(
        Term("cached", {_CACHED: 1.0}, "bytes"),
        Term("allocated", {_ALLOCATED: 1.0}, "bytes", Role.EXACT),
        *(term for term in NETWORK_TERMS.memory if term.role in (Role.LIBRARY, Role.FOOTPRINT)),
    ),
    latency=NETWORK_TERMS.latency,
)


@needs(Detail.LIFETIMES)
def replay_features(arch: Architecture, batch_sizes: Sequence[int], stage: str = "training") -> pd.DataFrame:
    """`network_features` with `replay_allocated_bytes` (the peak of live tensors) and
    `replay_cached_bytes` (what the allocator holds beyond them at its peak), both
    non-decreasing in the batch size (`replay_peaks`)."""
    from perf4sight.features.caching_allocator import replay_peaks  # numba's import (0.2 s) where a replay runs

    timeline = arch.lifetimes[stage]
    table = network_features(arch, batch_sizes, stage)
    allocated, cached = replay_peaks(timeline, table["batch_size"].astype(int).tolist())
    return table.assign(**{_ALLOCATED: allocated, _CACHED: cached})


# Memory: the `copies` model (a CPU's), plus what the C library's heap holds beyond the live
# tensors at its peak (free holes and chunk padding), as it is: resident bytes no fitted scale
# should distort; counted where the process's own memory is measured (a CPU; 0 elsewhere, where
# it is `copies`). Latency: the `copies` model's, which is `network`'s. On the CPU zoo, each
# family left out, memory 5.31 -> 4.84 % (convnext 9.94 -> 8.51, resnet basic 4.83 -> 3.95,
# resnext 5.19 -> 3.95); the second memory campaign 5.00 -> 4.50 %.
HEAP_TERMS = TermSet(
    "heap",
    memory=(*COPIES_TERMS.memory, Term("heap_holes", {HEAP_HOLES: 1.0}, "bytes", Role.EXACT)),
    latency=COPIES_TERMS.latency,
)


@needs(Detail.LIFETIMES)
def heap_features(arch: Architecture, batch_sizes: Sequence[int], stage: str = "training") -> pd.DataFrame:
    """`network_features` with `heap_hole_bytes`: what the C library's heap holds beyond the
    live tensors at its peak, non-decreasing in the batch size (`heap_peaks`)."""
    from perf4sight.features.c_heap import heap_peaks  # numba's import (0.2 s) where a replay runs

    table = network_features(arch, batch_sizes, stage)
    _, holes = heap_peaks(arch.lifetimes[stage], table["batch_size"].astype(int).tolist())
    return table.assign(**{HEAP_HOLES: holes})
