"""The first step of every fitted model: architectures and batch sizes in, feature columns out.

A model's input is a query frame (`queries`): one row per (architecture, batch size), the
`architecture` column holding `Architecture` objects. `FeatureTransformer` turns it into
the named columns of one feature set (`FEATURE_SETS`), computing each architecture's
table once for all of its batch sizes and keeping it with the architecture
(`derived_values`): the refits of a fingerprint and the two models of a prediction ask
again for tables already computed (the replay's take up to a second per network).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from perf4sight.architecture import Architecture, Detail, as_saved_by
from perf4sight.architecture.derived import derived_values
from perf4sight.device.definitions import BatchSizes
from perf4sight.device.system import BYTES_PER_MIB
from perf4sight.features.inputs import checked_batch_sizes
from perf4sight.features.network import FRESH_PAGES, FRESH_PAGES_MS, PROCESS_MEMORY_COLUMNS, network_features
from perf4sight.features.paper import paper_features
from perf4sight.features.replay import heap_features, replay_features

__all__ = ["ARCHITECTURE", "BATCH_SIZE", "FEATURE_SETS", "FeatureFunction", "FeatureTransformer", "feature_table", "queries",
           "with_device_costs"]

# A query frame's columns: what a model is asked about.
ARCHITECTURE = "architecture"
BATCH_SIZE = "batch_size"



class FeatureFunction(Protocol):
    """A feature set: its columns per batch size, and what it needs from the architecture."""

    needs: Detail

    def __call__(self, arch: Architecture, batch_sizes: Sequence[int], stage: str) -> pd.DataFrame: ...


FEATURE_SETS: dict[str, FeatureFunction] = {
    "paper": paper_features,
    "network": network_features,
    "replay": replay_features,
    "heap": heap_features,
}


def queries(arch: Architecture, batch_sizes: Sequence[int]) -> pd.DataFrame:
    """The query frame of one architecture at each batch size."""
    archs = np.empty(len(batch_sizes), dtype=object)
    archs[:] = [arch] * len(batch_sizes)  # an object array as is: pandas infers nothing from it
    return pd.DataFrame({ARCHITECTURE: archs, BATCH_SIZE: np.asarray(batch_sizes)}, copy=False)


def feature_table(arch: Architecture, batch_sizes: Sequence[int], feature_set: str, stage: str,
                  torch_version: str | None = None, fresh_pages_ms_per_mib: float | None = None) -> pd.DataFrame:
    """`FEATURE_SETS[feature_set]` of `arch` as autograd on the device's PyTorch `torch_version`
    saves it (`as_saved_by`; None: the host's) at `batch_sizes` (one row each, in their order,
    index 0..n-1), computed for the batch sizes not asked for before and kept with it; the
    same list of batch sizes asked again is the same table. A set with the gradients in fresh
    pages (`FRESH_PAGES`) gets their cost on the device (`FRESH_PAGES_MS`) at the rate its
    profiler measured, `fresh_pages_ms_per_mib` (None: none measured, no cost)."""
    sizes = checked_batch_sizes(arch, batch_sizes)
    arch = as_saved_by(arch, torch_version)
    kept = derived_values(arch)
    asked = ("features", feature_set, stage, sizes, fresh_pages_ms_per_mib)
    if asked not in kept:
        key = ("features", feature_set, stage)
        table, rows = kept.get(key, (None, {}))  # every row computed so far, and each batch size's row
        missing = BatchSizes(sorted(set(sizes) - rows.keys()))  # checked: some of `sizes`
        if missing:
            new = FEATURE_SETS[feature_set](arch, missing, stage)
            rows = {**rows, **{size: len(rows) + index for index, size in enumerate(missing)}}
            table = new if table is None else pd.concat([table, new], ignore_index=True)
            kept[key] = (table, rows)
        order = [rows[size] for size in sizes]
        asked_rows = table if order == list(range(len(table))) else table.iloc[order].reset_index(drop=True)
        kept[asked] = with_device_costs(asked_rows, fresh_pages_ms_per_mib)
    return kept[asked]


def with_device_costs(table: pd.DataFrame, fresh_pages_ms_per_mib: float | None) -> pd.DataFrame:
    """A feature set's table with what its amounts cost on the device, where the device's
    profiler measured it: the gradients in fresh pages (`FRESH_PAGES`) at
    `fresh_pages_ms_per_mib` (`FRESH_PAGES_MS`; 0 where None: not measured), and the
    process's own memory (`PROCESS_MEMORY_COLUMNS`) only where it was measured (a CPU)."""
    if FRESH_PAGES not in table.columns:
        return table
    costs = {FRESH_PAGES_MS: table[FRESH_PAGES] / BYTES_PER_MIB * (fresh_pages_ms_per_mib or 0.0)}
    if fresh_pages_ms_per_mib is None:
        costs.update(dict.fromkeys((column for column in PROCESS_MEMORY_COLUMNS if column in table.columns), 0.0))
    return table.assign(**costs)


