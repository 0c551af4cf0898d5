"""Physical models: a few coefficients per device on whole-network features.

Trees fitted on three pruned families cannot extrapolate to a fourth network; a model
whose terms are bytes and operations can, because a new network only changes the
amounts, not the device's cost of each. Both models here have non-negative
coefficients on features that never shrink with the batch size, so their predictions
never fall when the batch size grows.

Memory (`mem_used_mib`): the runtime's fixed footprint (CUDA context, libraries), plus
weights, gradients and momentum, plus the activations the caching allocator holds. Those
lie between the least the backward pass needs at its worst moment (the saved tensors
plus one layer's gradients and workspace) and every layer output the iteration
allocates (no freed block ever reused): the model takes the midpoint and fits its scale.
A network with a Linear layer also loads the cuBLAS library (its kernels, handle and
workspace), a fixed amount on top of the runtime. Measured memory may also have a floor
(small runs stay within what the runtime reserved anyway) and saturate at the device's
capacity, where the system reclaims its caches; a demand above that capacity is
predicted not to fit. Each of these is fitted only when the training data show it, so
a device without it (a CPU: no CUDA context, no cuBLAS, nothing reserved ahead) fits it
to nothing, and the corners between them are relative (about 1 % wide), since
devices differ in scale by orders of magnitude.

Latency (ms per iteration): a fixed cost, plus GEMM operations at the device's
arithmetic rate (output channels padded to whole tiles), plus bytes moved at its memory
rate (every layer, and the passes over the parameters, which do not depend on the batch
size: the kernels' and the optimizer step's, and the reorders of convolution weights),
plus a cost per layer (kernel launches), plus depthwise and grouped convolutions' operations
at rates of their own where the training networks hold them (their kernels' cost differs most
between devices; tied to the GEMM rate where no network shows it); fitted with non-negative
least squares on relative error.

The terms are declared by the feature set (`perf4sight.features.FEATURE_TERMS`, named in
`TERM_SETS`): `TermDesign` turns a feature table into one column per term of a term set,
and a solver fits named parameters on those plain arrays (`MemorySolver`, `LatencySolver`);
`physical_steps` are the two, the steps of a fitted model after its features
(`perf4sight.fit.methods`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, nnls
from sklearn.base import BaseEstimator, RegressorMixin, TransformerMixin
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, check_non_negative, validate_data

from perf4sight.device.definitions import MEMORY, QUANTITIES, Quantity
from perf4sight.errors import ConfigError
from perf4sight.features import TERM_SETS
from perf4sight.features.network import MEMORY_PARTS
from perf4sight.features.terms import Role, Term

__all__ = ["MemorySolver", "LatencySolver", "TermDesign", "memory_breakdown", "physical_steps", "term_design"]

_MIB = float(1 << 20)
# Sharpness of the smooth corners at the memory floor and capacity: a p-norm of this
# exponent, so a corner is about 1 % of the memory wide (2 ** (1 / 60) - 1 above both
# sides where they meet) whatever the device's scale.
_CORNER_EXPONENT = 60.0
_CORNER_FACTOR = 2 ** (1 / _CORNER_EXPONENT)
# Training runs that must lie beyond the fitted floor or capacity for it to be kept.
_SUPPORT_ROWS = 3


def _smooth_max(a: np.ndarray, b: np.ndarray | float) -> np.ndarray:
    """(a^p + b^p)^(1/p) of non-negative a and b: their maximum with a relative corner."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
    high, low = np.maximum(a, b), np.minimum(a, b)
    ratio = np.divide(low, high, out=np.zeros_like(high), where=high > 0)
    return high * (1 + ratio**_CORNER_EXPONENT) ** (1 / _CORNER_EXPONENT)


def _smooth_min(a: np.ndarray, b: np.ndarray | float) -> np.ndarray:
    """(a^-p + b^-p)^(-1/p) of non-negative a and b (b may be infinite): their minimum."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
    high, low = np.maximum(a, b), np.minimum(a, b)
    ratio = np.divide(low, high, out=np.zeros_like(high), where=np.isfinite(high) & (high > 0))
    return low * (1 + ratio**_CORNER_EXPONENT) ** (-1 / _CORNER_EXPONENT)


def term_design(X: pd.DataFrame, terms: Sequence[Term], scale: float = 1.0) -> np.ndarray:  # noqa: N803
    """One column per term: its weighted sum of `X`'s columns, divided by `scale` (bytes to
    MiB for memory); a library term's column is 1 where the network loads it, else 0; a
    footprint term's is its count."""
    # One array for the whole frame: selecting a sub-frame per term costs more than the
    # arithmetic.
    values = X.to_numpy(dtype=float)
    amounts = []
    for role, weighted in _design_plan(tuple(terms), tuple(X.columns.tolist())):
        amount = sum(values[:, index] * weight for index, weight in weighted)
        amounts.append((amount > 0).astype(float) if role is Role.LIBRARY
                       else amount if role is Role.FOOTPRINT else amount / scale)
    return np.column_stack(amounts)


