"""The predictor on models fingerprinted from the H200 measurements in the repository: one
prediction path (the fitted model's `predict`) for a user's query and the fingerprint's
evaluation, calibrated on a profiled family only, bounded above every prediction."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from repository_data import H200

from perf4sight import console
from perf4sight.config import FingerprintSettings
from perf4sight.device.definitions import LATENCY, MEMORY
from perf4sight.device.recipe import Recipe
from perf4sight.errors import FittedModelError
from perf4sight.features import queries
from perf4sight.fit import fingerprint_device
from perf4sight.fit.store import model_hash
from perf4sight.predict import MEMORY_BOUND, Predictor

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
        raw = memory.predict(queries(arch, SIZES), calibrate=False)
        assert np.allclose(table[MEMORY.name], raw) is not profiled
        np.testing.assert_array_equal(table[MEMORY.name], memory.predict(queries(arch, SIZES)))


def test_the_bound_lies_above_the_prediction_by_the_stored_ratio(predictor: Predictor) -> None:
    bound = predictor.models[MEMORY.name].bound_
    assert bound["left_out"] == "network" and 1 < bound["calibrated_ratio"] < bound["ratio"]
    for net, ratio in (("resnet18", bound["calibrated_ratio"]), ("vgg11", bound["ratio"])):
        table = predictor.predict(H200 / "models" / f"{net}_60.json", SIZES)
        assert (table[MEMORY_BOUND] >= table[MEMORY.name]).all()
        np.testing.assert_allclose(table[MEMORY_BOUND], table[MEMORY.name] * ratio)
    assert predictor.models[LATENCY.name].bound_ is None  # latency has no bound


def test_the_evaluation_bounds_the_runs_as_the_predictor_does(fingerprinted) -> None:
    report = json.loads(fingerprinted[1].read_text())
    assert "bound_under_pct" in report["mem_used_mib"] and "bound_under_pct" not in report["latency_ms"]
    assert report["mem_used_mib"]["bound_under_pct"] <= report["mem_used_mib"]["under_pct"]


@pytest.fixture(scope="module")
def replay_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The memory model of the same runs fitted with `replay` (latency: `physical`'s)."""
    out = tmp_path_factory.mktemp("h200_replay")
    console.set_quiet(True)
    fingerprint_device(FingerprintSettings(
        train_nets=TRAIN, train_logs=[0, 30, 90], eval_logs=[], memory_logs=[H200 / "memory"],
        latency_logs=[H200 / "latency"], pruned_models_storedir=H200 / "models", model_storedir=out,
        method="replay", latency_model=False,
    ))
    console.set_quiet(False)
    return out


def test_a_recipe_the_replay_cannot_record_is_predicted_by_its_stored_physical_fallback(
        replay_models: Path, predictor: Predictor, capsys: pytest.CaptureFixture[str]) -> None:
    """Autocast cannot be recorded on the meta device: a device whose memory model is `replay`
    predicts such a recipe with the `physical` model fitted on the same runs (the same
    predictions as the physical fingerprint's), saying so; fp32 is still the replay's."""
    replay = Predictor.load(replay_models)
    assert replay.models[MEMORY.name].fallback_.method == "physical"
    spec = H200 / "models" / "vgg11_60.json"
    bf16 = Recipe(precision="amp-bf16")
    table = replay.predict(spec, SIZES, recipe=bf16, breakdown=True)
    np.testing.assert_allclose(table[MEMORY.name], predictor.predict(spec, SIZES, recipe=bf16)[MEMORY.name], rtol=1e-9)
    assert "mem_used_mib predicted by the 'physical' model stored as the fallback of the 'replay' one: the tensor " \
           "lifetimes (the replay's) cannot be recorded under amp-bf16" in " ".join(capsys.readouterr().err.split())
    parts = table.filter(like="_mib").drop(columns=[MEMORY.name, MEMORY_BOUND]).sum(axis=1)
    np.testing.assert_allclose(parts, table[MEMORY.name], rtol=1e-9)
    fp32 = replay.predict(spec, SIZES)
    assert not np.allclose(fp32[MEMORY.name], predictor.predict(spec, SIZES)[MEMORY.name], rtol=1e-3)
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_the_disk_cache_changes_no_prediction(replay_models: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay's predictions with the cache off, with it on and empty (recording), and read
    back from it: of a torchvision name, a pruned spec and a model file."""
    from perf4sight.cache import cache_info
    from perf4sight.networks import forget_traces

    replay = Predictor.load(replay_models)
    model_file = Path(__file__).resolve().parents[2] / "examples" / "model_files" / "mobilenet_like.py"
    sources = ["resnet18", H200 / "models" / "vgg11_60.json", model_file]
    sizes = [1, 8, 24, 100, 256]

    def tables() -> list[pd.DataFrame]:
        forget_traces()  # what this process traced and recorded
        return [replay.predict(source, sizes) for source in sources]

    monkeypatch.setenv("PERF4SIGHT_CACHE", "0")
    without = tables()
    monkeypatch.delenv("PERF4SIGHT_CACHE")
    before = cache_info().entries  # the models' reference network's, where loading them recorded it
    recorded, read = tables(), tables()
    # the bases' traces, and each with its recording; the model file's trace with its recording
    assert cache_info().entries - before == 5
    for plain, first, second in zip(without, recorded, read):
        pd.testing.assert_frame_equal(first, plain, check_exact=True)
        pd.testing.assert_frame_equal(second, plain, check_exact=True)


def test_a_fingerprint_s_models_carry_its_device_and_campaign(fingerprinted, replay_models: Path) -> None:
    """Both models of one fingerprint name the device and campaign of the H200's environment
    records; a folder holding one of them and a model of another campaign is refused."""
    records = sorted(path.name for path in H200.glob("environment-*.json"))
    headers = [json.loads((fingerprinted[0] / f"training_{q.name}.json").read_text()) for q in (MEMORY, LATENCY)]
    for header in headers:
        assert header["fingerprint"]["device"] == "NVIDIA H200"
        assert header["fingerprint"]["campaign"] == ", ".join(records)
    mixed = fingerprinted[0].parent / "mixed"
    shutil.copytree(replay_models, mixed)  # its memory model, and the latency model of the other fit
    for suffix in (".skops", ".json"):
        shutil.copy(fingerprinted[0] / f"training_{LATENCY.name}{suffix}", mixed)
    assert Predictor.load(mixed).models.keys() == {MEMORY.name, LATENCY.name}  # the same campaign, fitted apart
    campaign = json.loads((mixed / f"training_{LATENCY.name}.json").read_text())
    campaign["fingerprint"]["campaign"] = "environment-20261203T084510Z.json"
    campaign["sha256"] = model_hash((mixed / f"training_{LATENCY.name}.skops").read_bytes(), campaign)
    (mixed / f"training_{LATENCY.name}.json").write_text(json.dumps(campaign))
    with pytest.raises(FittedModelError, match="its mem_used_mib model is of another fingerprint than its latency_ms "
                                               "model .*campaign environment-20261203T084510Z.json"):
        Predictor.load(mixed)
