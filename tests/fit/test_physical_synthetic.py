"""The physical models recover known device coefficients from rows generated with them.

The feature rows are real (`network` features of small traced networks); the measurements
are made up from chosen coefficients with plain maxima and minima, so the fit (smooth
corners, robust loss, ties) must find those coefficients again. Needs no data outside the
repository."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.pipeline import Pipeline
from torch import nn

from perf4sight.device.recipe import Recipe
from perf4sight.features import feature_table, with_device_costs
from perf4sight.features import TERM_SETS
from perf4sight.features.terms import Role
from perf4sight.fit.physical import physical_steps
from perf4sight.networks import load_architecture

MIB = float(1 << 20)
BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def _net(width: int, *, linear: bool, depthwise: bool) -> nn.Module:
    """Convolutions (with a depthwise one or not; ReLU6 after it where the width is a multiple
    of 8, so that the kinds of layer vary beside the Linear layer), ending in a Linear layer or
    a 1x1 convolution."""
    middle = (nn.Conv2d(width, width, 3, padding=1, groups=width) if depthwise
              else nn.Conv2d(width, width, 3, padding=1))
    head = ([nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, 10)] if linear
            else [nn.Conv2d(2 * width, 10, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten()])
    pointwise = [module for _ in range(width % 3) for module in (nn.Conv2d(width, width, 1), nn.ReLU())]
    activation = nn.ReLU6() if width % 8 == 0 else nn.ReLU()
    return nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), middle, activation,
                         *pointwise, nn.Conv2d(width, 2 * width, 1), nn.ReLU(), *head)


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    """`network` features of eight networks at ten batch sizes, with each row's network, as on
    a CPU (fresh pages measured: the process's own memory counted)."""
    frames = []
    for index, (width, linear, depthwise) in enumerate(
        [(8, True, False), (12, False, False), (16, True, True), (20, False, True),
         (24, True, False), (28, False, False), (32, True, True), (40, False, True)]
    ):
        arch = load_architecture(_net(width, linear=linear, depthwise=depthwise), input_size=(3, 24, 24))
        frames.append(feature_table(arch, BATCH_SIZES, "network", "training", fresh_pages_ms_per_mib=0.25)
                      .assign(net=index))
    return pd.concat(frames, ignore_index=True)


def _model(target: str, terms: str = "network") -> Pipeline:
    """The physical model's term design and solver (of the term set `terms`), fitted on feature rows."""
    return Pipeline(physical_steps(terms, target))


def _amount(rows: pd.DataFrame, name: str, kind: str, terms: str = "network") -> np.ndarray:
    """A declared term's weighted sum of columns (of the term set `terms`)."""
    term = next(term for term in TERM_SETS[terms].by_kind[kind] if term.name == name)
    return sum(rows[column].to_numpy() * weight for column, weight in term.columns.items())


def _of_role(rows: pd.DataFrame, kind: str, role: Role) -> np.ndarray:
    """The summed amounts of the declared terms of `role`."""
    return sum(_amount(rows, term.name, kind) for term in TERM_SETS["network"].by_kind[kind] if term.role is role)


# the heap term at a scale these small networks can show (their gradients are 0.01-0.2 MiB);
# beside the largest layer's copies, a larger one (at 30 the fit found 32.3)
@pytest.mark.parametrize(("terms", "heap", "copies"), [("network", 30.0, 0.0), ("copies", 100.0, 2.0)])
def test_memory_recovers_intercept_scale_floor_library_and_capacity(rows, terms, heap, copies):
    """Each memory term set recovers its coefficients: `copies` adds copies of the largest
    layer's tensors to `network`'s terms."""
    intercept, scale, floor, library, per_kind, per_config = 40.0, 1.5, 60.0, 15.0, 2.0, 3.0
    activations = _amount(rows, "activations", "memory") / MIB
    heap_gradients = _amount(rows, "heap_gradients", "memory") / MIB
    largest_layer = _amount(rows, "layer_copies", "memory", "copies") / MIB
    exact = _of_role(rows, "memory", Role.EXACT) / MIB
    optimizer = _of_role(rows, "memory", Role.OPTIMIZER) / MIB
    loads = (_of_role(rows, "memory", Role.LIBRARY) > 0).astype(float)
    kinds = _amount(rows, "kinds", "memory")
    configs = _amount(rows, "conv_configs", "memory")  # the pointwise convolutions vary them apart from the kinds
    assert set(kinds) == {5.0, 6.0, 7.0} and set(configs) == {3.0, 4.0, 5.0}
    fixed = library * loads + per_kind * kinds + per_config * configs
    unfloored = intercept + fixed + exact + np.maximum(scale * activations + heap * heap_gradients
                                                         + copies * largest_layer, optimizer)
    demand = np.maximum(unfloored, floor + fixed)
    capacity = float(np.quantile(demand, 0.9))
    measured = np.minimum(demand, capacity)
    assert (unfloored < floor + fixed).sum() >= 10 and (demand > capacity).sum() >= 8

    model = _model("mem_used_mib", terms).fit(rows.drop(columns="net"), measured)
    fitted = ["activations", "heap_gradients", *(["layer_copies"] if copies else [])]
    assert list(model[-1].terms_) == fitted
    np.testing.assert_allclose(model[-1].coef_, [scale, heap, copies][:len(fitted)], rtol=0.05)
    assert model[-1].coef_[0] == pytest.approx(scale, rel=0.01)
    assert model[-1].intercept_ == pytest.approx(intercept, rel=0.02)
    assert model[-1].floor_mib_ == pytest.approx(floor, rel=0.02)
    assert model[-1].library_mib_ == pytest.approx(library, rel=0.05)
    assert list(model[-1].footprint_terms_) == ["kinds", "conv_configs"]
    np.testing.assert_allclose(model[-1].footprint_mib_, [per_kind, per_config], rtol=0.05)
    assert model[-1].capacity_mib() == pytest.approx(capacity, rel=0.01)
    np.testing.assert_allclose(model.predict(rows.drop(columns="net")), measured, rtol=0.02)

    # on a device that measured no fresh pages (a GPU) the process's own memory is not counted:
    # nothing to fit for its terms
    elsewhere = _model("mem_used_mib").fit(with_device_costs(rows.drop(columns="net"), None), measured)
    assert elsewhere[-1].coef_[1] == 0.0 and (elsewhere[-1].footprint_mib_ == 0.0).all()

    # no row reaches a capacity or lies below a floor: neither is kept
    clear = demand < 0.95 * capacity
    clear &= demand > 1.05 * (floor + fixed)
    unbounded = _model("mem_used_mib", terms).fit(rows.drop(columns="net")[clear], demand[clear])
    assert unbounded[-1].capacity_mib() == np.inf and unbounded[-1].floor_mib_ == 0.0
    np.testing.assert_allclose(unbounded[-1].coef_, [scale, heap, copies][:len(fitted)], rtol=0.05)
    assert unbounded[-1].coef_[0] == pytest.approx(scale, rel=0.01)


def _latency(rows: pd.DataFrame, intercept: float, rates: dict[str, float]) -> np.ndarray:
    return intercept + sum(rate * _amount(rows, name, "latency") for name, rate in rates.items())


def test_latency_recovers_each_rate_and_leaves_an_absent_kind_unknown(rows):
    rates = {"gemm": 2e-9, "traffic": 5e-9, "launches": 0.05, "parameters": 3e-9, "depthwise": 4e-8, "pooling": 6e-8,
             "grouped": 1e-8}
    measured = _latency(rows, 3.0, rates)
    model = _model("latency_ms").fit(rows.drop(columns="net"), measured)
    fitted = dict(zip(model[-1].terms_, model[-1].coef_))
    # no network has grouped (not depthwise) convolutions, nor runs under autocast: their
    # rates are the GEMMs'
    assert model[-1].tied_terms_ == ["grouped", "autocast_gemm"]
    assert fitted["grouped"] == fitted["gemm"] == fitted["autocast_gemm"]
    for name in ("gemm", "traffic", "launches", "parameters", "depthwise", "pooling"):
        assert fitted[name] == pytest.approx(rates[name], rel=1e-6), name
    assert model[-1].intercept_ == pytest.approx(3.0, rel=1e-6)

    # without the networks that have depthwise convolutions, the data cannot tell their rate: 0,
    # and the other rates as before
    plain = rows[_amount(rows, "depthwise", "latency") == 0]
    without = _model("latency_ms").fit(plain.drop(columns="net"), _latency(plain, 3.0, rates))
    fitted = dict(zip(without[-1].terms_, without[-1].coef_))
    assert without[-1].tied_terms_ == ["grouped", "autocast_gemm"]
    assert fitted["depthwise"] == 0.0
    for name in ("gemm", "traffic", "launches", "parameters", "pooling"):
        assert fitted[name] == pytest.approx(rates[name], rel=1e-6), name


def test_weights_count_networks_not_rows(rows):
    """A weight of 0 leaves a row out; the rest weigh each row's relative error."""
    rates = {"gemm": 2e-9, "traffic": 5e-9, "launches": 0.05, "depthwise": 4e-8}
    measured = _latency(rows, 3.0, rates)
    spoiled = measured.copy()
    spoiled[rows["net"].to_numpy() == 0] *= 3  # one network measured wrong
    weight = (rows["net"].to_numpy() != 0).astype(float)
    model = _model("latency_ms").fit(rows.drop(columns="net"), spoiled, solver__sample_weight=weight)
    np.testing.assert_allclose(model.predict(rows.drop(columns="net")), measured, rtol=1e-6)


def test_runs_under_autocast_give_the_16_bit_gemm_rate_its_own_value(rows):
    """Half the networks also run under bf16 autocast, whose GEMMs take 3x the fp32 rate
    (a CPU emulating bfloat16): the fit finds both rates, and every other one."""
    bf16 = []
    for index, (width, linear, depthwise) in enumerate([(8, True, False), (20, False, True), (28, False, False),
                                                        (40, False, True)]):
        arch = load_architecture(_net(width, linear=linear, depthwise=depthwise), input_size=(3, 24, 24),
                                 recipe=Recipe(precision="amp-bf16"))
        bf16.append(feature_table(arch, BATCH_SIZES, "network", "training").assign(net=100 + index))
    both = pd.concat([rows, *bf16], ignore_index=True)
    rates = {"gemm": 2e-9, "autocast_gemm": 6e-9, "traffic": 5e-9, "launches": 0.05, "depthwise": 4e-8}
    model = _model("latency_ms").fit(both.drop(columns="net"), _latency(both, 3.0, rates))
    fitted = dict(zip(model[-1].terms_, model[-1].coef_))
    assert model[-1].tied_terms_ == ["grouped"]
    for name, rate in rates.items():
        assert fitted[name] == pytest.approx(rate, rel=1e-6), name