@functools.lru_cache(maxsize=64)
def _design_plan(terms: tuple[Term, ...], columns: tuple[str, ...]) -> tuple[tuple[Role, tuple], ...]:
    """Per term: its role, and its (column index, weight) pairs in a
    table of `columns`; found once per terms and table layout, since a prediction costs
    little more than finding them."""
    missing = sorted({column for term in terms for column in term.columns} - set(columns))
    if missing:
        raise ValueError(f"feature columns missing: {', '.join(missing)}")
    index = {name: i for i, name in enumerate(columns)}
    return tuple((term.role, tuple((index[name], weight) for name, weight in term.columns.items()))
                 for term in terms)


def _checked_fit_data(estimator: BaseEstimator, X: Any, y: Any, sample_weight: Any) -> tuple:  # noqa: N803
    """X, y and the square roots of the relative weights of the rows weighted above 0 (a row
    of weight 0 is left out, as if it were not there; least squares weighs the squared
    residuals, hence the square roots)."""
    X, y = validate_data(estimator, X, y, y_numeric=True)  # noqa: N806
    check_non_negative(X, f"{type(estimator).__name__}.fit")
    if (y <= 0).any():
        raise ValueError(f"{type(estimator).__name__}: targets must be positive")
    weight = _check_sample_weight(sample_weight, X, ensure_non_negative=True)
    if not weight.any():
        raise ValueError(f"{type(estimator).__name__}: sample_weight is 0 for every row")
    kept = weight > 0
    return X[kept], y[kept], np.sqrt(weight[kept] / weight[kept].mean())


def _amounts(estimator: BaseEstimator, X: Any) -> np.ndarray:  # noqa: N803
    """X checked for a fitted solver's prediction: scikit-learn's checks, but for the term
    design's own output (finite floats of the fitted width, no feature names fitted), which
    passes as it is: a prediction costs little more than those checks."""
    if (type(X) is np.ndarray and X.dtype == np.float64 and X.ndim == 2 and X.shape[1] == estimator.n_features_in_
            and not hasattr(estimator, "feature_names_in_") and np.isfinite(X).all()):
        return X
    return validate_data(estimator, X, reset=False)


def _term_names(estimator: BaseEstimator, n_columns: int) -> list[str]:
    names = list(estimator.terms) if estimator.terms is not None else [f"x{i}" for i in range(n_columns)]
    if len(names) != n_columns:
        raise ValueError(f"{type(estimator).__name__}: {len(names)} term names for {n_columns} columns")
    return names


class _Parameters:
    """Named parameters in the flat vector an optimizer works on, in the order given: each a
    number (size None) or an array of the given size."""

    def __init__(self, **sizes: int | None) -> None:
        self.slices: dict[str, slice] = {}
        self.scalars = {name for name, size in sizes.items() if size is None}
        start = 0
        for name, size in sizes.items():
            self.slices[name] = slice(start, start + (1 if size is None else size))
            start = self.slices[name].stop
        self.size = start

    def vector(self, **values: Any) -> np.ndarray:
        """The flat vector holding `values` (one per name; a number fills an array)."""
        vector = np.empty(self.size)
        for name, where in self.slices.items():
            vector[where] = values[name]
        return vector

    def named(self, vector: np.ndarray) -> dict[str, Any]:
        """Each name's value in `vector`: a float, or a view of its array."""
        return {name: float(vector[where][0]) if name in self.scalars else vector[where]
                for name, where in self.slices.items()}


