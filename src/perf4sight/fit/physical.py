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
plus a cost per layer (kernel launches), plus depthwise and grouped convolutions at rates
of their own where the training networks hold them (their kernels' cost differs most
between devices; tied to the traffic and GEMM rates where no network shows it); fitted with
non-negative least squares on relative error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, nnls
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from perf4sight.device.definitions import MEMORY, QUANTITIES
from perf4sight.errors import ConfigError

__all__ = [
    "PhysicalRegressor", "ReplayRegressor", "MEMORY_TERMS", "MEMORY_EXACT", "MEMORY_OPTIMIZER", "MEMORY_LIBRARY",
    "LATENCY_TERMS", "LATENCY_TIES", "PARAMETER_STREAM_FACTOR", "REPLAY_MEMORY_TERMS", "REPLAY_MEMORY_EXACT",
]

_MIB = float(1 << 20)
# Each term is a weighted sum of feature columns; the model fits one coefficient per term.
MEMORY_TERMS: dict[str, dict[str, float]] = {
    # the midpoint of the two bounds on what the allocator holds
    "activations": {"activation_peak_bytes": 0.5, "output_bytes": 0.5},
}
# Bytes the memory model adds as they are (coefficient 1): weights, gradients and momentum
# are exact amounts, and a fitted scale on them would explode for parameter-heavy networks.
MEMORY_EXACT = ("param_state_bytes",)
# Bytes the optimizer step allocates while the activations are freed: SGD with weight
# decay adds the weights to each gradient in turn, a temporary the size of one layer's
# parameters. Memory holds the larger of it and the activations (coefficient 1: exact).
MEMORY_OPTIMIZER = "optimizer_temp_bytes"
# A network with layers of this count above zero loads cuBLAS: a fixed footprint, added to
# the runtime and to the floor, fitted only when the training data hold networks with and
# without such layers (otherwise it cannot be told apart from the runtime and stays 0).
MEMORY_LIBRARY = "linear_count"
# The parameters' traffic, which does not depend on the batch size (`param_traffic_bytes`:
# the GEMM kernels' reads of their weights and writes of their gradients, and the optimizer
# step's 11 passes in training), streams contiguous data, faster than the layers'
# activations. Fitted with a rate of its own on all the data of this machine's CPU (eight
# networks; alexnet and vgg11 hold 96 % of their parameters in Linear layers), a Linear
# weight costs 3.0 of the layers' passes per training iteration for its 14 passes. Tied to
# the memory rate at this factor, the parameters need no networks with large parameter
# counts in the training data. The reorders of convolution weights
# (`conv_weight_traffic_bytes`, once per kernel) go at the layers' rate: the same fit puts a
# convolution weight at 5.2 passes per training iteration (the TX2's and the CPU demo's
# data, nearly all convolutions: 5.4-5.8), against 3 + 3 here.
PARAMETER_STREAM_FACTOR = 3.0 / 14.0
LATENCY_TERMS: dict[str, dict[str, float]] = {
    # GEMM work with the output channels padded to whole tiles: the steps pruned widths cause
    "gemm": dict.fromkeys(("conv_kxk_padded_flops", "conv_1x1_padded_flops", "linear_padded_flops"), 1.0),
    "traffic": {
        **dict.fromkeys(("conv_kxk_bytes", "conv_1x1_bytes", "conv_grouped_bytes", "linear_bytes", "norm_bytes",
                         "act_bytes", "pool_bytes", "elementwise_bytes", "other_bytes"), 1.0),
        "param_traffic_bytes": PARAMETER_STREAM_FACTOR,
        "conv_weight_traffic_bytes": 1.0,
    },
    "launches": {"layers": 1.0},
    # Depthwise and grouped convolutions run kernels of their own, whose cost per byte or
    # operation differs from one device and library to the next (the TX2's depthwise layers
    # cost nothing beyond their neighbours' traffic, the H200's 9 times the traffic rate):
    # each has a rate of its own, fitted where the training networks hold such layers.
    "depthwise": {"conv_depthwise_bytes": 1.0},
    "grouped": {"conv_grouped_padded_flops": 1.0},
}
# A layer kind's term that the training rows cannot identify (no such layer in them) takes
# the rate of the term it belongs to without a rate of its own: depthwise convolutions
# move bytes, grouped ones are GEMMs.
LATENCY_TIES: dict[str, str] = {"depthwise": "traffic", "grouped": "gemm"}
# The allocator replay (`replay` features): the peak of live tensors, which includes the
# weights, gradients, momentum buffers and the optimizer's temporaries, is an exact amount
# (added as it is); what the caching allocator holds beyond it gets a fitted multiple.
REPLAY_MEMORY_TERMS: dict[str, dict[str, float]] = {"cached": {"replay_cached_bytes": 1.0}}
REPLAY_MEMORY_EXACT = ("replay_allocated_bytes",)
# Sharpness of the smooth corners at the memory floor and capacity: a p-norm of this
# exponent, so a corner is about 1 % of the memory wide (2 ** (1 / 60) - 1 above both
# sides where they meet) whatever the device's scale.
_CORNER_EXPONENT = 60.0
_CORNER_FACTOR = 2 ** (1 / _CORNER_EXPONENT)
# Training runs that must lie beyond the fitted floor or capacity for it to be kept.
_SUPPORT_ROWS = 3
# Fitted attributes of the memory model only.
_MEMORY_ONLY_ATTRIBUTES = ("floor_mib_", "library_mib_", "capacity_mib_")
# Fitted attributes of the latency model only.
_LATENCY_ONLY_ATTRIBUTES = ("tied_terms_",)


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


