"""Calibration on a profiled family, on the TX2 measurements (skipped when they are absent)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perf4sight.architecture import Detail
from perf4sight.fit import (
    ArchitectureCatalog,
    FamilyCalibration,
    bound_factor,
    build_dataset,
    family_key,
    fit_method,
    held_out_ratio,
    mape_pct,
    read_logs,
)
from perf4sight.features.network import network_features
from perf4sight.networks import load_architecture

PROFILED = (0, 30, 50, 70, 90)
OTHERS = (10, 20, 25, 35, 45, 65, 75, 85)


@pytest.fixture(scope="module")
def catalog(tx2_dir):
    return ArchitectureCatalog(tx2_dir / "models")


def test_every_level_and_description_of_a_network_shares_its_family(catalog, tx2_dir):
    keys = {family_key(catalog.get(f"resnet18_{level}")) for level in (*PROFILED, *OTHERS)}
    assert len(keys) == 1
    (key,) = keys
    spec_table = ArchitectureCatalog(tx2_dir / "models").get("resnet18_45", needs=Detail.LAYER_TABLE)
    assert family_key(spec_table) == key  # the spec's Conv2d/Linear table, not a traced module
    assert family_key(load_architecture("resnet18", input_size=(3, 224, 224), num_classes=1000)) == key
    assert family_key(load_architecture("resnet18", input_size=(3, 128, 128), num_classes=1000)) != key
    assert family_key(catalog.get("resnet18_0")) != family_key(catalog.get("googlenet_0"))


@pytest.mark.parametrize(("kind", "column"), [("memory", "mem_used"), ("latency", "latency")])
def test_calibration_on_profiled_levels_improves_the_others(catalog, tx2_dir, kind, column):
    logs = read_logs(["resnet18", "squeezenet"], (*PROFILED, *OTHERS), [tx2_dir / kind], [column])
    data = build_dataset(logs, target=column, feature_set="network", stage="training", catalog=catalog)
    level = data.rows["model"].str.rsplit("_", n=1).str[1].astype(int)
    train, query = data.select(level.isin(PROFILED).to_numpy()), data.select(level.isin(OTHERS).to_numpy())
    model = fit_method("physical", train, column)
    calibration = FamilyCalibration.of(train.rows, model.predict(train.features))
    raw = model.predict(query.features)
    corrected, calibrated = calibration.apply(query.rows, raw)
    assert calibrated.all()
    assert mape_pct(query.target, corrected) < 0.85 * mape_pct(query.target, raw)


def test_the_correction_is_a_line_in_log_parameters_held_at_the_ends():
    rows = pd.DataFrame({
        "family": "f", "params": [100, 100, 10_000, 10_000], "batch_size": [8, 32, 8, 32],
        "measured": np.exp([0.0, 0.2, 0.4, 0.6]),
    })
    calibration = FamilyCalibration.of(rows, np.ones(4))
    np.testing.assert_allclose(np.log(calibration.factors("f", 1000, np.array([8, 16, 32]))), [0.2, 0.3, 0.4])
    np.testing.assert_allclose(np.log(calibration.factors("f", 10, np.array([4, 64]))), [0.0, 0.2])
    np.testing.assert_allclose(np.log(calibration.factors("f", 1e6, np.array([8]))), [0.4])
    assert calibration.factors("g", 1000, np.array([8])) is None
    corrected, calibrated = calibration.apply(rows.assign(family=["f", "f", "g", "g"]), np.ones(4))
    assert calibrated.tolist() == [True, True, False, False] and corrected[2:].tolist() == [1.0, 1.0]
    # a run measured or predicted at zero has no log ratio: it is left out, not an infinity
    zero = FamilyCalibration.of(rows.assign(measured=[0.0, 1.0, 1.0, 1.0]), np.ones(4))
    assert zero.residuals["f"]["batch_size"] == [32.0, 8.0, 32.0]


def test_a_calibrated_bound_is_tighter_and_holds_the_other_levels(catalog, tx2_dir):
    logs = read_logs(["resnet18", "squeezenet"], (*PROFILED, *OTHERS), [tx2_dir / "memory"], ["mem_used"])
    data = build_dataset(logs, target="mem_used", feature_set="network", stage="training", catalog=catalog)
    level = data.rows["model"].str.rsplit("_", n=1).str[1].astype(int)
    train, query = data.select(level.isin(PROFILED).to_numpy()), data.select(level.isin(OTHERS).to_numpy())
    bound = held_out_ratio("physical", train, "mem_used")
    assert 1 < bound["calibrated_ratio"] < bound["ratio"]
    model = fit_method("physical", train, "mem_used")
    calibration = FamilyCalibration.of(train.rows, model.predict(train.features))
    corrected, calibrated = calibration.apply(query.rows, model.predict(query.features))
    bounded = corrected * bound_factor(bound, calibrated)
    assert (bounded < query.target).mean() < 0.1 < (corrected < query.target).mean()


def test_corrected_predictions_never_fall_with_the_batch_size():
    rows = pd.DataFrame({"family": "f", "params": 100, "batch_size": [8, 16], "measured": [1.2, 0.8]})
    calibration = FamilyCalibration.of(rows, np.ones(2))  # +20 % at 8, -20 % at 16
    sizes = np.array([16, 4, 8, 12])  # in any order
    corrected = calibration.correct("f", 100, sizes, np.array([1.05, 1.0, 1.02, 1.04]))
    by_size = dict(zip(sizes.tolist(), corrected.tolist()))
    assert [by_size[b] for b in (4, 8, 12, 16)] == sorted(by_size.values())
    assert by_size[16] == by_size[8] == pytest.approx(1.2 * 1.02)  # held from 8 on, not dropped


def test_calibrated_tx2_predictions_rise_with_the_batch_size(catalog, tx2_dir):
    logs = read_logs(["resnet18", "googlenet"], PROFILED, [tx2_dir / "memory"], ["mem_used"])
    data = build_dataset(logs, target="mem_used", feature_set="network", stage="training", catalog=catalog)
    model = fit_method("physical", data, "mem_used")
    calibration = FamilyCalibration.of(data.rows, model.predict(data.features))
    sizes = np.arange(1, 257)
    for name in ("resnet18_45", "googlenet_85"):
        arch = catalog.get(name)
        predicted = model.predict(network_features(arch, sizes.tolist())[data.features.columns])
        corrected = calibration.correct(family_key(arch), arch.params, sizes, predicted)
        assert (np.diff(corrected) >= 0).all() and not np.allclose(corrected, predicted)
