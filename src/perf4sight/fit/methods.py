"""Regression methods: how a query frame (architectures and batch sizes) becomes one target.

A method (`METHODS`) is a feature set (a key of `perf4sight.features.FEATURE_SETS`) and
the steps after it, per target; `make_regressor` joins them into one scikit-learn
`Pipeline` whose first step is the `FeatureTransformer`. `DEFAULT_METHOD` is what a
config's `method = default` names: a choice among `CANDIDATE_METHODS`, made per device and
target from its own data (`perf4sight.fit.choice`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.ensemble import ExtraTreesRegressor
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted, has_fit_parameter, validate_data

from perf4sight.architecture import Detail, recording_problem
from perf4sight.device.definitions import LATENCY, MEMORY
from perf4sight.device.recipe import Recipe
from perf4sight.errors import ArgumentError
from perf4sight.features import FEATURE_SETS, FeatureTransformer
from perf4sight.fit.physical import LatencySolver, MemorySolver, TermDesign, physical_steps

__all__ = [
    "PaperExtraTrees", "Method", "METHODS", "CANDIDATE_METHODS", "DEFAULT_METHOD", "candidate_methods", "fit_method",
    "make_regressor", "method_problem", "method_spec", "network_weights", "resolve_method", "trusted_types",
]


class PaperExtraTrees(RegressorMixin, BaseEstimator):
    """The paper's model: extremely randomised trees (300 per target) on the paper's features.

    Trees interpolate well between the pruning levels of a network they were fitted on,
    which is the paper's protocol; they cannot extrapolate beyond the training range.
    """

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


@dataclass(frozen=True)
class Method:
    """A method: the feature set it reads and, per target, the steps after the features;
    the method (`fallback`) that answers the queries its features cannot describe; and the
    method whose model is this one's with fewer rates (`extends`), which `method = default`
    prefers unless this one is clearly better."""

    feature_set: str
    steps: Callable[[str], list[tuple[str, BaseEstimator]]]
    fallback: str | None = None
    extends: str | None = None


def _trees(target: str) -> list[tuple[str, BaseEstimator]]:
    return [("trees", PaperExtraTrees())]


METHODS: dict[str, Method] = {
    "paper": Method("paper", _trees),
    # `physical` with pooling's bytes at the traffic rate (no rate of their own)
    "flat": Method("network", partial(physical_steps, "flat")),
    # the `network` features' terms: bytes, operations and layers at a device's rates
    "physical": Method("network", partial(physical_steps, "network"), extends="flat"),
    # memory as the allocator replay finds it; latency as `physical`; `physical` for a recipe
    # whose tensor lifetimes cannot be recorded (autocast)
    "replay": Method("replay", partial(physical_steps, "replay"), fallback="physical"),
    # latency as `physical` with a rate per plane of the grouped and depthwise convolutions and
    # one per depthwise tap; memory as `physical`
    "planes": Method("network", partial(physical_steps, "planes"), extends="physical"),
    # latency with the bytes moved at two rates (GEMM and memory-bound layers); memory as `physical`
    "streams": Method("network", partial(physical_steps, "streams"), extends="physical"),
    # memory as `physical` with copies of the largest layer's tensors (a CPU's convolution
    # library's reorders) at a rate of their own; latency as `physical`
    "copies": Method("network", partial(physical_steps, "copies"), extends="physical"),
    # memory as `copies` plus the C library's heap holes from a replay of the tensor lifetimes
    # (a CPU's tensors live in that heap; added as they are, no rate of their own); latency as
    # `physical`; `copies` where the lifetimes cannot be recorded (autocast)
    "heap": Method("heap", partial(physical_steps, "heap"), fallback="copies"),
}
# The types a fitted regressor of any method holds, which skops may load.
_TRUSTED = (Pipeline, FeatureTransformer, TermDesign, MemorySolver, LatencySolver, PaperExtraTrees)
_TRUSTED_SKLEARN = (
    "sklearn.ensemble._forest.ExtraTreesRegressor",
    "sklearn.tree._classes.ExtraTreeRegressor",
    "sklearn.tree._tree.Tree",
)

# `method = default`: the candidate with the lowest error on networks left out of the fit
# (one that `extends` another only where clearly lower), chosen per device and target at
# fingerprint time (`perf4sight.fit.choice`); ties go to the earlier one, the faster to
# predict with.
DEFAULT_METHOD = "default"
# The candidates that differ in each target: `replay` differs from `physical` in memory only
# (the replay's features, seconds per base network, are not computed for latency), and so do
# `copies` and `heap`; `flat`, `planes` and `streams` in latency only.
_CANDIDATES = {MEMORY.name: ("physical", "copies", "replay", "heap"), LATENCY.name: ("flat", "physical", "planes", "streams")}
CANDIDATE_METHODS = tuple(dict.fromkeys(method for methods in _CANDIDATES.values() for method in methods))


def candidate_methods(target: str) -> tuple[str, ...]:
    """The candidates `method = default` compares for a target (`mem_used_mib`, `latency_ms`)."""
    return _CANDIDATES[target]


def method_spec(method: str) -> Method:
    """The declared method `method` (a `METHODS` key); an ArgumentError naming the known ones
    for any other."""
    if method not in METHODS:
        raise ArgumentError(f"method: unknown method '{method}'; known: {', '.join(METHODS)}")
    return METHODS[method]


def method_problem(method: str, recipes: Iterable[Recipe]) -> str | None:
    """Why `method` cannot describe runs under `recipes` (None when it can): its features need
    tensor lifetimes, which cannot be recorded under autocast."""
    if FEATURE_SETS[method_spec(method).feature_set].needs is not Detail.LIFETIMES:
        return None
    return next((problem for problem in map(recording_problem, recipes) if problem), None)


def resolve_method(name: str) -> str:
    """The METHODS key a config's `method` means, or DEFAULT_METHOD (chosen when fitting)."""
    if name != DEFAULT_METHOD and name not in METHODS:
        known = ", ".join((DEFAULT_METHOD, *METHODS))
        raise ArgumentError(f"method: unknown method '{name}'; known: {known}")
    return name