@dataclass(frozen=True)
class _Amounts:
    """What the model weighs, per row: one column per term (MiB for memory); for memory also
    the exact bytes (MiB), the optimizer's temporary (MiB) and whether cuBLAS is loaded."""

    design: np.ndarray
    offset: np.ndarray
    optimizer: np.ndarray
    uses_library: np.ndarray

    def rows(self, mask: np.ndarray) -> _Amounts:
        return _Amounts(self.design[mask], self.offset[mask], self.optimizer[mask], self.uses_library[mask])


def _demand(intercept: float, coef: np.ndarray, floor: float, library: float, amounts: _Amounts) -> np.ndarray:
    """Memory an iteration asks for: fixed footprints, exact offset and fitted terms, above the floor."""
    return _smooth_max(_unfloored(intercept, coef, library, amounts), floor + library * amounts.uses_library)


def _unfloored(intercept: float, coef: np.ndarray, library: float, amounts: _Amounts) -> np.ndarray:
    """The fixed footprints and exact bytes, plus the larger of the activations the allocator
    holds and the optimizer's temporary (allocated once the activations are freed)."""
    held = _smooth_max(amounts.design @ coef, amounts.optimizer)
    return intercept + library * amounts.uses_library + amounts.offset + held


class PhysicalRegressor(RegressorMixin, BaseEstimator):
    """Memory or latency as a few device coefficients times whole-network amounts.

    `target` picks the model: `mem_used_mib` or `latency_ms`. After fitting,
    `coef_` holds one coefficient per term (`terms_`) and `intercept_` the fixed cost;
    the memory model also has `floor_mib_`, `library_mib_` (cuBLAS, for networks with a
    Linear layer) and `capacity_mib_`.
    """

    feature_set = "network"
    trusted_types: tuple[str, ...] = ()
    # what the memory model weighs (one coefficient per term), adds as it is, and holds as
    # the larger of it and the activations (None: nothing)
    memory_terms = MEMORY_TERMS
    memory_exact: tuple[str, ...] = MEMORY_EXACT
    memory_optimizer: str | None = MEMORY_OPTIMIZER

    def __init__(self, target: str = MEMORY.name) -> None:
        self.target = target

    def _terms(self) -> dict[str, dict[str, float]]:
        known = tuple(quantity.name for quantity in QUANTITIES)
        if self.target not in known:
            raise ConfigError(f"{type(self).__name__}: unknown target '{self.target}'; known: {', '.join(known)}")
        return self.memory_terms if self.target == MEMORY.name else LATENCY_TERMS

    def _amounts(self, X: Any) -> _Amounts:  # noqa: N803 (scikit-learn's names)
        """The term amounts, one column per term, and for memory the exact bytes, the
        optimizer's temporary and whether each row's network loads cuBLAS (zeros for latency)."""
        if not isinstance(X, pd.DataFrame):
            raise ValueError("PhysicalRegressor needs a DataFrame of 'network' features (named columns)")
        terms = self._terms()
        memory = self.target == MEMORY.name
        optimizer = () if self.memory_optimizer is None else (self.memory_optimizer,)
        exact = (*self.memory_exact, *optimizer, MEMORY_LIBRARY) if memory else ()
        missing = sorted({c for cols in terms.values() for c in cols}.union(exact) - set(X.columns.tolist()))
        if missing:
            raise ValueError(f"{type(self).__name__}: feature columns missing: {', '.join(missing)}")
        # One array for the whole frame: selecting a sub-frame per term costs more than the
        # arithmetic.
        values = X.to_numpy(dtype=float)
        column = {name: values[:, i] for i, name in enumerate(X.columns.tolist())}
        design = np.column_stack(
            [sum(column[name] * weight for name, weight in cols.items()) for cols in terms.values()]
        )
        zeros = np.zeros(len(X))
        if not memory:
            return _Amounts(design, zeros, zeros, zeros)
        return _Amounts(
            design / _MIB,
            sum((column[name] for name in self.memory_exact), zeros) / _MIB,
            column[self.memory_optimizer] / _MIB if self.memory_optimizer is not None else zeros,
            (column[MEMORY_LIBRARY] > 0).astype(float),
        )

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> PhysicalRegressor:  # noqa: N803
        """Fit the coefficients; `sample_weight` weighs each row's relative error."""
        amounts = self._amounts(X)
        y = np.asarray(y, dtype=float)
        if amounts.design.shape[0] != y.shape[0] or not len(y):
            raise ValueError(f"PhysicalRegressor: {amounts.design.shape[0]} feature rows for {y.shape[0]} targets")
        if not np.isfinite(amounts.design).all() or not np.isfinite(y).all() or (y <= 0).any():
            raise ValueError("PhysicalRegressor: features and targets must be finite and targets positive")
        weight = np.ones_like(y) if sample_weight is None else np.asarray(sample_weight, dtype=float)
        if weight.shape != y.shape or not np.isfinite(weight).all() or (weight < 0).any() or not weight.any():
            raise ValueError("PhysicalRegressor: sample_weight must be one finite, non-negative weight per row")
        # A row of weight 0 is left out, as if it were not there; least squares weighs the
        # squared residuals, hence the square roots.
        kept = weight > 0
        amounts, y = amounts.rows(kept), y[kept]
        # A refit must not keep another target's fitted attributes (read where present).
        for name in (*_MEMORY_ONLY_ATTRIBUTES, *_LATENCY_ONLY_ATTRIBUTES):
            self.__dict__.pop(name, None)
        root = np.sqrt(weight[kept] / weight[kept].mean())
        self.terms_ = np.array(list(self._terms()))
        self.n_features_in_ = X.shape[1]
        self.feature_names_in_ = np.asarray(X.columns, dtype=object)
        if self.target == MEMORY.name:
            self._fit_memory(amounts, y, root)
        else:
            self._fit_additive(amounts.design, y, root)
        return self

    def _fit_additive(self, design: np.ndarray, y: np.ndarray, root: np.ndarray) -> None:
        """Non-negative least squares on relative error, columns scaled for conditioning;
        a tied term (`LATENCY_TIES`) that no training row holds takes its tie's rate
        (`tied_terms_` names those)."""
        terms = list(self.terms_)
        absent = ~design.any(axis=0)
        tied = [i for i, name in enumerate(terms) if name in LATENCY_TIES and absent[i]]
        fitted = np.r_[True, ~np.isin(np.arange(len(terms)), tied)]
        full = np.column_stack([np.ones(len(y)), design])[:, fitted]
        scale = np.abs(full).max(axis=0)
        scale[scale == 0] = 1.0
        solution, _ = nnls(full / scale * (root / y)[:, None], root)
        coefficients = np.zeros(1 + len(terms))
        coefficients[fitted] = solution / scale
        for i in tied:
            coefficients[1 + i] = coefficients[1 + terms.index(LATENCY_TIES[terms[i]])]
        self.intercept_ = float(coefficients[0])
        self.coef_ = coefficients[1:]
        self.tied_terms_ = [str(terms[i]) for i in tied]

    def _fit_memory(self, amounts: _Amounts, y: np.ndarray, root: np.ndarray) -> None:
        """Robust least squares on relative error: intercept, coefficients, floor, library, capacity.

        The library footprint is fitted only when some training networks load cuBLAS and
        some do not. The capacity is kept only when the data show it (a few runs whose
        demand exceeds it); otherwise it would cap every prediction just above the
        largest run measured. The floor likewise (a few runs whose demand lies below it):
        started at the smallest run, it would otherwise stay there on a device without
        one, raising every prediction below it.
        """
        n = amounts.design.shape[1]
        free = np.ones(4 + n, dtype=bool)
        free[2 + n] = np.unique(amounts.uses_library).size > 1
        theta = self._solve(amounts, y, root, np.r_[0.5 * y.min(), np.ones(n), y.min(), 0.0, 1.2 * y.max()], free)
        unfloored = _unfloored(theta[0], theta[1 : 1 + n], theta[2 + n], amounts)
        floor = theta[1 + n] + theta[2 + n] * amounts.uses_library
        demand = _smooth_max(unfloored, floor)  # as `_demand`, from the parts just computed
        supported = {  # floor, capacity
            1 + n: np.count_nonzero(unfloored * _CORNER_FACTOR < floor) >= _SUPPORT_ROWS,
            3 + n: np.count_nonzero(demand > theta[3 + n] * _CORNER_FACTOR) >= _SUPPORT_ROWS,
        }
        dropped = [index for index, kept in supported.items() if not kept]
        if dropped:
            free[dropped] = False
            theta[dropped] = [{1 + n: 0.0, 3 + n: np.inf}[index] for index in dropped]
            theta = self._solve(amounts, y, root, theta, free)
        self.intercept_ = float(theta[0])
        self.coef_ = theta[1 : 1 + n]
        self.floor_mib_ = float(theta[1 + n])
        self.library_mib_ = float(theta[2 + n])
        self.capacity_mib_ = float(theta[3 + n])

    @classmethod
    def _solve(
        cls, amounts: _Amounts, y: np.ndarray, root: np.ndarray, start: np.ndarray, free: np.ndarray
    ) -> np.ndarray:
        """`start` with its `free` entries fitted; the others stay as they are."""

        def full(x: np.ndarray) -> np.ndarray:
            theta = start.copy()
            theta[free] = x
            return theta

        def residual(x: np.ndarray) -> np.ndarray:
            return (cls._memory(full(x), amounts) - y) / y * root

        # The capacity caps what can be measured: no lower than the largest measurement
        # (else a few over-predicted small runs make a capacity of a few MiB on a CPU).
        lower = np.zeros_like(start)
        lower[-1] = y.max() / _CORNER_FACTOR
        bounds = (lower[free], np.full(int(free.sum()), np.inf))
        return full(least_squares(residual, start[free], bounds=bounds, loss="soft_l1", f_scale=0.05).x)

    @staticmethod
    def _memory(theta: np.ndarray, amounts: _Amounts) -> np.ndarray:
        """Measured memory for parameters theta (intercept, coefficients, floor, library, capacity)."""
        n = amounts.design.shape[1]
        measured = _demand(theta[0], theta[1 : 1 + n], theta[1 + n], theta[2 + n], amounts)
        return _smooth_min(measured, theta[3 + n])

    def predict_demand(self, X: Any) -> np.ndarray:  # noqa: N803
        """What the iteration asks for, before the device's capacity caps the measurement."""
        check_is_fitted(self)
        amounts = self._amounts(X)
        if self.target == MEMORY.name:
            return _demand(self.intercept_, self.coef_, self.floor_mib_, self.library_mib_, amounts)
        return self.intercept_ + amounts.design @ self.coef_

    def predict(self, X: Any) -> np.ndarray:  # noqa: N803
        """What would be measured: memory capped at the device's capacity, or latency."""
        demand = self.predict_demand(X)
        if self.target == MEMORY.name:
            return _smooth_min(demand, self.capacity_mib_)
        return demand

    def capacity_mib(self) -> float:
        """The device's memory capacity the fit learned from runs that saturated it (MiB);
        infinite when the data showed none, and for the latency model."""
        check_is_fitted(self)
        return self.capacity_mib_ if self.target == MEMORY.name else np.inf

    def predict_fits(self, X: Any) -> np.ndarray:  # noqa: N803
        """Whether each row fits in the device's memory (memory model only)."""
        if self.target != MEMORY.name:
            raise ValueError(f"predict_fits needs the memory model (target='{MEMORY.name}')")
        return self.predict_demand(X) <= self.capacity_mib_


class ReplayRegressor(PhysicalRegressor):
    """`PhysicalRegressor` whose memory model follows the allocator replay.

    The same latency model. Memory is the runtime's footprint (and cuBLAS's), plus the peak
    of live tensors as the replay finds it, plus a fitted multiple of what the caching
    allocator holds beyond that peak: near 1 on a CUDA device, where the rest is what the
    replay does not see (cuDNN workspaces), and little on a CPU, whose allocator gives
    large blocks back.
    """

    feature_set = "replay"
    memory_terms = REPLAY_MEMORY_TERMS
    memory_exact = REPLAY_MEMORY_EXACT
    memory_optimizer = None
