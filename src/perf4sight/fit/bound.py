"""The memory bound: how far above its prediction a measurement may lie, measured on the
profiled runs by leaving each network (or, for a prediction calibrated on its family, each
pruning level) out of the fit. An under-estimated memory is what crashes a user's training;
the bound is what to plan with when a crash is costly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from perf4sight import console
from perf4sight.fit.calibration import predict_calibrated
from perf4sight.fit.dataset import Dataset
from perf4sight.fit.methods import fit_method

__all__ = ["BOUND_QUANTILE", "bound_factor", "held_out_groups", "held_out_ratio"]

# The share of runs of networks left out of the fit that the stored memory bound covers.
BOUND_QUANTILE = 0.95


def held_out_groups(dataset: Dataset) -> tuple[str, pd.Series]:
    """What a refit leaves out to see a new network ("network"; "architecture", i.e. a
    pruning level, when a single network was profiled) and each row's group."""
    nets = dataset.rows["net"]
    if nets.nunique() > 1:
        return "network", nets
    return "architecture", dataset.rows["model"]


def held_out_ratio(method: str, dataset: Dataset, target: str | None = None,
                   quantile: float = BOUND_QUANTILE) -> dict[str, Any] | None:
    """How far above its prediction a new network's measurement may lie: `ratio`, the
    `quantile` of measured / predicted over every run, each predicted by a model fitted
    without its network (without its architecture when one network was profiled), and
    `calibrated_ratio`, the same for a prediction calibrated on its family: each profiled
    level left out of both the fit and its family's calibration (None when no family has
    two levels). None when the dataset holds a single architecture (nothing to leave out)."""
    left_out, groups = held_out_groups(dataset)
    if groups.nunique() < 2:
        return None
    rows = dataset.rows
    in_family_levels = rows.loc[rows.groupby("family")["model"].transform("nunique") > 1, "model"].unique()
    # With one network profiled, a group is an architecture: the fit without it serves the
    # calibrated ratio too (the same training rows), so it is made once.
    without: dict[str, Any] = {}
    refits = groups.nunique() + (0 if left_out == "architecture" else len(in_family_levels))
    ratios = []
    with console.progress("memory bound, refitting", total=refits) as bar:
        for group in groups.unique():
            out = (groups == group).to_numpy()
            held = dataset.select(out)
            estimator = fit_method(method, dataset.select(~out), target)
            if left_out == "architecture":
                without[group] = estimator
            ratios.append(held.target / np.maximum(estimator.predict(held.features), np.finfo(float).tiny))
            bar.advance(f"without {group}")
        in_family = _calibrated_ratios(method, dataset, target, in_family_levels, without, bar)
    return {
        "quantile": quantile,
        "ratio": float(np.quantile(np.concatenate(ratios), quantile)),
        "left_out": left_out,
        "calibrated_ratio": float(np.quantile(in_family, quantile)) if len(in_family) else None,
    }


def _calibrated_ratios(method: str, dataset: Dataset, target: str | None, levels: Sequence[str],
                       without: dict[str, Any], bar: Any) -> np.ndarray:
    """measured / calibrated prediction of every run of the architectures `levels` (those
    of a family profiled at two levels or more), each left out of both the fit and the
    calibration (empty when there are none); `without` holds estimators already fitted
    without an architecture, and `bar` is advanced once per other refit."""
    ratios = []
    for name in levels:
        out = (dataset.rows["model"] == name).to_numpy()
        rest, held = dataset.select(~out), dataset.select(out)
        estimator = without.get(name)
        if estimator is None:
            estimator = fit_method(method, rest, target)
            bar.advance(f"without {name}")
        corrected, _ = predict_calibrated(estimator, rest, held)
        ratios.append(held.target / np.maximum(corrected, np.finfo(float).tiny))
    return np.concatenate(ratios) if ratios else np.empty(0)


def bound_factor(bound: dict[str, Any], calibrated: np.ndarray | bool) -> np.ndarray:
    """The stored bound's multiplier of a prediction (never below 1): the calibrated ratio
    where the prediction was calibrated on its family and one was measured."""
    calibrated = np.asarray(calibrated, dtype=bool)
    in_family = bound.get("calibrated_ratio")
    if in_family is None:
        return np.full(calibrated.shape, max(1.0, bound["ratio"]))
    return np.maximum(1.0, np.where(calibrated, in_family, bound["ratio"]))
