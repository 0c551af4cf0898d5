"""The physical models on real measurements (the H200's in the repository; the TX2's, whose
memory reaches its capacity, beside it): contract, accuracy, monotonicity, storage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import Pipeline

from perf4sight.device.definitions import QUANTITIES
from perf4sight.errors import ConfigError
from perf4sight.features import FEATURE_SETS, FeatureTransformer, queries
from perf4sight.fit import (
    BOUND_QUANTILE,
    DEFAULT_METHOD,
    METHODS,
    ArchitectureCatalog,
    CalibratedModel,
    Dataset,
    build_dataset,
    fit_method,
    held_out_ratio,
    make_regressor,
    Fingerprint,
    load_model,
    mape_pct,
    network_weights,
    read_logs,
    save_models,
)
from perf4sight.features.network import PARAMETER_STREAM_FACTOR
from perf4sight.fit.physical import LatencySolver, MemorySolver, TermDesign, physical_steps

NETS = ("resnet18", "googlenet", "squeezenet")


def _datasets(folder: Path, levels: tuple[int, ...]) -> dict[str, Dataset]:
    """The levels of each of NETS in `folder`, with whole-network features, per target."""
    catalog = ArchitectureCatalog(folder / "models")
    out = {}
    for quantity in QUANTITIES:
        logs = read_logs(NETS, levels, [folder / quantity.kind], [quantity])
        out[quantity.name] = build_dataset(logs, target=quantity.name, feature_set="network", stage="training",
                                           catalog=catalog)
    return out


@pytest.fixture(scope="module")
def datasets(h200_dir):
    return _datasets(h200_dir, (0, 30, 60, 90))


@pytest.fixture(scope="module")
def tx2_datasets(tx2_dir):
    return _datasets(tx2_dir, (0, 50, 90))


def _levels(dataset):
    return dataset.rows["model"].str.rsplit("_", n=1).str[1].astype(int).to_numpy()


def _fit(data: Dataset, column: str, method: str = "physical") -> Pipeline:
    return fit_method(method, data.rows, data.target, column)


def _on_features(target: str) -> Pipeline:
    """The physical model's steps after its features: fitted on and applied to feature tables."""
    return Pipeline(physical_steps("network", target))


def _demand(model: Pipeline, features: pd.DataFrame) -> np.ndarray:
    """What a fitted memory model's rows ask for, before the capacity caps it."""
    return model[-1].predict_demand(model[-2].transform(features))


def test_registered_and_default():
    assert DEFAULT_METHOD == "default" and DEFAULT_METHOD not in METHODS  # chosen when fitting
    assert {METHODS[name].feature_set for name in ("physical", "replay", "streams")} <= set(FEATURE_SETS)
    memory, latency = make_regressor("physical", "mem_used_mib"), make_regressor("physical", "latency_ms")
    assert [type(step) for step in memory] == [FeatureTransformer, TermDesign, MemorySolver]
    assert [type(step) for step in latency] == [FeatureTransformer, TermDesign, LatencySolver]


def test_estimator_contract(datasets):
    data = datasets["latency_ms"]
    model = make_regressor("physical", "latency_ms")
    assert clone(model).get_params().keys() == model.get_params().keys()
    assert model.get_params()["terms__target"] == "latency_ms" and model.get_params()["features__feature_set"] == "network"
    with pytest.raises(NotFittedError):
        model.predict(data.rows)
    assert model.fit(data.rows, data.target) is model
    solver = model[-1]
    learned = [name for name in vars(solver) if name not in solver.get_params()]
    assert learned and all(name.endswith("_") for name in learned)
    assert solver.coef_.shape == (len(solver.terms_),) and (solver.coef_ >= 0).all()
    assert list(model[:-1].get_feature_names_out()) == list(solver.terms)


