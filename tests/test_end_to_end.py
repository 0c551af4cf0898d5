"""The whole toolflow from one config file, on the CPU, in seconds: prune, profile, fit, predict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from perf4sight.cli import main
from perf4sight.fit import load_model

ROOT = Path(__file__).resolve().parents[1]
# One worker runs the module's tests (make test: --dist loadgroup), so that `run_dir`, kept for the
# worker's session (its tests need not run one after another), runs once.
pytestmark = pytest.mark.xdist_group("end_to_end")

CONFIG = """
[create_network_dataset]
networks = ['squeezenet']
pruning_perc = [0, 50]
input_size = [3, 32, 32]
num_classes = 10
model_path = {out}/models

[profile]
network = ['squeezenet']
bs = [2, 4]
stage = ['training']
profile_variables = ['memory', 'latency']
local_model_loc = {out}/models
device_model_loc = {out}/models
test_config = {out}/test_config.ini
device = cpu
log_dir = {out}/logs
iterations = 2

[fingerprint]
train_nets = ['squeezenet']
train_logs = [0, 50]
eval_logs = [50]
memory_logs = ['{out}/logs/memory']
latency_logs = ['{out}/logs/latency']
pruned_models_storedir = {out}/models
model_storedir = {out}/fitted
report = {out}/report.json
"""


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("e2e")
    config = out / "config.ini"
    config.write_text(CONFIG.format(out=out))
    assert main(["--quiet", "run", "--config", str(config)]) == 0
    return out


@pytest.mark.slow
def test_every_stage_leaves_its_output(run_dir: Path) -> None:
    manifest = pd.read_csv(run_dir / "models" / "manifest.csv")
    assert list(manifest["name"]) == ["squeezenet_0", "squeezenet_50"]
    assert abs(manifest["level_reached"].iloc[1] - 50) <= 1
    for variable in ("memory", "latency"):
        for level in (0, 50):
            log = pd.read_csv(run_dir / "logs" / variable / f"squeezenet_{level}-gt.csv", sep="|")
            assert list(log["bs"]) == [2, 4] and log["passed"].all()
    memory = pd.read_csv(run_dir / "logs" / "memory" / "squeezenet_0-gt.csv", sep="|")
    assert (memory["mem_used"] > 0).all()
    for target in ("mem_used_mib", "latency_ms"):
        assert (run_dir / "fitted" / f"training_{target}.skops").is_file()
    report = json.loads((run_dir / "report.json").read_text())
    assert report["mem_used_mib"]["n"] == 2 and report["latency_ms"]["n"] == 2
    # Evaluated on its own training runs (squeezenet_50 at bs 2 and 4), which the family
    # calibration, fitted on the same runs, reproduces: under 1e-12 % in 13 runs measured.
    # It holds its value where a larger batch measured less than a smaller one, which a
    # shared CPU's timing noise does to two-iteration latencies (up to 540 % in those runs),
    # so latency is left unchecked; memory grows with the batch size.
    assert report["mem_used_mib"]["per_net"]["squeezenet"]["mape_pct"] < 1.0
    for target in ("mem_used_mib", "latency_ms"):  # which the report says
        assert any("on runs the models were fitted on" in note for note in report[target]["notes"])
    assert (run_dir / "report.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_predict_from_the_fitted_models(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = run_dir / "models" / "squeezenet_50.json"
    argv = ["predict", "--models", str(run_dir / "fitted"), "--net", str(spec), "--bs", "2,4,8", "--json"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["batch_size"] for r in rows] == [2, 4, 8]
    assert [r["extrapolated"] for r in rows] == [False, False, True]
    assert rows[0]["mem_used_mib"] > 0 and rows[0]["latency_ms"] > 0
    # one network profiled: the bound comes from leaving each of its two architectures out, and
    # squeezenet_50 is a level of that profiled family: calibrated, bounded by the in-family ratio
    bound = load_model(run_dir / "fitted", stage="training", target="mem_used_mib").bound_
    assert bound["left_out"] == "architecture" and bound["calibrated_ratio"] is not None
    assert all(r["calibrated"] for r in rows)
    expected = max(1.0, bound["calibrated_ratio"])
    assert all(r["mem_bound_mib"] == pytest.approx(r["mem_used_mib"] * expected) for r in rows)


def test_the_original_interface_reports_bad_input_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.ini"
    config.write_text("[profile]\nbs = [2, 'four']\n")
    result = subprocess.run(
        [sys.executable, str(ROOT / "main.py"), "--config-file", str(config)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: {config}: [profile] bs: expected int, got 'four'"]


@pytest.mark.slow
def test_no_device_boundary_without_failed_runs(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every CPU run passed: no capacity was learned, so nothing is said about fitting the device."""
    assert main(["predict", "--models", str(run_dir / "fitted"), "--net", "squeezenet", "--input-size", "3,32,32",
                 "--num-classes", "10", "--bs", "2", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert "fits_device" not in row and row["mem_used_mib"] > 0


@pytest.mark.slow
def test_the_original_interface_runs_quietly(tmp_path: Path) -> None:
    config = tmp_path / "config.ini"
    config.write_text("[create_network_dataset]\nnetworks = ['squeezenet']\npruning_perc = [0]\n"
                      "input_size = [3, 32, 32]\nnum_classes = 10\nmodel_path = specs\n")
    runs = {}
    for quiet in ([], ["--quiet"]):
        runs[bool(quiet)] = subprocess.run(
            [sys.executable, str(ROOT / "main.py"), "--config-file", str(config), *quiet],
            capture_output=True, text=True, cwd=tmp_path, timeout=120,
        )
        assert runs[bool(quiet)].returncode == 0 and (tmp_path / "specs" / "squeezenet_0.json").is_file()
    written = "1 architecture specs written to specs; manifest.csv lists the 1 there"
    assert written in runs[False].stdout and written not in runs[True].stdout + runs[True].stderr
    assert "all outputs are under" in runs[True].stdout  # what was made is still said


@pytest.mark.parametrize(("section", "line", "message"), [
    ("fingerprint", "method = foo", "[fingerprint] method: unknown method 'foo'"),
    ("fingerprint", "stage = tarining", "[fingerprint] stage: 'tarining' is not one of training, inference"),
    ("profile", "device = tpu", "[profile] device: unknown device 'tpu'"),
    ("profile", "stage = ['tarining']", "[profile] stage: unknown value 'tarining'"),
    ("profile", "local_model_loc =", "[profile] local_model_loc: needed to find the models of the test config"),
    ("fingerprint", "train_nets = []", "[fingerprint] train_nets: empty list; the models are fitted on these"),
    ("fingerprint", "memory_logs = []", "[fingerprint] memory_logs: no log folder given for the memory model"),
    ("fingerprint", "evaluate = True\neval_logs = [0]\ntrain_nets = []",
     "[fingerprint] eval_nets: empty list, and so is train_nets: no network to evaluate"),
    ("fingerprint", "memory_model = False\nlatency_model = False",
     "[fingerprint] memory_model and latency_model are both False: nothing to fit or evaluate"),
])
def test_every_section_is_checked_before_any_stage_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        section: str, line: str, message: str) -> None:
    sections = {
        "create_network_dataset": "networks = ['squeezenet']\ninput_size = [3, 32, 32]\nnum_classes = 10\n"
                                  f"model_path = {tmp_path / 'specs'}\n",
        "profile": f"network = ['squeezenet']\nbs = [2]\nlocal_model_loc = {tmp_path / 'specs'}\n"
                   f"test_config = {tmp_path / 'tc.ini'}\nlog_dir = {tmp_path / 'logs'}\n",
        "fingerprint": f"train_nets = ['squeezenet']\ntrain_logs = [0]\npruned_models_storedir = {tmp_path / 'specs'}\n"
                       f"model_storedir = {tmp_path / 'fitted'}\nmemory_logs = ['{tmp_path / 'logs' / 'memory'}']\n"
                       f"latency_logs = ['{tmp_path / 'logs' / 'latency'}']\n",
    }
    for setting in line.split("\n"):  # each replaces its key's line, if the section has one
        key = setting.split("=")[0].strip()
        kept = [kept for kept in sections[section].splitlines() if kept.split("=")[0].strip() != key]
        sections[section] = "\n".join([*kept, setting]) + "\n"
    config = tmp_path / "config.ini"
    config.write_text("".join(f"[{name}]\n{body}\n" for name, body in sections.items()))
    assert main(["run", "--config", str(config)]) == 2
    assert f"{config}: {message}" in capsys.readouterr().err  # the file, then what is wrong in it
    assert not (tmp_path / "specs").exists()  # nothing pruned for a run that could not finish


@pytest.mark.slow
def test_the_readme_python_example_runs_as_written(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = (ROOT / "README.md").read_text().split("```python\n", 1)[1].split("```", 1)[0]
    assert example.count('"out/demo/fitted"') == 1  # the demo's models, here this run's
    exec(compile(example.replace('"out/demo/fitted"', repr(str(run_dir / "fitted"))), "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "layers," in printed and "level reached" in printed
    assert "adamw, amp-bf16, train layer4" in printed and "optimizer_state_mib" in printed
