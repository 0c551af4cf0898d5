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
(`perf4sight.architecture.family_key`): channel pruning changes the widths of its layers,
nothing else. A network of a family never profiled is not corrected.

`CalibratedModel` is the fitted model as one scikit-learn estimator: the method's
regressor (a pipeline from architectures and batch sizes to the target), these corrections,
the memory bound and what a prediction is checked against (training ranges, layer groups,
recipes, networks), stored by skops as one object; every prediction goes through its
`predict` (`predict_bound` for the bound).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, _fit_context, clone
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from perf4sight.architecture import family_key
from perf4sight.device.definitions import MEMORY, QUANTITIES, STAGES
from perf4sight.device.recipe import Recipe
from perf4sight.features import ARCHITECTURE, BATCH_SIZE
from perf4sight.features.network import networks_per_group
from perf4sight.fit.bound import held_out_ratio
from perf4sight.fit.dataset import logged_recipes
from perf4sight.fit.methods import METHODS, fit_method, method_problem, method_spec
from perf4sight.fit.physical import memory_breakdown

__all__ = ["Answer", "CalibratedModel", "FamilyCalibration", "query_rows"]


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
    (log of measured / predicted), as lists (stored with the fitted model)."""

    residuals: Mapping[str, Mapping[str, list[float]]]
    _prepared: dict[str, _Levels] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def of(cls, rows: Mapping[str, Any], measured: np.ndarray, predicted: np.ndarray) -> FamilyCalibration:
        """From the training rows (`family`, `params`, `batch_size`), their measurements and
        a model's predictions of them; rows where either is not positive carry no ratio and
        are left out."""
        measured, predicted = np.asarray(measured, dtype=float), np.asarray(predicted, dtype=float)
        valid = (measured > 0) & (predicted > 0) & np.isfinite(measured) & np.isfinite(predicted)
        table = pd.DataFrame({name: np.asarray(rows[name])[valid] for name in ("family", "params", "batch_size")})
        table["log_ratio"] = np.log(measured[valid] / predicted[valid])
        return cls({
            str(family): {name: group[name].astype(float).tolist() for name in ("params", "batch_size", "log_ratio")}
            for family, group in table.groupby("family", sort=True)
        })

    def __getstate__(self) -> dict[str, Any]:
        """What is stored: the residuals (the interpolation tables are rebuilt when used)."""
        return {"residuals": self.residuals}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "residuals", state["residuals"])
        object.__setattr__(self, "_prepared", {})

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

    def profiled(self, rows: Mapping[str, Any]) -> np.ndarray:
        """Which rows (`family`) are of a profiled family: those `apply` corrects (`correct`
        gives None for any other)."""
        return np.array([family in self.residuals for family in rows["family"]], dtype=bool)

    def apply(self, rows: Mapping[str, Any], predicted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`predicted` corrected for the rows (`family`, `params`, `batch_size`) whose family
        was profiled, and which rows those are. Grouped in plain Python: a query is one
        network (a handful of rows), where a frame's groupby would cost more than the rest
        of the prediction."""
        corrected = np.array(predicted, dtype=float)
        calibrated = np.zeros(len(corrected), dtype=bool)
        networks: dict[tuple[Any, Any], list[int]] = {}
        for index, network in enumerate(zip(rows["family"], rows["params"])):
            networks.setdefault(network, []).append(index)
        batch_sizes = np.asarray(rows["batch_size"])
        for (family, params), index in networks.items():
            values = self.correct(str(family), float(params), batch_sizes[index], corrected[index])
            if values is not None:
                corrected[index] = values
                calibrated[index] = True
        return corrected, calibrated


def query_rows(X: pd.DataFrame) -> dict[str, Any]:  # noqa: N803 (scikit-learn's names)
    """Each query's family (`family_key`), parameter count and batch size: what the
    corrections are looked up by."""
    archs = X[ARCHITECTURE].tolist()
    first = archs[0] if archs else None
    if all(arch is first for arch in archs):  # one network: the usual query
        family, params = [family_key(first)] * len(archs), [first.params] * len(archs)
    else:
        family, params = [family_key(arch) for arch in archs], [arch.params for arch in archs]
    return {"family": family, "params": params, "batch_size": X[BATCH_SIZE].to_numpy()}


class Answer(NamedTuple):
    """What one prediction of a query frame yields, each computed once: the predicted target
    per row (`CalibratedModel.predict`), the memory bound (None when none was measured),
    which rows were calibrated, whether each fits in the device's memory (None for a model
    that learns no capacity), the feature columns the regressor computed and the method
    that answered (the model's, or its fallback's)."""

    predicted: np.ndarray
    bound: np.ndarray | None
    calibrated: np.ndarray
    fits: np.ndarray | None
    features: pd.DataFrame
    method: str