# (fixture, held-out level, column, bound) over the errors measured (H200: 5.39 % memory, 14.51 %
# latency; TX2: 9.01 % and 6.90 %): a change that costs accuracy fails here.
@pytest.mark.parametrize("data_fixture, level, column, bound_pct", [
    ("datasets", 60, "mem_used_mib", 12.0), ("datasets", 60, "latency_ms", 20.0),
    pytest.param("tx2_datasets", 50, "mem_used_mib", 12.0, marks=pytest.mark.tx2),
    pytest.param("tx2_datasets", 50, "latency_ms", 12.0, marks=pytest.mark.tx2),
])
def test_interpolates_held_out_levels(request, data_fixture, level, column, bound_pct):
    data = request.getfixturevalue(data_fixture)[column]
    held_out = _levels(data) == level
    model = _fit(data.select(~held_out), column)
    test = data.select(held_out)
    error = mape_pct(test.target, model.predict(test.rows))
    assert 0 < error < bound_pct


# About 1.5 to 2 times the errors measured on googlenet left out (H200: 7.92 % memory, 11.27 %
# latency; TX2: 2.42 % and 7.27 %): a change to the model that costs accuracy fails here.
@pytest.mark.parametrize("data_fixture, column, bound_pct", [
    ("datasets", "mem_used_mib", 12.0), ("datasets", "latency_ms", 17.0),
    pytest.param("tx2_datasets", "mem_used_mib", 5.0, marks=pytest.mark.tx2),
    pytest.param("tx2_datasets", "latency_ms", 14.5, marks=pytest.mark.tx2),
])
def test_predicts_an_unseen_network(request, data_fixture, column, bound_pct):
    data = request.getfixturevalue(data_fixture)[column]
    unseen = (data.rows["net"] == "googlenet").to_numpy()
    model = _fit(data.select(~unseen), column)
    test = data.select(unseen)
    assert mape_pct(test.target, model.predict(test.rows)) < bound_pct


def test_memory_model_is_physical_and_monotone(tx2_datasets, tx2_dir):
    """The TX2's memory reaches its capacity (the H200's never does)."""
    data = tx2_datasets["mem_used_mib"]
    model = CalibratedModel("physical", "mem_used_mib").fit(data.rows, data.target)
    solver = model.regressor_[-1]
    # a runtime footprint (CUDA context, libraries) of some hundreds of MiB, capacity under 8 GiB
    assert 300 < solver.intercept_ < 3000
    assert solver.floor_mib_ < model.capacity_mib() < 8192
    arch = ArchitectureCatalog(tx2_dir / "models").get("resnet18_50")
    query = queries(arch, [1, 2, 8, 32, 128, 512, 4096])
    predicted = model.predict(query, calibrate=False)
    assert (np.diff(predicted) >= 0).all() and (np.diff(_demand(model.regressor_, model.features(query))) > 0).any()
    fits = model.predict_fits(query)
    assert fits[0] and not fits[-1]


def test_capacity_only_when_the_data_reach_it(datasets, h200_dir):
    data = datasets["mem_used_mib"]
    small = data.select(data.rows["batch_size"].to_numpy() <= 32)
    model = CalibratedModel("physical", "mem_used_mib").fit(small.rows, small.target)
    assert model.capacity_mib() == np.inf
    query = queries(ArchitectureCatalog(h200_dir / "models").get("googlenet_0"), [256])
    assert model.predict(query, calibrate=False)[0] > 1.5 * small.target.max()
    assert model.predict_fits(query).all()


def test_latency_rises_with_batch_size(datasets, h200_dir):
    data = datasets["latency_ms"]
    model = CalibratedModel("physical", "latency_ms").fit(data.rows, data.target)
    query = queries(ArchitectureCatalog(h200_dir / "models").get("squeezenet_0"), [1, 2, 4, 16, 64, 256])
    assert (np.diff(model.predict(query, calibrate=False)) > 0).all()
    with pytest.raises(ValueError, match="memory model"):
        model.predict_fits(query)


def test_stored_with_skops_and_reloaded(datasets, tmp_path):
    data = datasets["mem_used_mib"]
    model = CalibratedModel("physical", "mem_used_mib").fit(data.rows, data.target)
    save_models([model], storedir=tmp_path, fingerprint=Fingerprint("Jetson TX2", "tx2", "2026-12-03T12:00:00+00:00"))
    loaded = load_model(tmp_path, stage="training", target="mem_used_mib")
    assert loaded.regressor_["terms"].get_params() == {"term_set": "network", "target": "mem_used_mib"}
    np.testing.assert_allclose(loaded.predict(data.rows), model.predict(data.rows))


