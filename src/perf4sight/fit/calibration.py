"""Calibration on a profiled family: a model's errors on the profiled pruning levels of a
network, carried to that network's other levels.

The usual question is about a network whose family was profiled at a few pruning levels:
"this network pruned by 45 %, when 0, 30, 50, 70 and 90 % were profiled". A model fitted on
every profiled network errs on a family as a whole (its kernels, its memory fragmentation),
and that error changes smoothly with the pruning level. So the fit keeps, per family, the
log of measured / predicted of its training runs; a query of the same family is multiplied
by the correction at its batch size (interpolated between the profiled batch sizes of each
level) and parameter count (a least-squares line in log parameters over the levels, held
at the profiled range's ends; not the levels' own values, whose per-level noise the line
averages out). A family is what the pruning levels of one network share
(`family_key`): channel pruning changes the widths of its layers, nothing else. A network
of a family never profiled is not corrected.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from perf4sight.architecture import Architecture

if TYPE_CHECKING:
    from perf4sight.fit.dataset import Dataset

__all__ = ["FamilyCalibration", "family_key", "predict_calibrated"]


def family_key(arch: Architecture) -> str:
    """What every pruning level of a network has in common: the input size, the class count
    and, in order, each Conv2d and Linear layer's kind, kernel, stride, padding, dilation
    and grouping (depthwise, grouped or dense), but not its width. The same for a spec's
    layer table and for a traced module."""
    parts: list[Any] = [tuple(arch.input_size), arch.num_classes]
    for layer in arch.of_kind("conv2d", "linear"):
        grouping = "depthwise" if layer.depthwise else "grouped" if layer.groups > 1 else "dense"
        parts.append((layer.kind, tuple(layer.kernel), tuple(layer.stride), tuple(layer.padding),
                      tuple(layer.dilation), grouping))
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class _Levels:
    """One family's profiled levels, ready for interpolation: log parameter counts (sorted)
    and, per level, log batch sizes (sorted) with the mean log ratio at each."""

    log_params: np.ndarray
    log_batch: list[np.ndarray]
    log_ratio: list[np.ndarray]
    line: np.ndarray  # (intercept, slope) of a least-squares line over log_params, per unit of ratio


@dataclass(frozen=True)
class FamilyCalibration:
    """Per family key: the training runs' `params`, `batch_size` and `log_ratio`
    (log of measured / predicted), as lists (stored as JSON with a fitted model)."""

    residuals: Mapping[str, Mapping[str, list[float]]]
    _prepared: dict[str, _Levels] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def of(cls, rows: pd.DataFrame, predicted: np.ndarray) -> FamilyCalibration:
        """From a dataset's rows (`family`, `params`, `batch_size`, `measured`) and a model's
        predictions of them; rows where either is not positive carry no ratio and are left out."""
        measured, predicted = rows["measured"].to_numpy(dtype=float), np.asarray(predicted, dtype=float)
        valid = (measured > 0) & (predicted > 0) & np.isfinite(measured) & np.isfinite(predicted)
        table = rows[valid].assign(log_ratio=np.log(measured[valid] / predicted[valid]))
        return cls({
            str(family): {name: group[name].astype(float).tolist() for name in ("params", "batch_size", "log_ratio")}
            for family, group in table.groupby("family", sort=True)
        })

    def _levels(self, family: str) -> _Levels | None:
        if family not in self._prepared:
            runs = self.residuals.get(family)
            if runs is None:
                return None
            table = pd.DataFrame(runs).groupby(["params", "batch_size"], as_index=False)["log_ratio"].mean()
            levels = sorted(table.groupby("params"), key=lambda item: item[0])
            log_params = np.log([params for params, _ in levels])
            self._prepared[family] = _Levels(
                log_params=log_params,
                log_batch=[np.log(group["batch_size"].to_numpy()) for _, group in levels],
                log_ratio=[group["log_ratio"].to_numpy() for _, group in levels],
                line=np.linalg.pinv(np.column_stack([np.ones_like(log_params), log_params])),
            )
        return self._prepared[family]

    def factors(self, family: str, params: float, batch_sizes: np.ndarray) -> np.ndarray | None:
        """The multipliers for a network of `family` with `params` parameters at each batch
        size, or None when the family was not profiled."""
        levels = self._levels(family)
        if levels is None:
            return None
        log_bs = np.log(np.asarray(batch_sizes, dtype=float))
        # each level's correction at the queried batch sizes, one row per level
        per_level = np.array([np.interp(log_bs, x, y) for x, y in zip(levels.log_batch, levels.log_ratio)])
        if len(per_level) == 1:
            return np.exp(per_level[0])
        intercept, slope = levels.line @ per_level
        at = np.clip(np.log(params), levels.log_params[0], levels.log_params[-1])
        return np.exp(intercept + slope * at)

    def correct(self, family: str, params: float, batch_sizes: np.ndarray, predicted: np.ndarray) -> np.ndarray | None:
        """`predicted` (one network at `batch_sizes`) corrected, or None when its family was
        not profiled. Memory and latency never fall when the batch size grows, and the
        corrected predictions do not either: where the correction drops faster than the
        prediction rises, they hold their value."""
        factors = self.factors(family, params, batch_sizes)
        if factors is None:
            return None
        order = np.argsort(batch_sizes, kind="stable")
        corrected = np.empty(len(order))
        corrected[order] = np.maximum.accumulate((np.asarray(predicted, dtype=float) * factors)[order])
        return corrected

    def apply(self, rows: pd.DataFrame, predicted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`predicted` corrected for the rows (`family`, `params`, `batch_size`) whose family
        was profiled, and which rows those are."""
        corrected = np.asarray(predicted, dtype=float).copy()
        calibrated = np.zeros(len(rows), dtype=bool)
        for (family, params), group in rows.reset_index(drop=True).groupby(["family", "params"], sort=False):
            values = self.correct(str(family), float(params), group["batch_size"].to_numpy(), corrected[group.index])
            if values is not None:
                corrected[group.index] = values
                calibrated[group.index] = True
        return corrected, calibrated


def predict_calibrated(estimator: Any, trained_on: Dataset, evaluated: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """`estimator`'s predictions of `evaluated`, calibrated on the families of `trained_on`
    (what it was fitted on), as a stored model predicts them; and which rows were."""
    calibration = FamilyCalibration.of(trained_on.rows, estimator.predict(trained_on.features))
    return calibration.apply(evaluated.rows, estimator.predict(evaluated.features))