@dataclass(frozen=True)
class _Amounts:
    """A memory design split by role: the fitted terms' amounts, the exact amount added as
    it is, the optimizer's temporary, whether the library is loaded and the footprint terms'
    counts, per row."""

    design: np.ndarray
    offset: np.ndarray
    optimizer: np.ndarray
    uses_library: np.ndarray
    footprints: np.ndarray

    @classmethod
    def split(cls, X: np.ndarray, roles: tuple[str, ...] | None) -> _Amounts:  # noqa: N803
        fitted, exact, optimizer, library, footprint = _columns_by_role(roles, X.shape[1])
        return cls(X[:, fitted], X[:, exact].sum(axis=1), X[:, optimizer].sum(axis=1),
                   (X[:, library] > 0).any(axis=1).astype(float), X[:, footprint])

    def fixed(self, library: float, footprint: np.ndarray) -> np.ndarray:
        """The fixed footprints per row beside the runtime: the library's where it is
        loaded, and each footprint term's per unit."""
        return library * self.uses_library + self.footprints @ footprint


@functools.cache
def _columns_by_role(roles: tuple[str, ...] | None, n_columns: int) -> tuple[list[int], ...]:
    """The indices of the fitted, exact, optimizer, library and footprint columns (none: all
    fitted); once per roles, since a prediction costs little more than finding them."""
    roles = roles if roles is not None else (Role.FITTED.value,) * n_columns
    return tuple([i for i, role in enumerate(roles) if role == kind.value]
                 for kind in (Role.FITTED, Role.EXACT, Role.OPTIMIZER, Role.LIBRARY, Role.FOOTPRINT))


class MemorySolver(RegressorMixin, BaseEstimator):
    """Memory from term amounts: fixed footprints, exact amounts and the larger of the fitted
    terms and the optimizer's temporary, above a floor and below a capacity.

    `roles` gives each column of X its role (`perf4sight.features.terms.Role` values; none:
    every column a fitted term), `terms` each column's name. Fitted: `intercept_`, `coef_`
    (one per fitted term, named by `terms_`), `floor_mib_`, `library_mib_` (for rows whose
    library column is above 0), `footprint_mib_` (per unit of each footprint term, named by
    `footprint_terms_`) and `capacity_mib_`, in the targets' unit.
    """

    def __init__(self, terms: tuple[str, ...] | None = None, roles: tuple[str, ...] | None = None) -> None:
        self.terms = terms
        self.roles = roles

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True  # amounts of bytes and counts
        tags.target_tags.positive_only = True  # fitted on relative error
        # The fit starts from unit coefficients (amounts in the targets' unit: MiB of bytes
        # held, whose scale is near 1) and a capacity just above the largest target. On
        # amounts of another scale (scikit-learn's check data) the start lies deep beyond
        # the capacity, where the gradients vanish, and the fit stays there.
        tags.regressor_tags.poor_score = True
        return tags

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> MemorySolver:  # noqa: N803
        """Robust least squares on relative error: intercept, coefficients, floor, library,
        footprints, capacity.

        The library footprint is fitted only when some training rows load it and some do
        not, a footprint term's only when its count differs between training rows, and a
        term's coefficient only when some training row holds its amount (else 0). The
        capacity is kept only when the data show it (a few runs whose demand exceeds it);
        otherwise it would cap every prediction just above the largest run measured. The
        floor likewise (a few runs whose demand lies below it): started at the smallest run,
        it would otherwise stay there on a device without one, raising every prediction
        below it.
        """
        X, y, root = _checked_fit_data(self, X, y, sample_weight)  # noqa: N806
        names = _term_names(self, X.shape[1])
        if self.roles is not None and len(self.roles) != X.shape[1]:
            raise ValueError(f"MemorySolver: {len(self.roles)} roles for {X.shape[1]} columns")
        amounts = _Amounts.split(X, self.roles)
        n = amounts.design.shape[1]
        parameters = _Parameters(intercept=None, coef=n, floor=None, library=None,
                                 footprint=amounts.footprints.shape[1], capacity=None)
        present = amounts.design.any(axis=0)  # a term no training row holds has nothing to fit: 0
        free = parameters.vector(intercept=True, coef=present, floor=True, capacity=True,
                                 library=np.unique(amounts.uses_library).size > 1,
                                 footprint=np.ptp(amounts.footprints, axis=0) > 0).astype(bool)
        start = parameters.vector(intercept=0.5 * y.min(), coef=present.astype(float), floor=y.min(), library=0.0,
                                  footprint=0.0, capacity=1.2 * y.max())
        theta = self._solve(parameters, amounts, y, root, start, free)
        fitted = parameters.named(theta)
        fixed = amounts.fixed(fitted["library"], fitted["footprint"])
        unfloored = _unfloored(fitted["intercept"], fitted["coef"], fixed, amounts)
        floor = fitted["floor"] + fixed
        demand = _smooth_max(unfloored, floor)  # as `_demand`, from the parts just computed
        supported = {
            "floor": np.count_nonzero(unfloored * _CORNER_FACTOR < floor) >= _SUPPORT_ROWS,
            "capacity": np.count_nonzero(demand > fitted["capacity"] * _CORNER_FACTOR) >= _SUPPORT_ROWS,
        }
        unsupported = {"floor": 0.0, "capacity": np.inf}
        dropped = [name for name, kept in supported.items() if not kept]
        if dropped:
            for name in dropped:
                free[parameters.slices[name]] = False
                theta[parameters.slices[name]] = unsupported[name]
            theta = self._solve(parameters, amounts, y, root, theta, free)
        fitted = parameters.named(theta)
        by_role = _columns_by_role(self.roles, len(names))
        self.terms_ = np.array([names[i] for i in by_role[0]])
        self.intercept_ = fitted["intercept"]
        self.coef_ = fitted["coef"]
        self.floor_mib_ = fitted["floor"]
        self.library_mib_ = fitted["library"]
        self.footprint_terms_ = np.array([names[i] for i in by_role[4]])
        self.footprint_mib_ = np.array(fitted["footprint"])
        self.capacity_mib_ = fitted["capacity"]
        return self

    @staticmethod
    def _solve(parameters: _Parameters, amounts: _Amounts, y: np.ndarray, root: np.ndarray, start: np.ndarray,
               free: np.ndarray) -> np.ndarray:
        """`start` with its `free` entries fitted; the others stay as they are."""

        def full(x: np.ndarray) -> np.ndarray:
            theta = start.copy()
            theta[free] = x
            return theta

        def residual(x: np.ndarray) -> np.ndarray:
            return (_measured(parameters.named(full(x)), amounts) - y) / y * root

        # The capacity caps what can be measured: no lower than the largest measurement
        # (else a few over-predicted small runs make a capacity of a few MiB on a CPU).
        lower = parameters.vector(intercept=0.0, coef=0.0, floor=0.0, library=0.0, footprint=0.0,
                                  capacity=y.max() / _CORNER_FACTOR)
        bounds = (lower[free], np.full(int(free.sum()), np.inf))
        return full(least_squares(residual, start[free], bounds=bounds, loss="soft_l1", f_scale=0.05).x)

    def demand(self, amounts: _Amounts) -> np.ndarray:
        """What each row asks for, before the capacity caps what is measured."""
        fixed = amounts.fixed(self.library_mib_, self.footprint_mib_)
        return _demand(self.intercept_, self.coef_, self.floor_mib_, fixed, amounts)

    def predict_demand(self, X: Any) -> np.ndarray:  # noqa: N803
        """What each row asks for, before the capacity caps what is measured."""
        check_is_fitted(self)
        return self.demand(_Amounts.split(_amounts(self, X), self.roles))

    def predict(self, X: Any) -> np.ndarray:  # noqa: N803
        """What would be measured: the demand capped at the capacity."""
        return _smooth_min(self.predict_demand(X), self.capacity_mib_)

    def capacity_mib(self) -> float:
        """The device's memory capacity the fit learned from runs that saturated it (MiB);
        infinite when the data showed none."""
        check_is_fitted(self)
        return self.capacity_mib_