def trusted_types() -> list[str]:
    """Qualified names of every type a stored model of any method may hold (for skops)."""
    return sorted({f"{cls.__module__}.{cls.__qualname__}" for cls in _TRUSTED} | set(_TRUSTED_SKLEARN))


def make_regressor(method: str, target: str, stage: str = "training", torch_version: str | None = None,
                   fresh_pages_ms_per_mib: float | None = None) -> Pipeline:
    """An unfitted regressor of `method` for `target` (`mem_used_mib`, `latency_ms`) and
    `stage` on a device running PyTorch `torch_version` (None: the host's) whose profiler
    measured `fresh_pages_ms_per_mib` (None: not measured): the features of the query frame,
    then the method's steps."""
    spec = method_spec(method)
    features = FeatureTransformer(spec.feature_set, stage, torch_version, fresh_pages_ms_per_mib)
    return Pipeline([("features", features), *spec.steps(target)])


def fit_method(method: str, X: pd.DataFrame, y: Any, target: str, stage: str = "training",  # noqa: N803
               torch_version: str | None = None, fresh_pages_ms_per_mib: float | None = None) -> Pipeline:
    """A regressor of `method` fitted on the query frame `X` (with each row's network,
    `net`) and targets `y`.

    A method whose last step takes a `sample_weight` gets `network_weights`: the network a
    user asks about is a new one, so each profiled network counts as much as any other,
    whatever number of runs it passed.
    """
    regressor = make_regressor(method, target, stage, torch_version, fresh_pages_ms_per_mib)
    name, last = regressor.steps[-1]
    if has_fit_parameter(last, "sample_weight"):
        return regressor.fit(X, y, **{f"{name}__sample_weight": network_weights(X["net"])})
    return regressor.fit(X, y)


def network_weights(nets: pd.Series) -> np.ndarray:
    """One weight per row, the same total for every network, averaging 1 over the rows."""
    counts = nets.map(nets.value_counts()).to_numpy(dtype=float)
    return len(nets) / (nets.nunique() * counts)
