"""fingerprint_device end to end on a slice of the H200 data in the repository (and the TX2's,
whose PyTorch saved less), and its handling of missing pieces."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from perf4sight.cli import main
from perf4sight.config import FingerprintSettings
from perf4sight.device.definitions import LATENCY, MEMORY
from perf4sight.errors import ArgumentError, DataNotFoundError, LogFormatError
from perf4sight.fit import (
    ArchitectureCatalog,
    CalibratedModel,
    build_dataset,
    fingerprint_device,
    load_model,
    mape_pct,
    read_logs,
)
from perf4sight.fit.methods import CANDIDATE_METHODS, METHODS, candidate_methods
from perf4sight.fit.store import model_folder_lock


def _settings(h200_dir: Path, tmp_path: Path, **changes) -> FingerprintSettings:
    settings = FingerprintSettings(
        train_nets=["resnet18"],
        train_logs=[0, 60, 90],
        eval_logs=[30],
        memory_logs=[h200_dir / "memory"],
        latency_logs=[h200_dir / "latency"],
        pruned_models_storedir=h200_dir / "models",
        model_storedir=tmp_path / "models",
        report=tmp_path / "report" / "h200.json",
    )
    return replace(settings, **changes)


@pytest.fixture(scope="module")
def trained(h200_dir, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("fingerprint")
    settings = _settings(h200_dir, tmp_path)
    return settings, fingerprint_device(settings)


def test_report_structure_and_accuracy(trained):
    settings, report = trained
    assert set(report) == {"mem_used_mib", "latency_ms"}
    for target in ("mem_used_mib", "latency_ms"):
        entry = report[target]
        bound = {"bound_under_pct"} if target == "mem_used_mib" else set()  # the memory model stores a bound
        assert set(entry) == {"mape_pct", "n", "under_pct", "per_net", "method", "method_choice", "torch_version",
                              "campaign", *bound}
        assert entry["torch_version"] == "2.11.0+cu130"  # recorded beside the logs
        # what the training runs cost: 3 levels x 8 batch sizes, all passed; logs older than `test_s`
        assert entry["campaign"] == {"tests": 24, "out_of_memory": 0, "failed": 0, "skipped": 0,
                                     "device_minutes": None, "timed": 0}
        # `method = default`: chosen among the candidates by each level of resnet18 left out
        choice = entry["method_choice"]
        assert entry["method"] == choice["chosen"] in CANDIDATE_METHODS and choice["left_out"] == "architecture"
        assert set(choice["errors"]) == set(candidate_methods(target))
        # the lowest error, or the simpler model where the lowest adds rates without being clearly better
        best = min(choice["errors"], key=choice["errors"].get)
        assert choice["chosen"] == best or (METHODS[best].extends == choice["chosen"]
                                            and "one standard error" in choice["reason"])
        assert set(entry["per_net"]["resnet18"]) == {"mape_pct", "n", "under_pct", *bound}
        assert set(entry["per_net"]) == {"resnet18"}
        assert entry["per_net"]["resnet18"]["n"] == entry["n"] == 4  # resnet18_30 at batch sizes 8 to 128
        # resnet18_30 lies between trained levels: well inside the noise of a bad model
        assert 0 < entry["mape_pct"] < 20
    assert json.loads(settings.report.read_text()) == report


def test_report_files_beside_the_json(trained):
    settings, report = trained
    predictions = pd.read_csv(settings.report.with_name("h200_predictions.csv"))
    assert list(predictions.columns) == ["target", "net", "model", "batch_size", "measured", "predicted"]
    assert set(predictions["model"]) == {"resnet18_30"}
    assert len(predictions) == report["mem_used_mib"]["n"] + report["latency_ms"]["n"]
    for target, rows in predictions.groupby("target"):
        under = 100 * (rows["predicted"] < rows["measured"]).mean()
        assert report[target]["under_pct"] == pytest.approx(under)
    # the bound lies above every prediction, so it is below the measurement no more often
    assert report["mem_used_mib"]["bound_under_pct"] <= report["mem_used_mib"]["under_pct"]
    assert settings.report.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    models = sorted(p.name for p in settings.model_storedir.iterdir())
    assert models == ["fingerprint.lock", "training_latency_ms.json", "training_latency_ms.skops",
                      "training_mem_used_mib.json", "training_mem_used_mib.skops"]


def test_stored_models_are_kept_unless_overwrite(trained, h200_dir):
    settings, report = trained
    path = settings.model_storedir / "training_mem_used_mib.skops"
    before = path.stat().st_mtime_ns
    again = fingerprint_device(replace(settings, report=None))
    assert path.stat().st_mtime_ns == before
    assert again == report
    evaluated = fingerprint_device(replace(settings, report=None, evaluate=True, eval_logs=[30, 60],
                                           latency_model=False))
    assert set(evaluated) == {"mem_used_mib"} and evaluated["mem_used_mib"]["n"] > report["mem_used_mib"]["n"]
    assert path.stat().st_mtime_ns == before


def _older_format(meta: dict) -> None:
    meta.update(format=1)


def _features_computed_otherwise(meta: dict) -> None:
    meta["feature_probe"][0] = [value * 1.01 for value in meta["feature_probe"][0]]


@pytest.mark.slow
@pytest.mark.parametrize("edit", [_older_format, _features_computed_otherwise])
def test_a_stored_model_that_cannot_be_used_is_refitted(h200_dir, tmp_path, edit_header, capsys, edit):
    settings = _settings(h200_dir, tmp_path, report=None, latency_model=False)
    fingerprint_device(settings)
    path = settings.model_storedir / "training_mem_used_mib.skops"
    fitted = json.loads(path.with_suffix(".json").read_text())
    edit_header(path, edit)
    capsys.readouterr()
    report = fingerprint_device(settings)
    captured = capsys.readouterr()
    assert "cannot be used" in captured.out + captured.err and report["mem_used_mib"]["n"] > 0
    refitted = json.loads(path.with_suffix(".json").read_text())
    assert refitted["format"] == fitted["format"] and refitted["feature_probe"] == fitted["feature_probe"]


def test_evaluate_without_stored_models_says_where_it_looked(h200_dir, tmp_path):
    with pytest.raises(DataNotFoundError, match="training_mem_used_mib.skops"):
        fingerprint_device(_settings(h200_dir, tmp_path, evaluate=True))


def test_missing_architectures_are_counted_once_and_none_left_is_an_error(h200_dir, tmp_path, capsys):
    models = tmp_path / "models_subset"
    models.mkdir()
    shutil.copy(h200_dir / "models" / "resnet18_0.json", models)
    logs = read_logs(["resnet18"], [0, 30], [h200_dir / "latency"], [LATENCY])
    catalog = ArchitectureCatalog(models)
    dataset = build_dataset(logs, target="latency_ms", feature_set="paper", stage="training", catalog=catalog)
    passed = logs[logs["passed"] & (logs["stage"] == "training")]
    skipped = int((passed["model"].str.endswith("resnet18_30.json")).sum())
    assert skipped > 0 and set(dataset.rows["model"]) == {"resnet18_0"} and len(dataset) == len(passed) - skipped
    warning = capsys.readouterr().err
    assert warning.count("warning") == 1 and f"skipped {skipped} log rows" in warning and "resnet18_30" in warning
    empty = tmp_path / "no_models"
    empty.mkdir()
    with pytest.raises(DataNotFoundError, match=f"no usable latency_ms log rows.*{empty}"):
        build_dataset(logs, target="latency_ms", feature_set="paper", stage="training",
                      catalog=ArchitectureCatalog(empty))


def test_rows_of_another_stage_do_not_train(h200_dir):
    logs = read_logs(["squeezenet"], [0], [h200_dir / "latency"], [LATENCY])
    catalog = ArchitectureCatalog(h200_dir / "models")
    with pytest.raises(DataNotFoundError, match="stage 'training'"):
        build_dataset(logs.assign(stage="inference"), target="latency_ms", feature_set="paper", stage="training",
                      catalog=catalog)


def test_cli_fingerprint_command(h200_dir, tmp_path, capsys):
    config = tmp_path / "fp.ini"
    config.write_text(
        "[fingerprint]\n"
        "train_nets = ['squeezenet']\ntrain_logs = [0, 90]\neval_logs = [30]\n"
        f"latency_logs = ['{h200_dir / 'latency'}']\nmemory_model = False\n"
        f"pruned_models_storedir = {h200_dir / 'models'}\nmodel_storedir = {tmp_path / 'models'}\n"
        f"report = {tmp_path / 'report.json'}\nmethod = default\n"
    )
    assert main(["fingerprint", "--config", str(config)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report) == {"latency_ms"} and report["latency_ms"]["per_net"]["squeezenet"]["n"] > 0
    tests = report["latency_ms"]["campaign"]["tests"]  # the report says what the fit's campaign cost
    assert tests == 16 and f"latency_ms model: fitted on a campaign of {tests} tests (0 out of memory, " \
        "0 failed otherwise), device time not logged" in " ".join(capsys.readouterr().out.split())
    config.write_text(config.read_text().replace("train_logs = [0, 90]", "train_logs = [7]")
                      .replace("method = default", "overwrite = True"))
    capsys.readouterr()
    assert main(["fingerprint", "--config", str(config)]) == 2
    error = capsys.readouterr().err
    assert "no profiling logs found" in error and str(h200_dir / "latency" / "squeezenet_7-gt.csv") in error


def test_a_second_fingerprint_into_a_folder_in_use_is_one_line_and_changes_nothing(h200_dir, tmp_path, capsys):
    config = tmp_path / "fp.ini"
    config.write_text(
        "[fingerprint]\n"
        "train_nets = ['squeezenet']\ntrain_logs = [0, 90]\neval_logs = []\n"
        f"latency_logs = ['{h200_dir / 'latency'}']\nmemory_model = False\nmethod = physical\n"
        f"pruned_models_storedir = {h200_dir / 'models'}\nmodel_storedir = {tmp_path / 'models'}\n"
    )
    with model_folder_lock(tmp_path / "models"):  # as another fingerprint's, fitting now
        capsys.readouterr()
        assert main(["fingerprint", "--config", str(config)]) == 2
        error = capsys.readouterr().err.splitlines()
        assert error == [f"error: {tmp_path / 'models'}: another fingerprint (pid {os.getpid()}) is fitting models "
                         "into this folder; wait for it to end or give another model_storedir"]
        assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["fingerprint.lock"]
    assert main(["fingerprint", "--config", str(config)]) == 0  # the folder free again
    assert load_model(tmp_path / "models", stage="training", target="latency_ms").method == "physical"


def test_a_run_measured_at_zero_is_named_not_fitted(h200_dir, tmp_path):
    logs = tmp_path / "memory"
    logs.mkdir()
    for level in (0, 60, 90):
        shutil.copy(h200_dir / "memory" / f"resnet18_{level}-gt.csv", logs)
    table = pd.read_csv(logs / "resnet18_60-gt.csv", sep="|", dtype=str, keep_default_na=False)
    table.loc[table["passed"] == "True", "mem_used"] = "0"  # a broken reading
    table.to_csv(logs / "resnet18_60-gt.csv", sep="|", index=False)
    settings = _settings(h200_dir, tmp_path, memory_logs=[logs], latency_model=False, eval_logs=[])
    with pytest.raises(LogFormatError, match=r"memory_logs: \d+ passed runs measured mem_used_mib <= 0 \(first: resnet18_60"):
        fingerprint_device(settings)


AUTOCAST_CONFIG = """
[create_network_dataset]
networks = ['squeezenet', 'resnet18']
pruning_perc = [0]
input_size = [3, 32, 32]
num_classes = 10
model_path = {out}/models

