"""Predictor and planning on models fitted to the H200 measurements in the repository (and to
them read as a device whose memory saturates would measure them)."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perf4sight import console
from perf4sight.cli import main
from perf4sight.config import FingerprintSettings
from perf4sight.device.definitions import LATENCY, MEMORY
from perf4sight.errors import DataNotFoundError, UsageError
from perf4sight.fit import ArchitectureCatalog, build_dataset, fingerprint_device, read_logs
from perf4sight.networks import ChannelPruner, load_network
from perf4sight.predict import MAX_SEARCH_BATCH, MEMORY_BOUND, BudgetError, Predictor, plan_variants

LEVELS = [0, 30, 60, 90]
CAPACITY_MIB = 4000.0


@pytest.fixture(scope="module")
def models_dir(h200_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("predict")
    fingerprint_device(
        FingerprintSettings(
            train_nets=["resnet18", "squeezenet"],
            train_logs=LEVELS,
            memory_logs=[h200_dir / "memory"],
            latency_logs=[h200_dir / "latency"],
            pruned_models_storedir=h200_dir / "models",
            model_storedir=out / "h200",
        )
    )
    return out / "h200"


@pytest.fixture(scope="module")
def predictor(models_dir: Path) -> Predictor:
    return Predictor.load(models_dir)


@pytest.fixture(scope="module")
def saturating(h200_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Predictor:
    """A memory model fitted to the H200's logs as a device of CAPACITY_MIB would measure them
    (a unified memory, as the TX2's, saturates at what it has), in a folder without the
    environment record that says the device's PyTorch."""
    out = tmp_path_factory.mktemp("saturating")
    (out / "memory").mkdir()
    for net in ("resnet18", "squeezenet"):
        for level in LEVELS:
            lines = (h200_dir / "memory" / f"{net}_{level}-gt.csv").read_text().splitlines()
            column = lines[0].split("|").index(MEMORY.column)
            rows = [line.split("|") for line in lines[1:]]
            for row in rows:
                row[column] = str(min(float(row[column]), CAPACITY_MIB))
            (out / "memory" / f"{net}_{level}-gt.csv").write_text("\n".join([lines[0], *map("|".join, rows)]) + "\n")
    fingerprint_device(FingerprintSettings(
        train_nets=["resnet18", "squeezenet"], train_logs=LEVELS, memory_logs=[out / "memory"], latency_model=False,
        pruned_models_storedir=h200_dir / "models", model_storedir=out / "models", report=None))
    return Predictor.load(out / "models")


def test_predictions_per_batch_size(predictor: Predictor, h200_dir: Path) -> None:
    sizes = [8, 16, 32, 128]  # within the profiled 8 to 128
    table = predictor.predict(h200_dir / "models" / "googlenet_60.json", sizes, dataset_size=1000)
    assert list(table["batch_size"]) == sizes
    assert table[MEMORY.name].is_monotonic_increasing and table[LATENCY.name].is_monotonic_increasing
    assert (table[MEMORY.name] > 0).all()
    expected_epoch = [math.ceil(1000 / b) * lat / 1e3 for b, lat in zip(sizes, table[LATENCY.name])]
    assert table["epoch_s"].tolist() == pytest.approx(expected_epoch)
    assert table["images_per_s"].tolist() == pytest.approx([b / lat * 1e3 for b, lat in zip(sizes, table[LATENCY.name])])
    # googlenet has more layers than either network the models were fitted on, and
    # BatchNorm and Linear layers, which only resnet18 of the two has
    assert table["extrapolated"].all() and set(table["extrapolated_layers"]) == {"linear, norm"}
    assert not predictor.predict(h200_dir / "models" / "resnet18_30.json", sizes)["extrapolated"].any()


def test_every_description_of_one_network_predicts_the_same(predictor: Predictor, h200_dir: Path) -> None:
    from_spec = predictor.predict(h200_dir / "models" / "resnet18_0.json", [4, 16])
    from_name = predictor.predict("resnet18", [4, 16])
    assert from_spec[MEMORY.name].tolist() == pytest.approx(from_name[MEMORY.name].tolist())
    assert from_spec[LATENCY.name].tolist() == pytest.approx(from_name[LATENCY.name].tolist())


def test_beyond_the_fitted_range_is_flagged(predictor: Predictor) -> None:
    table = predictor.predict("resnet18", [1, 64, 1024])
    assert table["extrapolated"].tolist() == [True, False, True]  # TX2 batch sizes run from 2 to 256
    assert predictor.predict("vgg16", [8])["extrapolated"].all()  # more parameters than any profiled


def test_largest_batch_size_within_a_budget(predictor: Predictor) -> None:
    table = predictor.predict("resnet18", [32, 33])
    budget = float(table[MEMORY.name].iloc[0]) + 0.5 * float(table[MEMORY.name].iloc[1] - table[MEMORY.name].iloc[0])
    best = predictor.max_batch_size("resnet18", budget)
    assert best["batch_size"] == 32 and best[MEMORY.name] <= budget
    with pytest.raises(BudgetError, match="no batch size fits"):
        predictor.max_batch_size("resnet18", 1.0)


@pytest.mark.parametrize("answer", [1, 64, 65, 256, 257, 1024, 1025, 4095, 4096])
def test_the_search_in_chunks_finds_the_batch_size_a_search_of_every_size_finds(predictor: Predictor,
                                                                               answer: int) -> None:
    """The search predicts its batch sizes in chunks until one holds a size that does not fit:
    a budget between `answer`'s memory and the next size's gives `answer` and its row, at each
    chunk's edges too, as a prediction of every size from 1 to 4096 does."""
    every = predictor.predict("resnet18", list(range(1, MAX_SEARCH_BATCH + 1)))
    memory = every[MEMORY.name].to_numpy()
    budget = memory[answer - 1] if answer == MAX_SEARCH_BATCH else (memory[answer - 1] + memory[answer]) / 2
    best = predictor.max_batch_size("resnet18", float(budget))
    expected = every.iloc[answer - 1]
    assert best["batch_size"] == answer
    assert best.drop("batch_size").equals(expected.drop("batch_size"))


def test_a_latency_limit_lowers_the_batch_size(predictor: Predictor) -> None:
    sizes = [8, 16, 32, 64, 128, 256]
    free = predictor.max_batch_size("resnet18", 1e9, batch_sizes=sizes)
    limit = float(predictor.predict("resnet18", [64])[LATENCY.name].iloc[0]) * (1 + 1e-9)
    limited = predictor.max_batch_size("resnet18", 1e9, max_latency_ms=limit, batch_sizes=sizes)
    assert free["batch_size"] == 256 and limited["batch_size"] == 64


def test_batch_sizes_must_be_positive(predictor: Predictor) -> None:
    with pytest.raises(UsageError, match="batch sizes: expected positive integers, got 0"):
        predictor.predict("resnet18", [8, 0])
    with pytest.raises(UsageError, match="batch sizes: expected positive integers, got 1.5"):
        predictor.predict("resnet18", [1.5])  # refused, not answered for batch size 1
    assert predictor.predict("resnet18", np.array([4, 8]))["batch_size"].tolist() == [4, 8]


def test_missing_models(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match="no fitted training models"):
        Predictor.load(tmp_path)


def test_plan_ranks_feasible_variants(predictor: Predictor) -> None:
    # halfway between the unpruned network's predictions at 16 and 17: clear of rounding
    budget = float(predictor.predict("resnet18", [16, 17])[MEMORY.name].mean())
    table = plan_variants(predictor=predictor, network="resnet18", levels=[0, 50, 90], budget_mib=budget)
    assert set(table["level"]) == {0, 50, 90}
    assert table["images_per_s"].is_monotonic_decreasing
    assert (table[MEMORY.name] <= budget).all()
    by_level = table.set_index("level")
    assert by_level.loc[0, "batch_size"] == 16  # the unpruned network just fits at 16
    assert by_level.loc[90, "batch_size"] > by_level.loc[0, "batch_size"]
    assert abs(by_level.loc[50, "level_reached"] - 50) <= 1


@pytest.fixture(scope="module")
def replay_predictor(h200_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Predictor:
    """The same runs' models with memory replayed from recorded tensor lifetimes."""
    out = tmp_path_factory.mktemp("predict_replay")
    fingerprint_device(FingerprintSettings(
        train_nets=["resnet18", "squeezenet"], train_logs=LEVELS, memory_logs=[h200_dir / "memory"],
        latency_logs=[h200_dir / "latency"], pruned_models_storedir=h200_dir / "models", model_storedir=out,
        method="replay",
    ))
    return Predictor.load(out)


@pytest.mark.slow
@pytest.mark.parametrize("fitted", ["predictor", "replay_predictor"])
def test_plan_predicts_each_variant_as_its_pruned_module(fitted: str, request: pytest.FixtureRequest,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan re-propagates the network's architecture (with its recorded tensor lifetimes,
    which the replay reads) to each level's widths instead of pruning and tracing a clone: the
    same batch size, memory and latency as the pruned module's own prediction."""
    predictor = request.getfixturevalue(fitted)
    assert predictor.models[MEMORY.name].method == {"predictor": "physical", "replay_predictor": "replay"}[fitted]
    loaded = load_network("mobilenet_v2")
    budget = float(predictor.predict(loaded.module, [12])[MEMORY.name].iloc[0])
    pruned_levels = []
    with monkeypatch.context() as patch:
        prune = ChannelPruner.prune
        patch.setattr(ChannelPruner, "prune", lambda self, level, **kw: (pruned_levels.append(level),
                                                                         prune(self, level, **kw))[1])
        table = plan_variants(predictor=predictor, network="mobilenet_v2", levels=[30, 70], budget_mib=budget)
    assert pruned_levels == []  # no clone pruned
    pruner = ChannelPruner(loaded.module, input_size=loaded.input_size, name="mobilenet_v2")
    for level in (30, 70):
        row = table.set_index("level").loc[level]
        pruned = pruner.prune(level, meta=True)
        best = predictor.max_batch_size(pruned.module, budget, input_size=loaded.input_size)
        assert row["batch_size"] == best["batch_size"] > 12 and row["params"] == pruned.params
        assert (row[MEMORY.name], row[LATENCY.name]) == (best[MEMORY.name], best[LATENCY.name])


# A new process planning through the command: whether it imported torchvision, and its table.
_PLAN = """
import contextlib, io, json, sys
from perf4sight.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(["--quiet", "plan", "--models", sys.argv[1], "--net", "mobilenet_v2", "--levels", "0,40,80",
                 "--budget", "3GiB", "--input-size", "3,64,64", "--num-classes", "10"])
print(json.dumps({"code": code, "torchvision": "torchvision" in sys.modules, "table": out.getvalue()}))
"""


@pytest.mark.slow
def test_a_second_plan_of_a_network_reads_its_levels_without_building_it(models_dir: Path, tmp_path: Path) -> None:
    """The levels' widths and the network's recorded architecture are kept on disk: a later
    process plans the same table without importing torchvision (most of a plan's own work)."""
    env = {**os.environ, "PERF4SIGHT_CACHE_DIR": str(tmp_path / "cache")}
    first, second = (json.loads(subprocess.run([sys.executable, "-c", _PLAN, str(models_dir)], capture_output=True,
                                               text=True, env=env, timeout=300, check=True).stdout) for _ in range(2))
    assert first["code"] == second["code"] == 0 and "mobilenet_v2" in first["table"]
    assert first["torchvision"] and not second["torchvision"]
    assert second["table"] == first["table"]


def test_plan_says_which_limit_no_variant_meets(predictor: Predictor) -> None:
    with pytest.raises(BudgetError, match=r"fits the budget and the latency limit; at level 90, no batch size fits: "
                                          r"batch size 1 .* 0.001 ms\)"):
        plan_variants(predictor=predictor, network="resnet18", levels=[0, 90], budget_mib=1e6, max_latency_ms=0.001)
    with pytest.raises(UsageError, match="no pruning level given"):
        plan_variants(predictor=predictor, network="resnet18", levels=[], budget_mib=1e6)


def test_cli_predict_json_and_errors(models_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--models", str(models_dir), "--net", "resnet18", "--bs", "8,16", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["batch_size"] for r in records] == [8, 16]
    assert main(["predict", "--models", str(models_dir), "--net", "resnet18", "--max-batch-size",
                 "--budget", "2GiB", "--json"]) == 0
    (best,) = json.loads(capsys.readouterr().out)
    assert best[MEMORY.name] <= 2048
    for argv, message in [
        (["--net", "resnet18", "--bs", "0"], "--bs: expected positive integers, got 0"),
        (["--net", "resnet18", "--max-batch-size"], "--max-batch-size needs --budget"),
        (["--net", "resnet18", "--max-batch-size", "--budget", "1MiB"], "no batch size fits"),
        (["--net", "resnet18", "--max-batch-size", "--budget", "lots"], "memory budget 'lots'"),
        (["--net", "nosuchnet"], "unknown network 'nosuchnet'"),
        (["--net", "resnet18", "--dataset-size", "-5000"], "dataset size -5000: expected a positive number"),
        (["--net", "resnet18", "--stage", "tarining"], "stage: 'tarining' is not one of training, inference"),
        (["--net", "resnet18", "--bs", "8,,16"], "--bs: expected comma-separated positive integers, got '8,,16'"),
        (["--net", "resnet18", "--bs", ""], "--bs: expected comma-separated positive integers, got ''"),
        (["--net", "resnet18", "--bs", "8,-3"],
         "--bs: expected comma-separated positive integers, got '8,-3'"),
        (["--net", "resnet18", "--bs", "8", "--budget", "1GiB"], "--budget needs --max-batch-size"),
        (["--net", "resnet18", "--bound"], "--bound needs --max-batch-size"),
        (["--net", "resnet18", "--max-batch-size", "--budget", "1GiB", "--bs", "8"], "--bs and --max-batch-size: give one"),
        (["--net", "resnet18", "--max-batch-size", "--budget", "-1GiB"], "memory budget '-1GiB' must be positive"),
    ]:
        assert main(["predict", "--models", str(models_dir), *argv]) == 2
        assert message in capsys.readouterr().err


def test_cli_says_when_the_search_ended_at_its_largest_batch_size(
    models_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import perf4sight.predict
    import perf4sight.predict.predictor

    for module in (perf4sight.predict, perf4sight.predict.predictor):
        monkeypatch.setattr(module, "MAX_SEARCH_BATCH", 8)
    argv = ["predict", "--models", str(models_dir), "--net", "squeezenet", "--max-batch-size", "--budget"]
    assert main([*argv, "100GiB", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)[0]["batch_size"] == 8
    assert "every batch size up to 8, the largest searched" in captured.err
    at_4 = Predictor.load(models_dir).predict("squeezenet", [4])[MEMORY.name].iloc[0]
    assert main([*argv, f"{at_4:.1f}MiB", "--json"]) == 0  # a budget that ends the search earlier
    captured = capsys.readouterr()
    assert json.loads(captured.out)[0]["batch_size"] < 8 and "largest searched" not in captured.err


def test_cli_refuses_networks_it_cannot_describe(
    models_dir: Path, h200_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_file = tmp_path / "mine.py"
    model_file.write_text("import torch\n\ndef other(num_classes=1000):\n    return torch.nn.Linear(3, num_classes)\n")
    spec = json.loads((h200_dir / "models" / "resnet18_60.json").read_text())
    spec["out_channels"]["layer1.0.conv1"] = 9999
    next(e for e in spec["layers"] if e["name"] == "layer1.0.conv1")["out"][0] = 9999
    bad_spec = tmp_path / "resnet18_bad.json"
    bad_spec.write_text(json.dumps(spec))
    for net, message in [
        (f"{model_file}:mine", "mine.py"),
        (str(bad_spec), "layer1.0.conv1"),
    ]:
        assert main(["predict", "--models", str(models_dir), "--net", net]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_the_devices_out_of_memory_boundary(predictor: Predictor, saturating: Predictor, h200_dir: Path) -> None:
    # googlenet_0 measured 2848 MiB at batch size 32 and 5010 at 64 on the H200: above CAPACITY_MIB
    spec = h200_dir / "models" / "googlenet_0.json"
    assert saturating.models[MEMORY.name].capacity_mib() == pytest.approx(CAPACITY_MIB, rel=0.01)
    table = saturating.predict(spec, [8, 32, 64, 128, 256])
    assert table["fits_device"].tolist() == [True, True, False, False, False]
    best = saturating.max_batch_size(spec, 1e9)
    assert 32 <= best["batch_size"] < 64 and best["fits_device"]
    assert "fits_device" not in predictor.predict(spec, [8])  # the H200's memory never saturated: no capacity


def test_the_memory_bound_covers_a_network_left_out(predictor: Predictor, models_dir: Path, h200_dir: Path) -> None:
    """Fingerprinting stores how far above its prediction a left-out network measured; the
    bound it gives holds alexnet, a network the models never saw, on nearly every run."""
    stored = predictor.models[MEMORY.name].bound_
    assert stored["quantile"] == 0.95 and stored["left_out"] == "network" and stored["ratio"] > 1
    catalog = ArchitectureCatalog(h200_dir / "models")
    logs = read_logs(["alexnet"], LEVELS, [h200_dir / "memory"], [MEMORY])
    feature_set = predictor.models[MEMORY.name].feature_set
    unseen = build_dataset(logs, target="mem_used_mib", feature_set=feature_set, stage="training", catalog=catalog)
    predicted = predictor.models[MEMORY.name].regressor_.predict(unseen.rows)
    assert (unseen.target > predicted).mean() > 0.2  # the prediction is often below what was measured
    table = predictor.predict(h200_dir / "models" / "alexnet_60.json", [8, 32])
    assert table[MEMORY_BOUND].tolist() == pytest.approx((table[MEMORY.name] * stored["ratio"]).tolist())
    assert (unseen.target > predicted * stored["ratio"]).mean() < 0.05


def test_the_largest_batch_size_within_the_bound(predictor: Predictor, models_dir: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    budget = 3000.0
    plain = predictor.max_batch_size("resnet18", budget)
    safe = predictor.max_batch_size("resnet18", budget, bound=True)
    assert safe[MEMORY_BOUND] <= budget < plain[MEMORY_BOUND]
    assert safe["batch_size"] < plain["batch_size"]
    assert main(["predict", "--models", str(models_dir), "--net", "resnet18", "--max-batch-size", "--bound",
                 "--budget", f"{budget}MiB", "--json"]) == 0
    (best,) = json.loads(capsys.readouterr().out)
    assert best["batch_size"] == safe["batch_size"]


def test_without_a_stored_bound_there_is_none_to_plan_with(predictor: Predictor) -> None:
    unbounded = copy.copy(predictor.models[MEMORY.name])
    unbounded.bound_ = None  # as a model fitted on a single architecture stores it
    predictor = Predictor(models={MEMORY.name: unbounded})
    assert MEMORY_BOUND not in predictor.predict("resnet18", [8])
    with pytest.raises(DataNotFoundError, match="stores no bound"):
        predictor.max_batch_size("resnet18", 3000.0, bound=True)


def test_a_profiled_family_is_calibrated(predictor: Predictor, h200_dir: Path, capsys: pytest.CaptureFixture[str],
                                         models_dir: Path) -> None:
    assert predictor.predict(h200_dir / "models" / "resnet18_30.json", [8])["calibrated"].all()
    assert predictor.predict("resnet18", [8])["calibrated"].all()  # the unpruned network, by name
    assert not predictor.predict(h200_dir / "models" / "googlenet_30.json", [8])["calibrated"].any()
    assert not predictor.predict("resnet18", [8], input_size=(3, 112, 112))["calibrated"].any()
    assert main(["predict", "--models", str(models_dir), "--net", "resnet18", "--bs", "8"]) == 0
    assert "calibrated" in capsys.readouterr().out


def test_plan_with_the_bound_picks_smaller_batch_sizes(predictor: Predictor, models_dir: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    budget = float(predictor.predict("resnet18", [32])[MEMORY.name].iloc[0])
    plain = plan_variants(predictor=predictor, network="resnet18", levels=[0, 50], budget_mib=budget)
    safe = plan_variants(predictor=predictor, network="resnet18", levels=[0, 50], budget_mib=budget, bound=True)
    plain, safe = plain.set_index("level"), safe.set_index("level")
    assert (safe["batch_size"] < plain["batch_size"]).all() and (safe[MEMORY_BOUND] <= budget).all()
    assert main(["plan", "--models", str(models_dir), "--net", "resnet18", "--levels", "0,50", "--budget",
                 f"{budget}MiB", "--bound", "--json"]) == 0
    assert [r["batch_size"] for r in json.loads(capsys.readouterr().out)] == safe["batch_size"].tolist()


def test_copies_a_device_may_not_make_are_named_where_its_version_is_not_known(
        saturating: Predictor, capsys: pytest.CaptureFixture[str]) -> None:
    """Fitted on logs without an environment record, on networks without an in-place ReLU6:
    a MobileNetV2's memory counts the copies PyTorch 1.10 and later save, and says so once."""
    assert saturating.models["mem_used_mib"].torch_version_reason is None
    for _ in range(2):
        saturating.predict("mobilenet_v2", [8], input_size=(3, 64, 64))
    said = capsys.readouterr().err
    assert said.count("mobilenet_v2: its in-place ReLU6 layers save a copy of their input on PyTorch 1.10") == 1
    assert "fingerprint with torch_version" in said
    saturating.predict("resnet18", [8], input_size=(3, 64, 64))  # no such layer: nothing to say
    assert "ReLU6" not in capsys.readouterr().err
    told = Predictor({name: copy.copy(model).set_params(torch_version="1.8.0",
                                                          torch_version_reason="torch_version in the config")
                      for name, model in saturating.models.items()})
    console.reset()  # the warnings already shown
    told.predict("mobilenet_v2", [8], input_size=(3, 64, 64))
    assert "ReLU6" not in capsys.readouterr().err