def test_bad_input(datasets):
    data = datasets["latency_ms"]
    with pytest.raises(ConfigError, match="unknown target 'power'"):
        TermDesign(target="power").fit(data.features)
    with pytest.raises(ValueError, match="missing: layers"):
        _on_features("latency_ms").fit(data.features.drop(columns="layers"), data.target)
    with pytest.raises(ValueError, match="DataFrame"):
        _on_features("latency_ms").fit(data.features.to_numpy(), data.target)
    with pytest.raises(ValueError, match="query frame"):
        make_regressor("physical", "latency_ms").fit(data.features, data.target)


def test_cublas_footprint_only_where_the_data_tell_it_apart(tx2_datasets):
    """On the TX2's data the footprint is told apart (on the H200's it is a few MiB)."""
    data = tx2_datasets["mem_used_mib"]
    nets = data.rows["net"].to_numpy()
    # resnet18 has a Linear layer (cuBLAS loaded), squeezenet none: the footprint is identifiable
    mixed = _fit(data.select(nets != "googlenet"), "mem_used_mib")
    library = mixed[-1].library_mib_
    assert 100 < library < 600
    features = data.features[nets == "googlenet"]
    without = features.assign(linear_count=0.0)
    demand = _demand(mixed, features)
    # the footprint adds as it is, but near the floor, within its corner (about 1 % wide)
    added = demand - _demand(mixed, without)
    assert (np.abs(added - library) <= 0.012 * demand).all()
    assert np.median(np.abs(added - library)) < 1e-6 * library
    # every training network has a Linear layer: the footprint is part of the runtime
    assert _fit(data.select(nets != "squeezenet"), "mem_used_mib")[-1].library_mib_ == 0.0


def test_memory_model_has_no_absolute_scale(datasets):
    """A device with 16x less of everything (a CPU next to the TX2's unified memory) is fitted
    as well: the corners at the floor and capacity are relative, not a fixed number of MiB."""
    data = datasets["mem_used_mib"]
    weights = network_weights(data.rows["net"])
    model = _on_features("mem_used_mib").fit(data.features, data.target, solver__sample_weight=weights)
    byte_columns = [c for c in data.features.columns if c.endswith("_bytes")]
    small = data.features.assign(**{c: data.features[c] / 16 for c in byte_columns})
    scaled = _on_features("mem_used_mib").fit(small, data.target / 16, solver__sample_weight=weights)
    np.testing.assert_allclose(16 * scaled.predict(small), model.predict(data.features), rtol=1e-4)
    np.testing.assert_allclose(16 * scaled[-1].floor_mib_, model[-1].floor_mib_, rtol=1e-4)


def test_parameters_cost_memory_traffic(datasets):
    """Parameter traffic is charged at the rate fitted for the layers' memory traffic, so
    training networks with few parameters still price a network with many; it streams
    faster than activations, but a convolution's weight reorders do not."""
    data = datasets["latency_ms"]
    model = _on_features("latency_ms").fit(data.features, data.target)
    rate = model[-1].coef_[list(model[-1].terms_).index("traffic")]
    assert rate > 0
    streamed = data.features.assign(param_traffic_bytes=data.features["param_traffic_bytes"] + 1e8)
    reordered = data.features.assign(conv_weight_traffic_bytes=data.features["conv_weight_traffic_bytes"] + 1e8)
    base = model.predict(data.features)
    np.testing.assert_allclose(model.predict(streamed) - base, 1e8 * PARAMETER_STREAM_FACTOR * rate)
    np.testing.assert_allclose(model.predict(reordered) - base, 1e8 * rate)


@pytest.mark.parametrize("column", ["mem_used_mib", "latency_ms"])
def test_rows_weighted_zero_are_left_out_of_the_fit(datasets, column):
    data = datasets[column]
    kept = (data.rows["net"] != "squeezenet").to_numpy()
    weighted = _on_features(column).fit(data.features, data.target, solver__sample_weight=kept.astype(float))
    subset = data.select(kept)
    alone = _on_features(column).fit(subset.features, subset.target)
    np.testing.assert_allclose(weighted.predict(data.features), alone.predict(data.features), rtol=1e-3)
    with pytest.raises(ValueError, match="sample_weight"):
        _on_features(column).fit(data.features, data.target, solver__sample_weight=-np.ones(len(data.target)))