[profile]
network = ['squeezenet', 'resnet18']
bs = [2]
stage = ['training']
profile_variables = ['memory']
local_model_loc = {out}/models
device_model_loc = {out}/models
test_config = {out}/test_config.ini
device = cpu
log_dir = {out}/logs
iterations = 1
precision = ['fp32', 'amp-bf16']

[fingerprint]
train_nets = ['squeezenet', 'resnet18']
train_logs = [0]
memory_logs = ['{out}/logs/memory']
latency_model = False
pruned_models_storedir = {out}/models
model_storedir = {out}/fitted
"""


@pytest.mark.slow
def test_runs_profiled_under_autocast_leave_the_replay_out_of_the_choice_and_refuse_it_forced(tmp_path, capsys):
    """The replay's tensor lifetimes cannot be recorded under autocast: on a device profiled
    under amp-bf16 too, `method = default` fits the other candidate and says why, and a
    forced `method = replay` is one line naming the config key (real CPU profiling runs)."""
    config = tmp_path / "config.ini"
    config.write_text(AUTOCAST_CONFIG.format(out=tmp_path))
    assert main(["--quiet", "run", "--config", str(config)]) == 0
    logs = pd.read_csv(tmp_path / "logs" / "memory" / "resnet18_0-gt.csv", sep="|")
    assert sorted(logs["precision"]) == ["amp-bf16", "fp32"] and logs["passed"].all()
    model = load_model(tmp_path / "fitted", stage="training", target=MEMORY.name)
    # chosen among the others (`physical` or `copies`, by these few runs' held-out errors)
    assert model.method in set(candidate_methods(MEMORY.name)) - {"replay"}
    assert model.method_choice_["errors"]["replay"] is None
    assert "; not replay: the tensor lifetimes (the replay's) cannot be recorded under amp-bf16" \
        in model.method_choice_["reason"]
    capsys.readouterr()
    forced = tmp_path / "forced.ini"
    forced.write_text(AUTOCAST_CONFIG.format(out=tmp_path).split("[create_network_dataset]")[0]
                      + "[fingerprint]" + AUTOCAST_CONFIG.format(out=tmp_path).split("[fingerprint]")[1]
                      + "method = replay\noverwrite = True\n")
    assert main(["run", "--config", str(forced)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {forced}: [fingerprint] method: 'replay' cannot be fitted on these memory logs: the tensor lifetimes "
        "(the replay's) cannot be recorded under amp-bf16: they are recorded on the meta device, where autocast does "
        "not run (method = physical or default can)")

    # a replay model fitted on the fp32 runs alone evaluates the amp-bf16 ones with its fallback
    fp32 = tmp_path / "fp32"
    fp32.mkdir()
    for log in (tmp_path / "logs" / "memory").glob("*-gt.csv"):
        runs = pd.read_csv(log, sep="|")
        runs[runs["precision"] == "fp32"].to_csv(fp32 / log.name, sep="|", index=False)
    report = fingerprint_device(FingerprintSettings(
        train_nets=["squeezenet", "resnet18"], train_logs=[0], eval_logs=[0], memory_logs=[fp32],
        eval_memory_logs=[tmp_path / "logs" / "memory"], latency_model=False, method="replay",
        pruned_models_storedir=tmp_path / "models", model_storedir=tmp_path / "replay",
    ))
    assert report["mem_used_mib"]["method"] == "replay" and report["mem_used_mib"]["n"] == 4


def _logs_with_records(h200_dir: Path, tmp_path: Path, versions: list[str]) -> Path:
    """The H200's MobileNetV2 memory logs (levels 0, 60, 90) in a log folder as the profiler
    writes one, with an environment record naming each PyTorch version in turn."""
    logs = tmp_path / "logs"
    (logs / "memory").mkdir(parents=True)
    for level in (0, 60, 90):
        shutil.copy(h200_dir / "memory" / f"mobilenetv2_{level}-gt.csv", logs / "memory")
    for day, version in enumerate(versions, start=1):
        (logs / f"environment-202612{day:02d}T000000Z.json").write_text(json.dumps({"torch": version}))
    return logs


def _memory_settings(h200_dir: Path, tmp_path: Path, logs: Path, **changes) -> FingerprintSettings:
    return _settings(h200_dir, tmp_path, train_nets=["mobilenetv2"], memory_logs=[logs / "memory"], eval_logs=[],
                     latency_model=False, method="physical", report=None, **changes)


def test_the_device_s_pytorch_is_read_from_its_environment_record(h200_dir, tmp_path, capsys):
    settings = _memory_settings(h200_dir, tmp_path, _logs_with_records(h200_dir, tmp_path, ["1.7.1", "1.8.0"]))
    fingerprint_device(settings)
    said = " ".join(capsys.readouterr().out.split())
    assert "the device ran PyTorch 1.8.0 (" in said and "environment-20261202T000000Z.json)" in said  # the latest
    stored = load_model(settings.model_storedir, stage="training", target=MEMORY.name)
    assert stored.torch_version == "1.8.0"
    assert stored.torch_version_reason == "recorded in " + str(settings.memory_logs[0].parent /
                                                                           "environment-20261202T000000Z.json")
    assert stored.regressor_[0].torch_version == "1.8.0"  # the features' step counts no copies
    fingerprint_device(replace(settings, torch_version="2.1.0", overwrite=True))  # the config's key wins
    assert load_model(settings.model_storedir, stage="training", target=MEMORY.name).torch_version == "2.1.0"


def test_the_device_s_cost_of_fresh_pages_is_read_from_its_latest_environment_record_that_says(h200_dir, tmp_path):
    logs = _logs_with_records(h200_dir, tmp_path, ["2.1.0", "2.1.0", "2.1.0"])
    for day, cost in ((1, 0.5), (2, 0.25)):  # the third record, a GPU's, measures none
        (logs / f"environment-202612{day:02d}T000000Z.json").write_text(
            json.dumps({"torch": "2.1.0", "fresh_pages_ms_per_mib": cost}))
    settings = _memory_settings(h200_dir, tmp_path, logs)
    fingerprint_device(settings)
    stored = load_model(settings.model_storedir, stage="training", target=MEMORY.name)
    assert stored.fresh_pages_ms_per_mib == 0.25 and stored.regressor_[0].fresh_pages_ms_per_mib == 0.25
    for record in logs.glob("environment-*.json"):
        record.write_text(json.dumps({"torch": "2.1.0"}))
    fingerprint_device(replace(settings, overwrite=True))
    assert load_model(settings.model_storedir, stage="training", target=MEMORY.name).fresh_pages_ms_per_mib is None


def test_logs_of_pytorch_versions_that_save_differently_are_refused(h200_dir, tmp_path):
    logs = _logs_with_records(h200_dir, tmp_path, ["1.8.0", "2.1.0"])
    with pytest.raises(ArgumentError, match=r"profiled with PyTorch 1\.8\.0 \(environment-20261201T000000Z\.json\) "
                                            r"and 2\.1\.0 .*fit their logs apart \(or set torch_version\)"):
        fingerprint_device(_memory_settings(h200_dir, tmp_path, logs))


def test_a_torch_version_that_is_not_one_is_one_line(h200_dir, tmp_path, capsys):
    config = tmp_path / "config.ini"
    config.write_text(f"""[fingerprint]
