"""`method = default`: the method chosen per device and target from the device's own data.

Which model predicts a new network best differs between devices (on the H200 the allocator
replay's memory is far better than `physical`'s, on the TX2 worse), so no method is the
best default everywhere. Fingerprinting measures it instead: each candidate is fitted with
each training network left out in turn and predicts that network's runs (with a single
training network, each profiled architecture, i.e. pruning level, is left out); the
candidate with the lowest mean error over the left-out groups is fitted on everything. Each
refit is a clone of the candidate's `CalibratedModel`, the estimator that is stored, without
its bound and fallback, scored uncalibrated (`leave_one_group_out`, the bound's refit loop).
Ties go to the earlier candidate, the faster one to predict with. A candidate whose model is
another's with more rates (`Method.extends`: `streams` splits `physical`'s traffic rate in two,
`physical` adds a rate for pooling to `flat`'s) fits the training networks at least as well by
construction, so it must also be clearly better on those left out: lower by more than one
standard error of the paired differences over the left-out groups (the one-standard-error
rule; a gain on one group alone is exactly one standard error, not clearly lower); otherwise
the simpler one is chosen, and checked against the one it extends in turn. The same
measure chooses how autograd saved on a device whose PyTorch nothing names
(`choose_torch_version`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from perf4sight import console
from perf4sight.architecture import BEFORE_COPIES, FIRST_COPYING, version_name
from perf4sight.features import ARCHITECTURE
from perf4sight.fit.bound import held_out_groups, leave_one_group_out
from perf4sight.fit.calibration import CalibratedModel
from perf4sight.fit.dataset import Dataset
from perf4sight.fit.methods import CANDIDATE_METHODS, METHODS
from perf4sight.fit.report import mape_pct

__all__ = ["MethodChoice", "held_out_errors", "choose_method", "choose_torch_version", "holds_copies"]


@dataclass(frozen=True)
class MethodChoice:
    """The method chosen for one target, every candidate's held-out error and why."""

    chosen: str
    errors: dict[str, float]  # candidate -> mean MAPE % over the left-out groups
    left_out: str  # "network" or "architecture": what each refit left out
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """For JSON: an error that could not be measured (nothing to leave out) is None."""
        errors = {method: error if np.isfinite(error) else None for method, error in self.errors.items()}
        return {**asdict(self), "errors": errors}


def held_out_errors(method: str, dataset: Dataset, target: str) -> tuple[np.ndarray, str]:
    """MAPE (%) of `method` on each training network, fitted without it (on each
    architecture when one network was profiled), and what was left out; empty when there is
    nothing to leave out (a single architecture)."""
    left_out, groups = held_out_groups(dataset.rows)
    if groups.nunique() < 2:
        return np.empty(0), left_out
    model = CalibratedModel(method, target, dataset.stage, torch_version=dataset.torch_version,
                            fresh_pages_ms_per_mib=dataset.fresh_pages_ms_per_mib)
    errors = [mape_pct(dataset.target[out], fitted.predict(dataset.rows[out].reset_index(drop=True), calibrate=False))
              for _, out, fitted in leave_one_group_out(model, dataset.rows, dataset.target, groups)]
    return np.array(errors), left_out


def _mean(errors: np.ndarray) -> float:
    return float(errors.mean()) if len(errors) else float("nan")


def _standard_error(differences: np.ndarray) -> float:
    return float(differences.std(ddof=1) / np.sqrt(len(differences)))


def _clearly_above(mean: float, error: float) -> bool:
    """Whether a mean of paired differences exceeds one standard error of them. A gain on one
    group alone, the others unchanged, is exactly one standard error ([x, 0, 0]: mean and
    standard error both x / 3), which floating-point rounding would otherwise decide: it is not
    a consistent gain."""
    return mean > error and not np.isclose(mean, error, rtol=1e-9, atol=0.0)