def test_fitting_weighs_each_network_equally(datasets):
    nets, sizes = datasets["latency_ms"].rows["net"], datasets["latency_ms"].rows["batch_size"]
    # resnet18 without its largest batch size: the networks passed different numbers of runs
    data = datasets["latency_ms"].select(((nets != "googlenet") & ~((nets == "resnet18") & (sizes == sizes.max())))
                                         .to_numpy())
    weights = network_weights(data.rows["net"])
    per_net = pd.Series(weights).groupby(data.rows["net"].to_numpy()).sum()
    assert np.allclose(per_net, per_net.iloc[0]) and weights.mean() == pytest.approx(1.0)
    assert data.rows["net"].value_counts().nunique() > 1
    expected = _on_features("latency_ms").fit(data.features, data.target, solver__sample_weight=weights)
    np.testing.assert_allclose(_fit(data, "latency_ms")[-1].coef_, expected[-1].coef_)
    assert _fit(data, "latency_ms", "paper").predict(data.rows).shape == (len(data.target),)


def test_memory_holds_the_larger_of_activations_and_the_optimizer_temporary(tx2_datasets):
    data = tx2_datasets["mem_used_mib"]
    model = _fit(data, "mem_used_mib")
    solver = model[-1]
    features = data.features.iloc[:5].copy()
    base = _demand(model, features)
    # the optimizer's temporary of these conv networks hides under their activations
    assert (features["optimizer_temp_bytes"] < features["activation_peak_bytes"]).all()
    none = features.assign(optimizer_temp_bytes=0.0)
    np.testing.assert_allclose(_demand(model, none), base, rtol=1e-9)
    # a layer of 4 GiB (a huge Linear): its temporary replaces the activations, not adds to them
    huge = features.assign(optimizer_temp_bytes=float(4 << 30))
    activations = _demand(model, none) - solver.intercept_ - solver.library_mib_ - features["param_state_bytes"] / 2**20
    np.testing.assert_allclose(_demand(model, huge) - base, 4096 - activations, rtol=1e-3)


def _left_out_ratios(data: Dataset, groups: pd.Series) -> np.ndarray:
    """measured / predicted of every run, each group's predicted by a model fitted without it."""
    ratios = []
    for group in groups.unique():
        out = (groups == group).to_numpy()
        held = data.select(out)
        ratios.append(held.target / _fit(data.select(~out), "mem_used_mib").predict(held.rows))
    return np.concatenate(ratios)


def test_held_out_ratio_leaves_out_networks_then_architectures(datasets):
    data = datasets["mem_used_mib"]
    nets = data.rows["net"]
    across = held_out_ratio(CalibratedModel("physical", "mem_used_mib"), data.rows, data.target)
    assert across["left_out"] == "network" and across["quantile"] == BOUND_QUANTILE
    assert across["ratio"] == pytest.approx(np.quantile(_left_out_ratios(data, nets), BOUND_QUANTILE))
    assert across["ratio"] > 1  # an unseen network can measure above its prediction: the bound widens it
    assert across["calibrated_ratio"] is not None  # every network was profiled at three levels
    one_net = data.select((nets == "resnet18").to_numpy())
    by_architecture = _left_out_ratios(one_net, one_net.rows["model"])
    for quantile in (BOUND_QUANTILE, 0.5):
        within = held_out_ratio(CalibratedModel("physical", "mem_used_mib"), one_net.rows, one_net.target, quantile=quantile)
        assert within["left_out"] == "architecture" and within["quantile"] == quantile
        assert within["ratio"] == pytest.approx(np.quantile(by_architecture, quantile))
    one_model = one_net.select((one_net.rows["model"] == "resnet18_60").to_numpy())
    assert held_out_ratio(CalibratedModel("physical", "mem_used_mib"), one_model.rows, one_model.target) is None