class CalibratedModel(BaseEstimator):
    """The fitted model: a method's regressor (`make_regressor`: the features of a query
    frame, then the method's steps), its corrections per profiled family (`calibration_`)
    and, with `bound_quantile`, the memory bound (`bound_`, `held_out_ratio`'s), with what a
    prediction checks itself against: the training ranges, layer groups, recipes and
    networks, and why its method and PyTorch were chosen; the device's PyTorch
    (`torch_version`) and measured cost of fresh pages (`fresh_pages_ms_per_mib`) are its
    features' (`make_regressor`). It is what skops stores, whole,
    and every prediction (a user's query, the fingerprint evaluation, the bound's refits) is
    its `predict`.

    X is a query frame (`perf4sight.features.queries`): each row's `architecture` and
    `batch_size`; to fit, also its network (`net`), architecture's name (`model`), which the
    bound leaves out in turn, and training recipe (`RECIPE_COLUMNS`): a `Dataset`'s rows.

    With `fallback` (a method, `Method.fallback`), a second model of that method is fitted on
    the same rows (`fallback_`) and answers the queries the method cannot describe
    (`for_recipe`): `replay`'s for a recipe whose tensor lifetimes cannot be recorded
    (autocast) is `physical`'s."""

    _parameter_constraints: dict[str, list[Any]] = {
        "method": [StrOptions(set(METHODS))],
        "target": [StrOptions({quantity.name for quantity in QUANTITIES})],
        "stage": [StrOptions(set(STAGES))],
        "bound_quantile": [Interval(Real, 0, 1, closed="right"), None],
        "fallback": [StrOptions(set(METHODS)), None],
        "torch_version": [str, None],
        "torch_version_reason": [str, None],
        "fresh_pages_ms_per_mib": [Interval(Real, 0, None, closed="left"), None],
    }

    def __init__(self, method: str = "physical", target: str = MEMORY.name, stage: str = "training",
                 bound_quantile: float | None = None, fallback: str | None = None,
                 torch_version: str | None = None, torch_version_reason: str | None = None,
                 fresh_pages_ms_per_mib: float | None = None) -> None:
        self.method = method
        self.target = target
        self.stage = stage
        self.bound_quantile = bound_quantile
        self.fallback = fallback
        self.torch_version = torch_version
        self.torch_version_reason = torch_version_reason
        self.fresh_pages_ms_per_mib = fresh_pages_ms_per_mib

    @property
    def feature_set(self) -> str:
        """The feature set (a `FEATURE_SETS` key) the method's regressor reads."""
        return method_spec(self.method).feature_set

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: pd.DataFrame, y: Any, *,  # noqa: N803
            method_choice: Mapping[str, Any] | None = None,
            campaign: Mapping[str, Any] | None = None) -> CalibratedModel:
        """Fit the regressor on every row, its corrections on each family's rows and, with
        `bound_quantile`, the bound (refitting without each network in turn); keep what a
        prediction is checked against. `method_choice` (`MethodChoice.as_dict`) says why
        `method = default` chose this method, `campaign` (`campaign_cost`) what profiling
        the runs cost."""
        y = np.asarray(y, dtype=float)
        rows = query_rows(X)
        self.regressor_ = fit_method(self.method, X, y, self.target, self.stage, self.torch_version,
                                     self.fresh_pages_ms_per_mib)
        self.calibration_ = FamilyCalibration.of(rows, y, self.regressor_.predict(X))
        self.bound_ = None if self.bound_quantile is None else held_out_ratio(self, X, y, self.bound_quantile)
        self.fallback_ = None if self.fallback is None else clone(self).set_params(
            method=self.fallback, fallback=None).fit(X, y)
        features = self.regressor_[0].transform(X)
        self.feature_names_ = [str(name) for name in features.columns]
        columns = {**{name: features[name] for name in features.columns}, "params": pd.Series(rows["params"]),
                   BATCH_SIZE: X[BATCH_SIZE], "measured": pd.Series(y)}
        self.training_ranges_ = {name: (float(values.min()), float(values.max())) for name, values in columns.items()}
        # how many training networks hold each layer group: a query with a group that fewer
        # than two (or than all, if fewer) held is extrapolated for it
        self.layer_groups_ = networks_per_group(features, X["net"].reset_index(drop=True))
        # the recipes the training runs ran: what a prediction under another one extrapolates from
        self.recipes_ = logged_recipes(X)
        self.train_nets_ = sorted(X["net"].unique().tolist())
        self.n_train_ = len(y)  # the runs it was fitted on, each once
        self.method_choice_ = None if method_choice is None else dict(method_choice)
        self.campaign_ = None if campaign is None else dict(campaign)
        return self

    def for_recipe(self, recipe: Recipe) -> CalibratedModel:
        """The model that answers a network trained under `recipe`: this one, or its fallback
        where this method cannot describe such runs (`method_problem`: the replay's tensor
        lifetimes under autocast)."""
        check_is_fitted(self, "regressor_")
        if self.fallback_ is not None and method_problem(self.method, [recipe]) is not None:
            return self.fallback_
        return self

    def answering(self, X: pd.DataFrame) -> CalibratedModel:  # noqa: N803
        """The model that answers the queries: this one, or its fallback where any of their
        architectures is trained under a recipe this method cannot describe (`for_recipe`)."""
        check_is_fitted(self, "regressor_")
        recipes = {id(arch): arch.recipe for arch in X[ARCHITECTURE]}.values()
        return next((model for model in map(self.for_recipe, recipes) if model is not self), self)

    def predict(self, X: pd.DataFrame, *, calibrate: bool = True) -> np.ndarray:  # noqa: N803
        """The predicted target per row, corrected where its family was profiled (unless
        `calibrate` is False): `answer`'s."""
        return self.answer(X, calibrate=calibrate).predicted

    def predict_bound(self, X: pd.DataFrame, *, calibrate: bool = True) -> np.ndarray:  # noqa: N803
        """The memory bound per row, above the prediction `predict` makes with `calibrate`
        (`answer`'s); a ValueError for a model that measured none (`bound_` is None: a latency
        model, or one fitted on a single architecture)."""
        bound = self.answer(X, calibrate=calibrate).bound
        if bound is None:
            raise ValueError("this model measured no bound (bound_ is None)")
        return bound

    def answer(self, X: pd.DataFrame, *, calibrate: bool = True) -> Answer:  # noqa: N803
        """Everything a prediction yields (`Answer`), by the regressor's own steps: the
        pipeline's transform up to its solver, run once for the solver's prediction and its
        demand; the bound is the prediction times the held-out ratio, the calibrated one where
        the prediction was calibrated, never below the prediction."""
        model = self.answering(X)
        if model is not self:
            return model.answer(X, calibrate=calibrate)
        design, solver = self.regressor_[:-1].transform(X), self.regressor_[-1]
        predicted = solver.predict(design)
        fits = solver.predict_demand(design) <= solver.capacity_mib() if hasattr(solver, "predict_demand") else None
        if calibrate:
            predicted, calibrated = self.calibration_.apply(query_rows(X), predicted)
        else:
            calibrated = np.zeros(len(predicted), dtype=bool)
        bound = None
        if self.bound_ is not None:
            in_family = self.bound_["calibrated_ratio"] or self.bound_["ratio"]
            bound = predicted * np.maximum(1.0, np.where(calibrated, in_family, self.bound_["ratio"]))
        return Answer(predicted, bound, calibrated, fits, self.regressor_[0].transform(X), self.method)

    def calibrated(self, X: pd.DataFrame) -> np.ndarray:  # noqa: N803
        """Which rows `predict` corrects: those of a profiled family."""
        return self.answering(X).calibration_.profiled(query_rows(X))

    def features(self, X: pd.DataFrame) -> pd.DataFrame:  # noqa: N803
        """The feature columns the regressor computes for the queries (its first step)."""
        return self.answering(X).regressor_[0].transform(X)

    def breakdown(self, X: pd.DataFrame) -> pd.DataFrame:  # noqa: N803
        """What each row's predicted memory is made of (MiB, `memory_breakdown`'s parts as
        `<part>_mib`), and `adjustment_mib`: what the family correction and the device's
        capacity change, so that the parts sum to the prediction."""
        model = self.answering(X)
        if model is not self:
            return model.breakdown(X)
        parts = memory_breakdown(self.regressor_, self.features(X))
        table = pd.DataFrame({f"{name}_mib": values for name, values in parts.items()})
        table["adjustment_mib"] = self.predict(X) - table.sum(axis=1).to_numpy()
        return table

    def capacity_mib(self) -> float:
        """The device memory the regressor learned (infinite when it learned none)."""
        check_is_fitted(self, "regressor_")
        return self.regressor_[-1].capacity_mib()

    def predict_fits(self, X: pd.DataFrame) -> np.ndarray:  # noqa: N803
        """Whether each row fits in the device's memory (a memory model with a capacity)."""
        fits = self.answer(X, calibrate=False).fits
        if fits is None:
            raise ValueError(f"predict_fits needs a memory model that learns a capacity, not a "
                             f"{type(self.regressor_[-1]).__name__}")
        return fits