def choose_method(datasets: Mapping[str, Dataset], target: str,
                  excluded: Mapping[str, str] | None = None) -> MethodChoice:
    """The candidate (a key of `datasets`, in `CANDIDATE_METHODS` order, each with the
    training rows in its own method's feature set) with the lowest held-out error;
    `excluded` says why other candidates could not be fitted on the runs (`method_problem`)."""
    candidates = [method for method in CANDIDATE_METHODS if method in datasets]
    unknown = sorted(set(datasets) - set(CANDIDATE_METHODS))
    if unknown or not candidates:
        raise ValueError(f"choose_method: candidates must be among {', '.join(CANDIDATE_METHODS)}; "
                         f"got {list(datasets)}")
    keys = ["model", "batch_size"]
    per_group, left_out = {}, "network"
    for method in candidates:
        if not datasets[method].rows[keys].reset_index(drop=True).equals(
                datasets[candidates[0]].rows[keys].reset_index(drop=True)):
            raise ValueError(f"choose_method: the datasets of {candidates[0]} and {method} hold different runs")
        per_group[method], left_out = held_out_errors(method, datasets[method], target)
    errors = {method: _mean(values) for method, values in per_group.items()}
    scored = {method: error for method, error in errors.items() if np.isfinite(error)}
    if not scored:
        chosen = candidates[0]
        reason = f"one architecture profiled, nothing to leave out: the first candidate, {chosen}"
    else:
        chosen = min(scored, key=lambda method: (scored[method], candidates.index(method)))
        nets = ", ".join(sorted(datasets[chosen].rows["net"].unique()))
        listed = ", ".join(f"{method} {error:.2f} %" for method, error in scored.items())
        tie = [m for m in scored if m != chosen and np.isclose(scored[m], scored[chosen], rtol=1e-9, atol=0.0)]
        steps = [f"lowest mean MAPE with each {left_out} left out of the fit ({nets}): {listed}"
                 + (f"; tied with {', '.join(tie)}, the faster one" if tie else "")]
        simpler = METHODS[chosen].extends
        while simpler in scored:
            gains = per_group[simpler] - per_group[chosen]
            mean, error = float(gains.mean()), _standard_error(gains)
            margin = f"{mean:.2f} points, against one standard error of the paired differences of {error:.2f}"
            if _clearly_above(mean, error):
                steps.append(f"below {simpler}, which has fewer rates, by {margin}")
                break
            steps.append(f"not {chosen}: {simpler} with more rates, not lower than it by more than one standard error "
                         f"(by {margin})")
            chosen, simpler = simpler, METHODS[simpler].extends
        reason = "; ".join(steps)
    for method, why in (excluded or {}).items():
        errors[method] = float("nan")
        reason += f"; not {method}: {why}"
    console.info(f"method for {target}: {chosen} ({reason})")
    return MethodChoice(chosen=chosen, errors=errors, left_out=left_out, reason=reason)


def holds_copies(dataset: Dataset) -> bool:
    """Whether an architecture of the rows holds copies that PyTorch versions make or not
    (`perf4sight.architecture.autograd`)."""
    archs = {id(arch): arch for arch in dataset.rows[ARCHITECTURE]}.values()
    return any(layer.saved_copy_bytes for arch in archs for layer in arch.layers)


def choose_torch_version(fits: Mapping[str | None, tuple[Mapping[str, Dataset], MethodChoice | None]], method: str,
                         target: str) -> tuple[str | None, str]:
    """Where nothing says the device's PyTorch: of the ways autograd saves (`fits`: None, as the
    host's, with the copies; `BEFORE_COPIES`, without), the one whose model (the method chosen
    for it, or `method`) predicts the runs better with each training network left out in turn
    (each architecture, with one network); the host's on a tie or where nothing can be left
    out. Returns the version and why."""
    errors, left_out = {}, "network"
    for version, (datasets, choice) in fits.items():
        if choice is None:
            per_group, left_out = held_out_errors(method, datasets[method], target)
            errors[version] = _mean(per_group)
        else:
            errors[version], left_out = choice.errors[choice.chosen], choice.left_out
    scored = {version: error for version, error in errors.items() if np.isfinite(error)}
    version = min(scored, key=lambda v: (scored[v], v is not None)) if len(scored) == len(errors) else None
    said = {None: f"as PyTorch {FIRST_COPYING} and later save them",
            BEFORE_COPIES: f"as versions {version_name(BEFORE_COPIES)} save them"}
    reason = (f"no PyTorch version recorded beside the logs nor set (torch_version): the runs are described "
              f"{said[version]}, the better with each {left_out} left out: "
              + ", ".join(f"{said[v]} {e:.2f} %" for v, e in errors.items()))
    console.info(reason)
    return version, reason
