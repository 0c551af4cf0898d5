"""Regression methods: scikit-learn estimators that map a feature table to one target.

A method is any estimator class in `METHODS` with a `feature_set` class attribute (a key
of `perf4sight.features.FEATURE_SETS`: the columns it is fitted on) and a `trusted_types`
tuple naming the scikit-learn types it holds, which skops may load. `DEFAULT_METHOD` is
what a config's `method = default` names: a choice among `CANDIDATE_METHODS`, made per device
and target from its own data (`perf4sight.fit.choice`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.ensemble import ExtraTreesRegressor
from sklearn.utils.validation import check_is_fitted, has_fit_parameter, validate_data

from perf4sight.device.definitions import LATENCY, MEMORY
from perf4sight.errors import ArgumentError
from perf4sight.fit.dataset import Dataset
from perf4sight.fit.physical import PhysicalRegressor, ReplayRegressor, StreamRegressor

__all__ = [
    "PaperExtraTrees", "METHODS", "CANDIDATE_METHODS", "DEFAULT_METHOD", "candidate_methods", "fit_method", "network_weights",
    "resolve_method", "trusted_types",
]


class PaperExtraTrees(RegressorMixin, BaseEstimator):
    """The paper's model: extremely randomised trees (300 per target) on the paper's features.

    Trees interpolate well between the pruning levels of a network they were fitted on,
    which is the paper's protocol; they cannot extrapolate beyond the training range.
    """

    feature_set = "paper"
    trusted_types = (
        "sklearn.ensemble._forest.ExtraTreesRegressor",
        "sklearn.tree._classes.ExtraTreeRegressor",
        "sklearn.tree._tree.Tree",
    )

    def __init__(self, n_estimators: int = 300, random_state: int | None = 0, n_jobs: int | None = None) -> None:
        self.n_estimators = n_estimators
        self.random_state = random_state
        self.n_jobs = n_jobs

    def fit(self, X: Any, y: Any) -> PaperExtraTrees:  # noqa: N803 (scikit-learn's names)
        """Fit the forest on the paper's feature columns."""
        X, y = validate_data(self, X, y, y_numeric=True)
        self.forest_ = ExtraTreesRegressor(
            n_estimators=self.n_estimators, random_state=self.random_state, n_jobs=self.n_jobs
        ).fit(X, y)
        return self

    def predict(self, X: Any) -> np.ndarray:  # noqa: N803
        """The forest's mean prediction per row."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        return self.forest_.predict(X)

    def capacity_mib(self) -> float:
        """Trees learn no device capacity: infinite (every prediction is taken to fit)."""
        check_is_fitted(self)
        return np.inf


METHODS: dict[str, type] = {
    "paper": PaperExtraTrees,
    "physical": PhysicalRegressor,
    "replay": ReplayRegressor,
    "streams": StreamRegressor,
}

# `method = default`: the candidate with the lowest error on networks left out of the fit,
# chosen per device and target at fingerprint time (`perf4sight.fit.choice`); ties go to
# the earlier one, the faster to predict with.
DEFAULT_METHOD = "default"
# The candidates that differ in each target: `replay` differs from `physical` in memory only
# (the replay's features, seconds per base network, are not computed for latency), `streams`
# in latency only.
_CANDIDATES = {MEMORY.name: ("physical", "replay"), LATENCY.name: ("physical", "streams")}
CANDIDATE_METHODS = tuple(dict.fromkeys(method for methods in _CANDIDATES.values() for method in methods))


def candidate_methods(target: str) -> tuple[str, ...]:
    """The candidates `method = default` compares for a target (`mem_used_mib`, `latency_ms`)."""
    return _CANDIDATES[target]


def resolve_method(name: str) -> str:
    """The METHODS key a config's `method` means, or DEFAULT_METHOD (chosen when fitting)."""
    if name != DEFAULT_METHOD and name not in METHODS:
        known = ", ".join((DEFAULT_METHOD, *METHODS))
        raise ArgumentError(f"method: unknown method '{name}'; known: {known}")
    return name


def trusted_types() -> list[str]:
    """Qualified names of every type a stored model of any method may hold (for skops)."""
    names = set()
    for cls in METHODS.values():
        names.add(f"{cls.__module__}.{cls.__qualname__}")
        names.update(getattr(cls, "trusted_types", ()))
    return sorted(names)


def fit_method(method: str, dataset: Dataset, target: str | None = None) -> Any:
    """A new estimator of `method` fitted on `dataset`; `target` (a log column) is passed to
    methods whose model depends on what is predicted (they take a `target` parameter).

    A method whose `fit` takes a `sample_weight` gets `network_weights`: the network a
    user asks about is a new one, so each profiled network counts as much as any other,
    whatever number of runs it passed.
    """
    cls = METHODS[method]
    params = {"target": target} if target is not None and "target" in cls().get_params() else {}
    estimator = cls(**params)
    if has_fit_parameter(estimator, "sample_weight"):
        return estimator.fit(dataset.features, dataset.target, sample_weight=network_weights(dataset.rows["net"]))
    return estimator.fit(dataset.features, dataset.target)


def network_weights(nets: pd.Series) -> np.ndarray:
    """One weight per row, the same total for every network, averaging 1 over the rows."""
    counts = nets.map(nets.value_counts()).to_numpy(dtype=float)
    return len(nets) / (nets.nunique() * counts)
