"""Features: named columns computed from the architecture description, per batch size.

A feature set is a function `(arch, batch_sizes, stage) -> DataFrame` with one row per
batch size, a `batch_size` column and named feature columns; fitted models record which
set they were trained on, so prediction recomputes the same columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from perf4sight.architecture import Architecture
from perf4sight.features.network import NETWORK_TERMS, network_features
from perf4sight.features.paper import paper_features
from perf4sight.features.replay import REPLAY_TERMS, replay_features
from perf4sight.features.terms import TermSet

__all__ = [
    "FEATURE_SETS", "FEATURE_TERMS", "FeatureFunction", "needs_complete_architecture", "network_features", "paper_features",
    "replay_features",
]

FeatureFunction = Callable[[Architecture, Sequence[int], str], pd.DataFrame]

FEATURE_SETS: dict[str, FeatureFunction] = {
    "paper": paper_features,
    "network": network_features,
    "replay": replay_features,
}

# The terms each feature set declares for the physical models (`perf4sight.features.terms`).
FEATURE_TERMS: dict[str, TermSet] = {
    "network": NETWORK_TERMS,
    "replay": REPLAY_TERMS,
}

# Feature sets that need only the Conv2d and Linear layers a spec lists; any other set
# gets a complete architecture (a module rebuilt and traced).
_SPEC_LAYERS_SUFFICE = frozenset({"paper"})


def needs_complete_architecture(feature_set: str) -> bool:
    """Whether `feature_set` needs every layer, not only the Conv2d/Linear layers of a spec."""
    return feature_set not in _SPEC_LAYERS_SUFFICE
