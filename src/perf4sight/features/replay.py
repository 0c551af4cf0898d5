"""Whole-network features plus the CUDA caching allocator's peaks from a lifetime replay.

`network_features` bounds what the allocator holds from above and below; the replay
(`perf4sight.features.caching_allocator` over `perf4sight.architecture.lifetimes`) follows
the iteration's tensors through the allocator's rules, so it sees what those bounds
cannot: how much the order of sizes leaves cached but unused. It needs an architecture
that holds the iteration's tensor lifetimes (`Detail.LIFETIMES`: loaded with them from a
spec, a model file, a torchvision name or a module), not a bare layer table.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from perf4sight.architecture import Architecture, Detail
from perf4sight.features.caching_allocator import replay_peaks
from perf4sight.features.inputs import needs
from perf4sight.features.network import NETWORK_TERMS, network_features
from perf4sight.features.terms import Role, Term, TermSet

__all__ = ["REPLAY_TERMS", "replay_features"]

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
    timeline = arch.lifetimes[stage]
    table = network_features(arch, batch_sizes, stage)
    allocated, cached = replay_peaks(timeline, table["batch_size"].astype(int).tolist())
    return table.assign(**{_ALLOCATED: allocated, _CACHED: cached})
