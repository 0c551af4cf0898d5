"""Features: named columns computed from the architecture description, per batch size.

A feature set is a function `(arch, batch_sizes, stage) -> DataFrame` with one row per
batch size, a `batch_size` column and named feature columns, that declares what it reads
from the architecture (`needs`, a `perf4sight.architecture.Detail`): the loader gives it
a description holding that much. Fitted models record which set they were trained on, so
prediction recomputes the same columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import pandas as pd

from perf4sight.architecture import Architecture, Detail
from perf4sight.features.network import NETWORK_TERMS, STREAM_TERMS, network_features
from perf4sight.features.paper import paper_features
from perf4sight.features.recipes import Extrapolation, recipe_extrapolation
from perf4sight.features.replay import REPLAY_TERMS, replay_features
from perf4sight.features.terms import TermSet

__all__ = [
    "FEATURE_SETS", "FEATURE_TERMS", "Extrapolation", "FeatureFunction", "network_features", "paper_features",
    "recipe_extrapolation", "replay_features",
]


class FeatureFunction(Protocol):
    """A feature set: its columns per batch size, and what it needs from the architecture."""

    needs: Detail

    def __call__(self, arch: Architecture, batch_sizes: Sequence[int], stage: str) -> pd.DataFrame: ...


FEATURE_SETS: dict[str, FeatureFunction] = {
    "paper": paper_features,
    "network": network_features,
    "replay": replay_features,
}

# The term sets each feature set declares for the physical models (`perf4sight.features.terms`):
# alternative models of the same columns, which a device's own data choose between.
FEATURE_TERMS: dict[str, tuple[TermSet, ...]] = {
    "network": (NETWORK_TERMS, STREAM_TERMS),
    "replay": (REPLAY_TERMS,),
}