def _demand(intercept: float, coef: np.ndarray, floor: float, fixed: np.ndarray, amounts: _Amounts) -> np.ndarray:
    """Memory an iteration asks for: the runtime, the `fixed` footprints (`_Amounts.fixed`),
    exact offset and fitted terms, above the floor (which the fixed footprints lift too)."""
    return _smooth_max(_unfloored(intercept, coef, fixed, amounts), floor + fixed)


def _unfloored(intercept: float, coef: np.ndarray, fixed: np.ndarray, amounts: _Amounts) -> np.ndarray:
    """The runtime, fixed footprints and exact amounts, plus the larger of the activations the
    allocator holds and the optimizer's temporary (allocated once the activations are freed)."""
    held = _smooth_max(amounts.design @ coef, amounts.optimizer)
    return intercept + fixed + amounts.offset + held


def _measured(fitted: dict[str, Any], amounts: _Amounts) -> np.ndarray:
    """Measured memory for named parameters (intercept, coef, floor, library, footprint, capacity)."""
    fixed = amounts.fixed(fitted["library"], fitted["footprint"])
    demand = _demand(fitted["intercept"], fitted["coef"], fitted["floor"], fixed, amounts)
    return _smooth_min(demand, fitted["capacity"])


# A term tied to another (`Term.tie`) has a rate of its own only where some training row holds
# at least this share of the two terms' amounts together in it; else it takes the other's. A rate
# fitted on amounts that small fits the other terms' noise, not the device: a CNN's classifier
# beside its convolutions holds 0.01-0.9 % of the GEMM operations (the TX2's four networks, the
# CPU zoo's), on which the Linear layers' rate came out at 184 (TX2) and 4268 (the demo's original
# three) times the convolutions', and networks whose Linear layers are their body were predicted
# 90-520 times too slow (alexnet, vgg11, convnext). MobileNetV3's classifier heads hold 2-9 %
# (mobilenet_v3_small from 90 % pruned to unpruned; mobilenet_v3_large 5.4): fitted on such a head
# beside the demo's other networks, the rate put alexnet, left out, 5.4 times too slow. Networks
# whose body is Linear layers hold 16-96 % (vgg11 16, alexnet 45-59, convnext 96).
_TIE_SHARE = 0.10


