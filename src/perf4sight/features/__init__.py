"""Features: named columns computed from the architecture description, per batch size.

A feature set is a function `(arch, batch_sizes, stage) -> DataFrame` with one row per
batch size, a `batch_size` column and named feature columns, that declares what it reads
from the architecture (`needs`, a `perf4sight.architecture.Detail`): the loader gives it
a description holding that much. Fitted models record which set they were trained on, so
prediction recomputes the same columns.
"""

from __future__ import annotations

from perf4sight.features.network import (
    COPIES_TERMS,
    FLAT_TERMS,
    NETWORK_TERMS,
    PLANES_TERMS,
    STREAM_TERMS,
    network_features,
)
from perf4sight.features.paper import paper_features
from perf4sight.features.recipes import Extrapolation, recipe_extrapolation
from perf4sight.features.replay import HEAP_TERMS, REPLAY_TERMS, heap_features, replay_features
from perf4sight.features.terms import TermSet
from perf4sight.features.transform import (
    ARCHITECTURE,
    BATCH_SIZE,
    FEATURE_SETS,
    FeatureFunction,
    FeatureTransformer,
    feature_table,
    queries,
    with_device_costs,
)

__all__ = [
    "ARCHITECTURE", "BATCH_SIZE", "FEATURE_SETS", "FEATURE_TERMS", "Extrapolation", "FeatureFunction",
    "FeatureTransformer", "TERM_SETS", "feature_table", "heap_features", "network_features", "paper_features",
    "queries", "recipe_extrapolation", "replay_features", "with_device_costs",
]

# The term sets each feature set declares for the physical models (`perf4sight.features.terms`):
# alternative models of the same columns, which a device's own data choose between.
FEATURE_TERMS: dict[str, tuple[TermSet, ...]] = {
    "network": (FLAT_TERMS, NETWORK_TERMS, PLANES_TERMS, STREAM_TERMS, COPIES_TERMS),
    "replay": (REPLAY_TERMS,),
    "heap": (HEAP_TERMS,),
}
# Every term set by its name (a fitted model's term design names the one it weighs).
TERM_SETS: dict[str, TermSet] = {terms.name: terms for sets in FEATURE_TERMS.values() for terms in sets}
