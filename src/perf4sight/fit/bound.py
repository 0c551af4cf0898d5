"""The memory bound: how far above its prediction a measurement may lie, measured on the
profiled runs by leaving each network (or, for a prediction calibrated on its family, each
pruning level) out of the fit. An under-estimated memory is what crashes a user's training;
the bound is what to plan with when a crash is costly. The fitted model
(`perf4sight.fit.calibration.CalibratedModel`) measures it when it is fitted and applies it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone

from perf4sight import console
from perf4sight.architecture import family_key
from perf4sight.features import ARCHITECTURE

__all__ = ["BOUND_QUANTILE", "held_out_groups", "held_out_ratio", "leave_one_group_out"]

# The share of runs of networks left out of the fit that the stored memory bound covers.
BOUND_QUANTILE = 0.95


def held_out_groups(X: pd.DataFrame) -> tuple[str, pd.Series]:  # noqa: N803 (scikit-learn's names)
    """What a refit leaves out to see a new network ("network"; "architecture", i.e. a
    pruning level, when a single network was profiled) and each row's group, from a query
    frame's `net` and `model` columns."""
    nets = X["net"]
    if nets.nunique() > 1:
        return "network", nets
    return "architecture", X["model"]


def leave_one_group_out(model: BaseEstimator, X: pd.DataFrame, y: np.ndarray,  # noqa: N803
                        groups: pd.Series) -> Iterator[tuple[Any, np.ndarray, Any]]:
    """For each group of `groups` (one per row of `X`, in order of appearance): the group, its
    rows (a mask) and a clone of `model` fitted on every other row. The one refit loop of the
    bound and of `method = default`'s choice."""
    for group in groups.unique():
        out = (groups == group).to_numpy()
        yield group, out, fitted_without(model, X, y, out)


def fitted_without(model: BaseEstimator, X: pd.DataFrame, y: np.ndarray, out: np.ndarray) -> Any:  # noqa: N803
    """A clone of `model` fitted on the rows of `X` outside the mask `out`."""
    return clone(model).fit(X[~out].reset_index(drop=True), y[~out])


def held_out_ratio(model: BaseEstimator, X: pd.DataFrame, y: np.ndarray,  # noqa: N803
                   quantile: float = BOUND_QUANTILE) -> dict[str, Any] | None:
    """How far above its prediction a new network's measurement may lie: `ratio`, the
    `quantile` of measured / predicted over every run, each predicted by `model` (a
    `CalibratedModel`'s parameters; each refit is a clone of it without a bound or a fallback) fitted
    without its network (without its architecture when one network was profiled), and
    `calibrated_ratio`, the same for a prediction calibrated on its family: each profiled
    level left out of both the fit and its family's calibration (None when no family has
    two levels). None when `X` (a query frame with each row's `net` and `model`) holds a
    single architecture (nothing to leave out)."""
    left_out, groups = held_out_groups(X)
    if groups.nunique() < 2:
        return None
    families = X[ARCHITECTURE].map(family_key)
    in_family_levels = X.loc[X["model"].groupby(families).transform("nunique") > 1, "model"].unique()
    refit = clone(model).set_params(bound_quantile=None, fallback=None)
    # With one network profiled, a group is an architecture: the fit without it serves the
    # calibrated ratio too (the same training rows), so it is made once.
    without: dict[str, Any] = {}
    refits = groups.nunique() + (0 if left_out == "architecture" else len(in_family_levels))
    ratios = []
    with console.progress("memory bound, refitting", total=refits) as bar:
        for group, out, fitted in leave_one_group_out(refit, X, y, groups):
            if left_out == "architecture":
                without[group] = fitted
            ratios.append(_ratio(y[out], fitted.predict(X[out].reset_index(drop=True), calibrate=False)))
            bar.advance(f"without {group}")
        in_family = _calibrated_ratios(partial(fitted_without, refit, X, y), X, y, in_family_levels, without, bar)
    return {
        "quantile": quantile,
        "ratio": float(np.quantile(np.concatenate(ratios), quantile)),
        "left_out": left_out,
        "calibrated_ratio": float(np.quantile(in_family, quantile)) if len(in_family) else None,
    }


def _ratio(measured: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    return measured / np.maximum(predicted, np.finfo(float).tiny)


def _calibrated_ratios(fitted_without: Callable[[np.ndarray], Any], X: pd.DataFrame, y: np.ndarray,  # noqa: N803
                       levels: Sequence[str], without: dict[str, Any], bar: Any) -> np.ndarray:
    """measured / calibrated prediction of every run of the architectures `levels` (those
    of a family profiled at two levels or more), each left out of both the fit and the
    calibration (empty when there are none); `without` holds models already fitted
    without an architecture, and `bar` is advanced once per other refit."""
    ratios = []
    for name in levels:
        out = (X["model"] == name).to_numpy()
        fitted = without.get(name)
        if fitted is None:
            fitted = fitted_without(out)
            bar.advance(f"without {name}")
        ratios.append(_ratio(y[out], fitted.predict(X[out].reset_index(drop=True))))
    return np.concatenate(ratios) if ratios else np.empty(0)
