"""The predictor on models fingerprinted from the H200 measurements in the repository: one
prediction path (the fitted model's `predict`) for a user's query and the fingerprint's
evaluation, calibrated on a profiled family only, bounded above every prediction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perf4sight import console
from perf4sight.config import FingerprintSettings
from perf4sight.device.definitions import LATENCY, MEMORY
from perf4sight.features import queries
from perf4sight.fit import fingerprint_device
from perf4sight.predict import MEMORY_BOUND, Predictor

H200 = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "h200"
TRAIN = ["resnet18", "googlenet", "squeezenet"]
SIZES = [8, 32, 64, 128]  # those profiled


@pytest.fixture(scope="module")
def fingerprinted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Models of three networks at levels 0, 30 and 90, evaluated on level 60 of one of them
    and of vgg11 (never profiled); the models' folder and the report."""
    out = tmp_path_factory.mktemp("h200")
    console.set_quiet(True)
    fingerprint_device(FingerprintSettings(
        train_nets=TRAIN, train_logs=[0, 30, 90], eval_nets=["resnet18", "vgg11"], eval_logs=[60],
        memory_logs=[H200 / "memory"], latency_logs=[H200 / "latency"], pruned_models_storedir=H200 / "models",
        model_storedir=out / "models", method="physical", report=out / "report.json",
    ))
    console.set_quiet(False)
    return out / "models", out / "report.json"


@pytest.fixture(scope="module")
def predictor(fingerprinted: tuple[Path, Path]) -> Predictor:
    return Predictor.load(fingerprinted[0])


@pytest.mark.parametrize("net", ["resnet18", "vgg11"])
def test_the_predictor_predicts_what_the_evaluation_reported(predictor: Predictor, fingerprinted, net: str) -> None:
    report = pd.read_csv(fingerprinted[1].with_name("report_predictions.csv"))
    table = predictor.predict(H200 / "models" / f"{net}_60.json", SIZES)
    for column in (MEMORY.name, LATENCY.name):
        rows = report[(report["target"] == column) & (report["model"] == f"{net}_60")].sort_values("batch_size")
        assert rows["batch_size"].tolist() == SIZES
        np.testing.assert_allclose(table[column], rows["predicted"], rtol=1e-12)


def test_a_profiled_family_is_calibrated_and_another_is_not(predictor: Predictor) -> None:
    memory = predictor.models[MEMORY.name]
    for net, profiled in (("resnet18", True), ("vgg11", False)):
        arch = predictor.describe(H200 / "models" / f"{net}_60.json")
        table = predictor.predict(arch, SIZES)
        assert table["calibrated"].tolist() == [profiled] * len(SIZES)
        raw = memory.estimator.predict(queries(arch, SIZES), calibrate=False)
        assert np.allclose(table[MEMORY.name], raw) is not profiled
        np.testing.assert_array_equal(table[MEMORY.name], memory.estimator.predict(queries(arch, SIZES)))


def test_the_bound_lies_above_the_prediction_by_the_stored_ratio(predictor: Predictor) -> None:
    bound = predictor.models[MEMORY.name].estimator.bound_
    assert bound["left_out"] == "network" and 1 < bound["calibrated_ratio"] < bound["ratio"]
    for net, ratio in (("resnet18", bound["calibrated_ratio"]), ("vgg11", bound["ratio"])):
        table = predictor.predict(H200 / "models" / f"{net}_60.json", SIZES)
        assert (table[MEMORY_BOUND] >= table[MEMORY.name]).all()
        np.testing.assert_allclose(table[MEMORY_BOUND], table[MEMORY.name] * ratio)
    assert predictor.models[LATENCY.name].estimator.bound_ is None  # latency has no bound


def test_the_evaluation_bounds_the_runs_as_the_predictor_does(fingerprinted) -> None:
    import json

    report = json.loads(fingerprinted[1].read_text())
    assert "bound_under_pct" in report["mem_used_mib"] and "bound_under_pct" not in report["latency_ms"]
    assert report["mem_used_mib"]["bound_under_pct"] <= report["mem_used_mib"]["under_pct"]