def _held_shares(X: np.ndarray, terms: list[str], ties: dict[str, str]) -> dict[str, float]:  # noqa: N803
    """Per tied term, the largest share of its and its tie's amounts together that it holds in
    one row (0 where neither holds any)."""
    shares = {}
    for name, tie in ties.items():
        own, other = X[:, terms.index(name)], X[:, terms.index(tie)]
        together = own + other
        shares[name] = float(np.max(np.divide(own, together, out=np.zeros_like(own), where=together > 0),
                                    initial=0.0))
    return shares


class LatencySolver(RegressorMixin, BaseEstimator):
    """Latency as a fixed cost plus a non-negative rate per term, from term amounts.

    `terms` names X's columns; `ties` pairs (term, fitted term): a term of which no training
    row holds `_TIE_SHARE` of the two together takes its tie's rate (`tied_terms_` names
    those); `exact` names terms whose amounts are milliseconds known before the fit (a cost
    the device measured), added as they are.
    Fitted: `intercept_`, `coef_` (one per term, named by `terms_`; 1 for an exact term).
    """

    def __init__(self, terms: tuple[str, ...] | None = None, ties: tuple[tuple[str, str], ...] = (),
                 exact: tuple[str, ...] = ()) -> None:
        self.terms = terms
        self.ties = ties
        self.exact = exact

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True  # amounts of operations, bytes and counts
        tags.target_tags.positive_only = True  # fitted on relative error
        return tags

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> LatencySolver:  # noqa: N803
        """Non-negative least squares on relative error, columns scaled for conditioning; the
        exact terms' milliseconds taken off the targets first."""
        X, y, root = _checked_fit_data(self, X, y, sample_weight)  # noqa: N806
        terms = _term_names(self, X.shape[1])
        ties = dict(self.ties)
        unknown = sorted({*ties, *ties.values(), *self.exact} - set(terms))
        if unknown:
            raise ValueError(f"LatencySolver: ties or exact terms name unknown terms: {', '.join(unknown)}")
        held = _held_shares(X, terms, ties)
        tied = [i for i, name in enumerate(terms) if name in ties and held[name] < _TIE_SHARE]
        exact = np.isin(terms, list(self.exact))
        parameters = _Parameters(intercept=None, coef=len(terms))
        fitted = parameters.vector(intercept=True, coef=~np.isin(np.arange(len(terms)), tied) & ~exact).astype(bool)
        full = np.column_stack([np.ones(len(y)), X])[:, fitted]
        scale = np.abs(full).max(axis=0)
        scale[scale == 0] = 1.0
        known = X[:, exact].sum(axis=1)
        solution, _ = nnls(full / scale * (root / y)[:, None], root * (1 - known / y))
        coefficients = np.zeros(parameters.size)
        coefficients[fitted] = solution / scale
        named = parameters.named(coefficients)
        coef = named["coef"]
        coef[exact] = 1.0
        for i in tied:
            coef[i] = coef[terms.index(ties[terms[i]])]
        self.terms_ = np.array(terms)
        self.intercept_ = named["intercept"]
        self.coef_ = coef
        self.tied_terms_ = [terms[i] for i in tied]
        return self

    def demand(self, design: np.ndarray) -> np.ndarray:
        """The latency of each row of term amounts."""
        return self.intercept_ + design @ self.coef_

    def predict(self, X: Any) -> np.ndarray:  # noqa: N803
        """The latency of each row of term amounts."""
        check_is_fitted(self)
        return self.demand(_amounts(self, X))

    def capacity_mib(self) -> float:
        """A latency model learns no memory capacity: infinite."""
        return np.inf