train_nets = ['resnet18']
train_logs = [0, 60, 90]
memory_logs = ['{h200_dir / "memory"}']
latency_logs = ['{h200_dir / "latency"}']
pruned_models_storedir = {h200_dir / "models"}
model_storedir = {tmp_path / "models"}
torch_version = latest
""")
    assert main(["fingerprint", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "torch_version: 'latest' is not a PyTorch version" in err


def test_the_device_s_pytorch_predicts_an_unseen_mobilenetv2_s_memory(tx2_dir):
    """Fitted on the TX2's three networks without ReLU6, MobileNetV2 (an in-place ReLU6 after
    all but its last BatchNorms) is predicted far better with the TX2's PyTorch (before 1.10:
    no copies) than as the host's PyTorch saves it."""
    catalog = ArchitectureCatalog(tx2_dir / "models")
    train = read_logs(["resnet18", "googlenet", "squeezenet"], [0, 50, 90], [tx2_dir / "memory"], [MEMORY])
    test = read_logs(["mobilenetv2"], [0, 50, 90], [tx2_dir / "memory"], [MEMORY])
    errors = {}
    for version in (None, "1.8.0"):
        fitted, held = (build_dataset(logs, target=MEMORY.name, feature_set="network", stage="training",
                                      catalog=catalog, torch_version=version) for logs in (train, test))
        model = CalibratedModel("physical", MEMORY.name, torch_version=version).fit(fitted.rows, fitted.target)
        errors[version] = mape_pct(held.target, model.predict(held.rows))
    assert errors["1.8.0"] < 14 and errors[None] > 1.5 * errors["1.8.0"]