class FeatureTransformer(TransformerMixin, BaseEstimator, auto_wrap_output_keys=None):
    """A query frame (`architecture`, `batch_size` and any other columns, ignored) to the
    columns of `feature_set` for `stage`, one row per query, in the query's order; each
    architecture as autograd saves it on the device's PyTorch, `torch_version` (None: the
    host's; `perf4sight.architecture.autograd`), and fresh pages at the device's measured
    cost, `fresh_pages_ms_per_mib` (`feature_table`)."""

    def __init__(self, feature_set: str = "network", stage: str = "training",
                 torch_version: str | None = None, fresh_pages_ms_per_mib: float | None = None) -> None:
        self.feature_set = feature_set
        self.stage = stage
        self.torch_version = torch_version
        self.fresh_pages_ms_per_mib = fresh_pages_ms_per_mib

    def fit(self, X: pd.DataFrame, y: Any = None) -> FeatureTransformer:  # noqa: N803 (scikit-learn's names)
        """Record the feature names (those the later steps are fitted on)."""
        self.feature_names_out_ = np.asarray(self.transform(X).columns, dtype=object)
        return self

    def transform(self, X: pd.DataFrame) -> pd.DataFrame:  # noqa: N803
        """The feature rows of the queries, index 0..n-1."""
        if not isinstance(X, pd.DataFrame) or not {ARCHITECTURE, BATCH_SIZE} <= set(X.columns):
            raise ValueError(f"FeatureTransformer needs a query frame with columns '{ARCHITECTURE}' and "
                             f"'{BATCH_SIZE}' (perf4sight.features.queries)")
        if self.feature_set not in FEATURE_SETS:
            raise ValueError(f"feature_set '{self.feature_set}' is not one of {', '.join(FEATURE_SETS)}")
        archs = X[ARCHITECTURE].to_numpy()
        sizes = X[BATCH_SIZE].to_numpy()
        first = archs[0] if len(archs) else None
        if all(arch is first for arch in archs):  # one network: the usual query
            return self._table(first, sizes)
        ids = np.fromiter(map(id, archs), dtype=np.uint64, count=len(archs))
        _, where, which = np.unique(ids, return_index=True, return_inverse=True)
        blocks, order = [], []
        for group, index in enumerate(where):
            rows = np.flatnonzero(which == group)
            blocks.append(self._table(archs[index], sizes[rows]))
            order.append(rows)
        table = pd.concat(blocks, ignore_index=True)
        return table.iloc[np.argsort(np.concatenate(order), kind="stable")].reset_index(drop=True)

    def _table(self, arch: Any, sizes: np.ndarray) -> pd.DataFrame:
        if not isinstance(arch, Architecture):
            raise ValueError(f"FeatureTransformer: '{ARCHITECTURE}' holds a {type(arch).__name__}, not an Architecture")
        return feature_table(arch, sizes, self.feature_set, self.stage, self.torch_version, self.fresh_pages_ms_per_mib)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """The feature columns, as fitted."""
        check_is_fitted(self)
        return self.feature_names_out_