class TermDesign(TransformerMixin, BaseEstimator, auto_wrap_output_keys=None):
    """Feature columns to term amounts: the terms of `term_set` (a `TERM_SETS` name) for
    the model of `target` (`mem_used_mib`: amounts in MiB, or `latency_ms`), one column
    per term, named by `get_feature_names_out`."""

    def __init__(self, term_set: str = "network", target: str = MEMORY.name) -> None:
        self.term_set = term_set
        self.target = target

    def terms(self) -> tuple[Term, ...]:
        """The terms weighed, in column order."""
        if self.term_set not in TERM_SETS:
            raise ValueError(f"term_set '{self.term_set}' is not one of {', '.join(TERM_SETS)}")
        return TERM_SETS[self.term_set].by_kind[_quantity(self.target).kind]

    def fit(self, X: pd.DataFrame, y: Any = None) -> TermDesign:  # noqa: N803 (scikit-learn's names)
        """Check that `X` holds every column the terms weigh."""
        self.transform(X)
        self.n_features_in_ = X.shape[1]
        self.feature_names_in_ = np.asarray(X.columns, dtype=object)
        return self

    def transform(self, X: pd.DataFrame) -> np.ndarray:  # noqa: N803
        """The term amounts of a feature table, one column per term."""
        if not isinstance(X, pd.DataFrame):
            raise ValueError(f"TermDesign needs a DataFrame of feature columns, got a {type(X).__name__}")
        terms = self.terms()
        try:
            return term_design(X, terms, _MIB if self.target == MEMORY.name else 1.0)
        except ValueError as exc:
            raise ValueError(f"TermDesign ('{self.term_set}'): {exc}") from None

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """The term names."""
        return np.asarray([term.name for term in self.terms()], dtype=object)

    def solver(self) -> MemorySolver | LatencySolver:
        """The solver that fits this design's terms: their names, roles and ties."""
        terms = self.terms()
        names = tuple(term.name for term in terms)
        if self.target == MEMORY.name:
            return MemorySolver(terms=names, roles=tuple(term.role.value for term in terms))
        return LatencySolver(terms=names, ties=tuple((term.name, term.tie) for term in terms if term.tie),
                             exact=tuple(term.name for term in terms if term.role is Role.EXACT))


def _quantity(target: str) -> Quantity:
    for quantity in QUANTITIES:
        if quantity.name == target:
            return quantity
    known = ", ".join(quantity.name for quantity in QUANTITIES)
    raise ConfigError(f"unknown target '{target}'; known: {known}")


def memory_breakdown(regressor: Any, features: pd.DataFrame) -> dict[str, np.ndarray]:
    """What a fitted memory model's demand (MiB per row of `features`, the feature table its
    first step computed) is made of: the
    runtime (its fixed footprints), the exact amounts of `MEMORY_PARTS` (weights,
    gradients, optimizer state), the activations it holds split into what autograd saves
    and the rest (workspace, the allocator's cache, the optimizer's temporary where it is
    the larger), and what the device's floor adds; they sum to the demand."""
    solver = regressor[-1]
    if not isinstance(solver, MemorySolver):
        raise ValueError(f"a breakdown needs a physical memory model, not a {type(solver).__name__}")
    amounts = _Amounts.split(regressor[1:-1].transform(features), solver.roles)  # the steps after the features
    fixed = amounts.fixed(solver.library_mib_, solver.footprint_mib_)
    runtime = solver.intercept_ + fixed
    unfloored = _unfloored(solver.intercept_, solver.coef_, fixed, amounts)
    parts = {name: features[list(columns)].to_numpy(dtype=float).sum(axis=1) / _MIB
             for name, columns in MEMORY_PARTS.items()}
    saved = parts.pop("saved_activations")
    held = unfloored - runtime - sum(parts.values())
    parts["saved_activations"] = np.minimum(saved, np.maximum(held, 0.0))
    parts["workspace_cache"] = held - parts["saved_activations"]
    return {"runtime": runtime, **parts, "floor": solver.demand(amounts) - unfloored}


def physical_steps(term_set: str, target: str) -> list[tuple[str, BaseEstimator]]:
    """A physical model after its features: the term design of `term_set` for `target`,
    then the solver of its terms."""
    design = TermDesign(term_set, target)
    return [("terms", design), ("solver", design.solver())]
