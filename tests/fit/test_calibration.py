"""Calibration on a profiled family and the memory bound, as the fitted model
(`CalibratedModel`) applies them: on the H200 measurements in the repository, then on the TX2
measurements (skipped when they are absent)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import parametrize_with_checks
from repository_data import H200

from perf4sight import console
from perf4sight.architecture import Detail, family_key
from perf4sight.device.definitions import LATENCY, MEMORY
from perf4sight.features import queries
from perf4sight.fit import (
    BOUND_QUANTILE,
    ArchitectureCatalog,
    CalibratedModel,
    FamilyCalibration,
    build_dataset,
    mape_pct,
    query_rows,
    read_logs,
)
from perf4sight.networks import load_architecture

H200_TRAIN = ("resnet18", "googlenet", "squeezenet")  # fingerprinted at levels 0, 30, 90
H200_LEVELS = (0, 30, 60, 90)
PROFILED = (0, 30, 50, 70, 90)
OTHERS = (10, 20, 25, 35, 45, 65, 75, 85)


def _level(data) -> pd.Series:
    return data.rows["model"].str.rsplit("_", n=1).str[1].astype(int)


@pytest.fixture(scope="module")
def h200_catalog():
    return ArchitectureCatalog(H200 / "models")


@pytest.fixture(scope="module", params=[MEMORY, LATENCY], ids=["memory", "latency"])
def h200(request, h200_catalog):
    """(train, query, model) for one target: the model fitted on three networks at levels
    0, 30 and 90 (memory with its bound); the query holds level 60 of those and every
    level of vgg11, a network never profiled."""
    quantity = request.param
    console.set_quiet(True)  # the bound's refits
    logs = read_logs([*H200_TRAIN, "vgg11"], H200_LEVELS, [H200 / quantity.kind], [quantity])
    data = build_dataset(logs, target=quantity.name, feature_set="network", stage="training", catalog=h200_catalog)
    trained = data.rows["net"].isin(H200_TRAIN) & _level(data).isin((0, 30, 90))
    train, query = data.select(trained.to_numpy()), data.select(~trained.to_numpy())
    quantile = BOUND_QUANTILE if quantity == MEMORY else None
    model = CalibratedModel("physical", quantity.name, bound_quantile=quantile).fit(train.rows, train.target)
    console.set_quiet(False)
    return train, query, model


def test_every_level_and_description_of_a_network_shares_its_family(h200_catalog):
    keys = {family_key(h200_catalog.get(f"resnet18_{level}")) for level in H200_LEVELS}
    assert len(keys) == 1
    (key,) = keys
    spec_table = ArchitectureCatalog(H200 / "models").get("resnet18_60", needs=Detail.LAYER_TABLE)
    assert family_key(spec_table) == key  # the spec's Conv2d/Linear table, not a traced module
    assert family_key(load_architecture("resnet18", input_size=(3, 224, 224), num_classes=1000)) == key
    assert family_key(load_architecture("resnet18", input_size=(3, 128, 128), num_classes=1000)) != key
    assert family_key(h200_catalog.get("resnet18_0")) != family_key(h200_catalog.get("googlenet_0"))


def test_calibration_corrects_a_profiled_family_only(h200):
    train, query, model = h200
    raw = model.predict(query.rows, calibrate=False)
    corrected = model.predict(query.rows)
    profiled = query.rows["net"].isin(H200_TRAIN).to_numpy()
    assert profiled.any() and not profiled.all()
    np.testing.assert_array_equal(model.calibrated(query.rows), profiled)
    np.testing.assert_array_equal(model.calibration_.profiled(query.rows), profiled)
    np.testing.assert_array_equal(corrected[~profiled], raw[~profiled])  # vgg11: nothing to carry over
    assert not np.allclose(corrected[profiled], raw[profiled])
    np.testing.assert_array_equal(raw, model.regressor_.predict(query.rows))
    pd.testing.assert_frame_equal(model.features(query.rows), query.features)
    # level 60 of a profiled network, between its profiled levels: the correction helps
    assert mape_pct(query.target[profiled], corrected[profiled]) < 0.8 * mape_pct(query.target[profiled],
                                                                                  raw[profiled])


# The checks that fit or predict on a numeric array: X is a query frame of architectures
# (`perf4sight.features.queries`), which no array of numbers describes; what they check is
# checked on real query frames below (test_the_model_is_a_scikit_learn_estimator,
# test_fit_and_predict_keep_to_the_contract_on_query_frames).
_NUMERIC_ARRAY_CHECKS = (
    "check_fit_score_takes_y", "check_estimators_overwrite_params", "check_dont_overwrite_parameters",
    "check_estimators_fit_returns_self", "check_readonly_memmap_input", "check_n_features_in_after_fitting",
    "check_positive_only_tag_during_fit", "check_estimators_dtypes", "check_complex_data", "check_dtype_object",
    "check_estimators_empty_data_messages", "check_pipeline_consistency", "check_estimators_nan_inf",
    "check_estimator_sparse_tag", "check_estimator_sparse_array", "check_estimator_sparse_matrix",
    "check_estimators_pickle", "check_estimators_pickle(readonly_memmap=True)", "check_f_contiguous_array_estimator",
    "check_methods_sample_order_invariance", "check_methods_subset_invariance", "check_fit2d_1sample",
    "check_fit2d_1feature", "check_dict_unchanged", "check_fit_idempotent", "check_fit_check_is_fitted",
    "check_n_features_in", "check_fit1d", "check_fit2d_predict1d",
)


@parametrize_with_checks([CalibratedModel()], expected_failed_checks=lambda _: {
    name: "fits on a numeric array; X is a query frame of architectures" for name in _NUMERIC_ARRAY_CHECKS})
def test_sklearn_estimator_contract(estimator, check):
    check(estimator)


@pytest.mark.parametrize(("params", "message"), [
    ({"method": "bogus"}, "The 'method' parameter of CalibratedModel must be a str among"),
    ({"bound_quantile": 1.5}, "The 'bound_quantile' parameter of CalibratedModel must be a float in the range (0.0, 1.0] or None. Got 1.5"),
    ({"fallback": "trees"}, "The 'fallback' parameter of CalibratedModel must be a str among"),
])
def test_an_unknown_parameter_value_is_refused_before_fitting(h200, params, message):
    train, _, _ = h200
    with pytest.raises(InvalidParameterError, match=re.escape(message)):
        CalibratedModel(**params).fit(train.rows, train.target)


def test_fit_and_predict_keep_to_the_contract_on_query_frames(h200):
    """What the numeric-array checks check, on the H200 query frames: a fit returns the
    estimator and leaves its parameters alone, fits again to the same predictions, and a row's
    prediction does not depend on the rows beside it or their order."""
    train, query, model = h200
    fresh = clone(model)
    params = fresh.get_params()
    assert fresh.fit(train.rows, train.target) is fresh and fresh.get_params() == params
    np.testing.assert_array_equal(fresh.predict(query.rows), model.predict(query.rows))
    assert fresh.fit(train.rows, train.target).training_ranges_ == model.training_ranges_
    order = np.random.default_rng(0).permutation(len(query))
    shuffled = query.rows.iloc[order].reset_index(drop=True)
    np.testing.assert_allclose(model.predict(shuffled), model.predict(query.rows)[order], rtol=1e-12)
    half = query.rows.iloc[: len(query) // 2].reset_index(drop=True)
    np.testing.assert_allclose(model.predict(half), model.predict(query.rows)[: len(half)], rtol=1e-12)


def test_the_model_is_a_scikit_learn_estimator(h200):
    from sklearn.exceptions import NotFittedError

    train, _, model = h200
    params = model.get_params()
    assert set(params) == {"method", "target", "stage", "bound_quantile", "fallback", "torch_version",
                           "torch_version_reason", "fresh_pages_ms_per_mib"}
    fresh = clone(model)
    assert fresh.get_params() == params and not hasattr(fresh, "regressor_")
    with pytest.raises(NotFittedError):
        fresh.predict(train.rows)
    assert model.feature_set == "network" and model.capacity_mib() == model.regressor_[-1].capacity_mib()


def test_the_bound_lies_above_every_prediction_and_covers_the_held_out_runs(h200):
    train, query, model = h200
    if model.bound_quantile is None:
        assert model.bound_ is None
        with pytest.raises(ValueError, match="this model measured no bound"):
            model.predict_bound(query.rows)
        return
    bound = model.bound_
    assert bound["quantile"] == BOUND_QUANTILE and bound["left_out"] == "network"
    assert 1 < bound["calibrated_ratio"] < bound["ratio"]
    predicted, bounded = model.predict(query.rows), model.predict_bound(query.rows)
    assert (bounded >= predicted).all()
    ratio = np.where(model.calibrated(query.rows), bound["calibrated_ratio"], bound["ratio"])
    np.testing.assert_allclose(bounded, predicted * ratio)
    # the stored ratio is the quantile of the runs of each network left out of the fit
    ratios = []
    for net in H200_TRAIN:
        out = (train.rows["net"] == net).to_numpy()
        rest, held = train.select(~out), train.select(out)
        without = CalibratedModel("physical", "mem_used_mib").fit(rest.rows, rest.target)
        ratios.append(held.target / without.predict(held.rows, calibrate=False))
    ratios = np.concatenate(ratios)
    assert bound["ratio"] == pytest.approx(np.quantile(ratios, BOUND_QUANTILE))
    # (the quantile interpolates between runs: at most one more run lies above it)
    assert (ratios > bound["ratio"]).sum() <= (1 - BOUND_QUANTILE) * len(ratios) + 1


def test_the_correction_is_a_line_in_log_parameters_held_at_the_ends():
    rows = pd.DataFrame({"family": "f", "params": [100, 100, 10_000, 10_000], "batch_size": [8, 32, 8, 32]})
    calibration = FamilyCalibration.of(rows, np.exp([0.0, 0.2, 0.4, 0.6]), np.ones(4))
    np.testing.assert_allclose(np.log(calibration.factors("f", 1000, np.array([8, 16, 32]))), [0.2, 0.3, 0.4])
    np.testing.assert_allclose(np.log(calibration.factors("f", 10, np.array([4, 64]))), [0.0, 0.2])
    np.testing.assert_allclose(np.log(calibration.factors("f", 1e6, np.array([8]))), [0.4])
    assert calibration.factors("g", 1000, np.array([8])) is None
    corrected, calibrated = calibration.apply(rows.assign(family=["f", "f", "g", "g"]), np.ones(4))
    assert calibrated.tolist() == [True, True, False, False] and corrected[2:].tolist() == [1.0, 1.0]
    # a run measured or predicted at zero has no log ratio: it is left out, not an infinity
    zero = FamilyCalibration.of(rows, [0.0, 1.0, 1.0, 1.0], np.ones(4))
    assert zero.residuals["f"]["batch_size"] == [32.0, 8.0, 32.0]


def test_corrected_predictions_never_fall_with_the_batch_size():
    rows = pd.DataFrame({"family": "f", "params": 100, "batch_size": [8, 16]})
    calibration = FamilyCalibration.of(rows, [1.2, 0.8], np.ones(2))  # +20 % at 8, -20 % at 16
    sizes = np.array([16, 4, 8, 12])  # in any order
    corrected = calibration.correct("f", 100, sizes, np.array([1.05, 1.0, 1.02, 1.04]))
    by_size = dict(zip(sizes.tolist(), corrected.tolist()))
    assert [by_size[b] for b in (4, 8, 12, 16)] == sorted(by_size.values())
    assert by_size[16] == by_size[8] == pytest.approx(1.2 * 1.02)  # held from 8 on, not dropped


def test_query_rows_name_the_family_of_every_row(h200_catalog):
    arch = h200_catalog.get("squeezenet_60")
    rows = query_rows(queries(arch, [8, 64]))
    assert rows["family"] == [family_key(arch)] * 2
    assert list(rows["params"]) == [arch.params] * 2 and rows["batch_size"].tolist() == [8, 64]


# ---------------------------------------------------------------- the TX2 measurements

@pytest.fixture(scope="module")
def catalog(tx2_dir):
    return ArchitectureCatalog(tx2_dir / "models")


def _tx2(tx2_dir, catalog, quantity):
    logs = read_logs(["resnet18", "squeezenet"], (*PROFILED, *OTHERS), [tx2_dir / quantity.kind], [quantity])
    data = build_dataset(logs, target=quantity.name, feature_set="network", stage="training", catalog=catalog)
    level = _level(data)
    return data.select(level.isin(PROFILED).to_numpy()), data.select(level.isin(OTHERS).to_numpy())


@pytest.mark.parametrize("quantity", [MEMORY, LATENCY], ids=["memory", "latency"])
def test_calibration_on_profiled_levels_improves_the_others(catalog, tx2_dir, quantity):
    train, query = _tx2(tx2_dir, catalog, quantity)
    model = CalibratedModel("physical", quantity.name).fit(train.rows, train.target)
    raw = model.predict(query.rows, calibrate=False)
    corrected = model.predict(query.rows)
    assert model.calibrated(query.rows).all()
    assert mape_pct(query.target, corrected) < 0.85 * mape_pct(query.target, raw)


def test_a_calibrated_bound_is_tighter_and_holds_the_other_levels(catalog, tx2_dir):
    train, query = _tx2(tx2_dir, catalog, MEMORY)
    model = CalibratedModel("physical", "mem_used_mib", bound_quantile=BOUND_QUANTILE).fit(train.rows, train.target)
    assert 1 < model.bound_["calibrated_ratio"] < model.bound_["ratio"]
    corrected, bounded = model.predict(query.rows), model.predict_bound(query.rows)
    assert (bounded < query.target).mean() < 0.1 < (corrected < query.target).mean()


def test_calibrated_tx2_predictions_rise_with_the_batch_size(catalog, tx2_dir):
    logs = read_logs(["resnet18", "googlenet"], PROFILED, [tx2_dir / "memory"], [MEMORY])
    data = build_dataset(logs, target="mem_used_mib", feature_set="network", stage="training", catalog=catalog)
    model = CalibratedModel("physical", "mem_used_mib").fit(data.rows, data.target)
    sizes = np.arange(1, 257)
    for name in ("resnet18_45", "googlenet_85"):
        arch = catalog.get(name)
        corrected = model.predict(queries(arch, sizes))
        assert (np.diff(corrected) >= 0).all()
        assert not np.allclose(corrected, model.predict(queries(arch, sizes), calibrate=False))