def test_where_nothing_says_the_device_s_pytorch_the_runs_do(tx2_dir, tmp_path, capsys):
    """The TX2's logs record no version: with MobileNetV2 among the training networks, its runs
    are described better as a PyTorch before 1.10 saves them (no copies); without a network
    whose layers a version copies, nothing is chosen (the host's way, which is the same there)."""
    settings = _settings(tx2_dir, tmp_path, train_nets=["resnet18", "mobilenetv2"], train_logs=[0, 50, 90],
                         eval_logs=[], report=None, latency_model=False, method="physical")
    fingerprint_device(settings)
    said = " ".join(capsys.readouterr().out.split())
    stored = load_model(settings.model_storedir, stage="training", target=MEMORY.name)
    assert stored.torch_version == "1.9"
    reason = stored.torch_version_reason
    assert reason in said and "described as versions before 1.10 save them, the better with each network left out" in reason
    errors = [float(part.split()[-2]) for part in reason.split(": ", 2)[2].split(", ")]
    assert errors[1] < errors[0]  # as the host saves them, then before 1.10
    fingerprint_device(replace(settings, train_nets=["resnet18"], overwrite=True))
    stored = load_model(settings.model_storedir, stage="training", target=MEMORY.name)
    assert stored.torch_version is None and stored.torch_version_reason is None


@pytest.mark.parametrize(("content", "message"), [
    ("{", "not valid JSON"),
    ('{"python": "3.6"}', "an environment record without a 'torch' version"),
    ('{"torch": "nightly"}', "torch 'nightly' is not a PyTorch version"),
    ('{"torch": "2.1.0", "fresh_pages_ms_per_mib": -1}', "fresh_pages_ms_per_mib=-1, expected a number of milliseconds"),
    ('{"torch": "2.1.0", "fresh_pages_ms_per_mib": "fast"}', "fresh_pages_ms_per_mib='fast', expected a number"),
])
def test_a_broken_environment_record_is_one_error_naming_it(h200_dir, tmp_path, content, message):
    logs = _logs_with_records(h200_dir, tmp_path, [])
    (logs / "environment-20261201T000000Z.json").write_text(content)
    with pytest.raises(LogFormatError, match=re.escape(str(logs / "environment-20261201T000000Z.json")) + ".*"
                       + re.escape(message)):
        fingerprint_device(_memory_settings(h200_dir, tmp_path, logs))
