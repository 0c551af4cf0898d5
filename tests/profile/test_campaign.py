"""Real profiling campaigns on the CPU: logs, failures, memory limit, isolation, resuming."""

from __future__ import annotations

import ast
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import torchvision

from perf4sight.cli import main
from perf4sight.config import NetworkDatasetSettings, ProfileSettings, load_config
from perf4sight.device.definitions import MEMORY
from perf4sight.device.logs import GT_COLUMNS
from perf4sight.device.backends import make_backend
from perf4sight.device.files import file_digest
from perf4sight.errors import ArgumentError, ConfigError, NetworkError
from perf4sight.fit.logs import campaign_cost, read_gt_log
from perf4sight.networks import create_network_dataset, spec_from_module, write_spec
from perf4sight.profile import (
    profile_campaign,
    profile_from_settings,
    read_journal,
    read_test_config,
    run_test_config,
)

TX2_COLUMNS = {
    "memory": ["passed", "mem_alloc", "mem_reserved", "mem_used", "mem_avail", "free", "capacity",
               "test_var", "bs", "dataset", "net_name", "model"],
    "latency": ["passed", "latency", "test_var", "bs", "dataset", "net_name", "model"],
}


def _gt(log_dir: Path, test_var: str, model: str) -> pd.DataFrame:
    return pd.read_csv(log_dir / test_var / f"{model}-gt.csv", sep="|")


@pytest.mark.slow
def test_campaign_over_two_batch_sizes_and_two_stages(tmp_path: Path) -> None:
    """[profile] -> test config -> campaign, on a spec whose input size (3x32x32) is used."""
    models = tmp_path / "models"
    spec = spec_from_module(torchvision.models.squeezenet1_1(num_classes=10), name="squeezenet_0",
                            net="squeezenet", prune_level=0, input_size=(3, 32, 32), num_classes=10,
                            torchvision_name="squeezenet1_1")
    write_spec(spec, models / "squeezenet_0.json")
    log_dir = tmp_path / "logs"
    settings = ProfileSettings(network=["squeezenet"], bs=[32, 2], stage=["training", "inference"],
                               local_model_loc=models, test_config=tmp_path / "t.ini", log_dir=log_dir)
    summary = profile_from_settings(settings)
    assert (summary.passed, summary.failed, summary.skipped) == (8, 0, 0)
    model_path = str(models / "squeezenet_0.json")

    memory = _gt(log_dir, "memory", "squeezenet_0")
    assert list(memory.columns) == GT_COLUMNS["memory"]
    assert list(memory.columns[:12]) == TX2_COLUMNS["memory"]
    assert memory["passed"].all() and (memory["status"] == "ok").all()
    assert memory["model"].eq(model_path).all()
    assert set(memory["net_name"]) == {"squeezenet"} and set(memory["dataset"]) == {"spec"}
    training = memory[memory["stage"] == "training"].set_index("bs")["mem_used"]
    inference = memory[memory["stage"] == "inference"].set_index("bs")["mem_used"]
    assert list(training.index) == [2, 32]
    assert (training > 0).all() and training[2] < training[32]
    assert inference[32] < training[32]  # no saved activations, gradients or momentum
    assert memory["mem_alloc"].isna().all()  # no CUDA allocator on the CPU
    assert (memory["capacity"] > memory["mem_avail"]).all()

    latency = _gt(log_dir, "latency", "squeezenet_0")
    assert list(latency.columns[:7]) == TX2_COLUMNS["latency"]
    for _, row in latency.iterrows():
        times = ast.literal_eval(row["latency_iters_ms"])
        assert len(times) == 3 and min(times) > 0
        assert row["latency"] == pytest.approx(sum(times) / 3)

    # the journal: the original's `passed|...|params` layout
    journal = (log_dir / "memory" / "squeezenet_0.csv").read_text().splitlines()
    assert journal[0].startswith("passed|mem_alloc|mem_reserved|mem_used|") and journal[0].endswith("|params")
    assert ast.literal_eval(journal[1].split("|")[-1])["exec_stage"] == "training"

    (environment,) = log_dir.glob("environment-*.json")
    record = json.loads(environment.read_text())
    assert record["torch"] == torch.__version__ and record["settings"]["device"] == "cpu"
    assert record["cpu_cores_logical"] >= 1 and record["device_name"]
    # a tensor in fresh pages costs their faults and zeroing at every allocation, which a kept one does not
    assert 0 < record["fresh_pages_ms_per_mib"] < 10

    again = profile_campaign(read_test_config(settings.test_config), log_dir=log_dir)
    assert again.already_recorded == 8 and again.results == []
    assert len(read_journal(log_dir / "memory" / "squeezenet_0.csv")) == 4


@pytest.mark.slow
def test_failures_are_recorded_and_the_campaign_goes_on(tmp_path: Path, model_dir: Path, write_test_config) -> None:
    models = [model_dir / "fragile_0.py", model_dir / "hog_0.py", model_dir / "tinynet_0.py"]
    config = write_test_config(tmp_path / "t.ini", models, [4, 32, 64], test_var=("memory",))
    log_dir = tmp_path / "logs"
    # `import torch` alone makes ~700 MiB resident; hog adds 256 MiB at bs 4, 2 GiB at bs 32
    summary = profile_campaign(read_test_config(config), log_dir=log_dir, till_first_fail=True,
                               memory_limit_mib=1500)
    status = {(r.test.log_name, r.test.bs): r.status for r in summary.results}
    assert status == {
        ("fragile_0", 4): "ok", ("fragile_0", 32): "error", ("fragile_0", 64): "skipped",
        ("hog_0", 4): "ok", ("hog_0", 32): "crashed", ("hog_0", 64): "skipped",
        ("tinynet_0", 4): "ok", ("tinynet_0", 32): "ok", ("tinynet_0", 64): "ok",
    }
    assert (summary.passed, summary.failed, summary.skipped) == (5, 2, 2)

    fragile = _gt(log_dir, "memory", "fragile_0").set_index("bs")
    assert fragile["passed"].tolist() == [True, False, False]
    assert "simulated: not enough memory" in fragile.loc[32, "error"]
    hog = _gt(log_dir, "memory", "hog_0").set_index("bs")
    assert "memory_limit_mib 1500" in hog.loc[32, "error"]
    assert hog.loc[4, "mem_used"] >= 256  # the 64 MiB per sample it holds
    assert _gt(log_dir, "memory", "tinynet_0")["passed"].all()

    # each test's seconds on the device, and what the campaign cost as the fingerprint reports it
    seconds = {(r.test.log_name, r.test.bs): r.seconds for r in summary.results}
    for model in ("fragile_0", "hog_0", "tinynet_0"):
        gt = _gt(log_dir, "memory", model)
        for bs, logged in zip(gt["bs"], gt["test_s"]):
            took = seconds[(model, bs)]
            assert (math.isnan(logged) and took is None) if status[(model, bs)] == "skipped" else logged == round(took, 2) > 0
    logs = pd.concat([read_gt_log(path, [MEMORY]) for path in sorted((log_dir / "memory").glob("*-gt.csv"))])
    assert campaign_cost(logs) == {"tests": 7, "out_of_memory": 2, "failed": 0, "skipped": 2, "timed": 7,
                                   "device_minutes": pytest.approx(sum(filter(None, seconds.values())) / 60, abs=0.01)}


@pytest.mark.slow
def test_a_budget_stops_the_campaign_and_the_next_run_goes_on(
        tmp_path: Path, model_dir: Path, write_test_config, capsys: pytest.CaptureFixture[str]) -> None:
    tests = read_test_config(write_test_config(tmp_path / "t.ini", [model_dir / "tinynet_0.py"], [2, 4, 8],
                                               test_var=("latency",)))
    log_dir = tmp_path / "logs"
    first = profile_campaign(tests, log_dir=log_dir, budget_s=1e-3)  # spent by the first test
    assert [r.test.bs for r in first.results] == [2] and first.not_run == 2 and first.device_s > 1e-3
    assert "the budget of 1.66667e-05 device minutes is spent" in capsys.readouterr().err
    second = profile_campaign(tests, log_dir=log_dir, budget_s=600.0)
    assert second.already_recorded == 1 and [r.test.bs for r in second.results] == [4, 8] and second.not_run == 0
    assert "budget" not in capsys.readouterr().err
    gt = _gt(log_dir, "latency", "tinynet_0")
    assert gt["bs"].tolist() == [2, 4, 8] and gt["passed"].all()
    for budget in (0, -1.0, float("nan"), True):
        with pytest.raises(ArgumentError, match="is no time budget"):
            profile_campaign(tests, log_dir=log_dir, budget_s=budget)


@pytest.mark.slow
def test_same_test_after_a_big_one_measures_as_in_a_fresh_worker(tmp_path: Path, model_dir: Path, write_test_config) -> None:
    # a small reading varies from worker to worker (30-36 MiB, now and then 26 or 47: where the
    # C library's heap puts the first iteration's blocks), so each side is the least of two; in
    # a worker that had run a test before, the same test reads 12-16 MiB
    (model_dir / "tinynet_1.py").write_text((model_dir / "tinynet_0.py").read_text())

    def readings(name: str, models: list[str]) -> list[float]:
        config = write_test_config(tmp_path / f"{name}.ini", [model_dir / m for m in models], [16], test_var=("memory",))
        summary = profile_campaign(read_test_config(config), log_dir=tmp_path / name, iterations=1)
        return [r.outcome.memory.mem_used for r in summary.results]

    fresh = readings("fresh_a", ["tinynet_0.py"]) + readings("fresh_b", ["tinynet_0.py"])
    big, *after_big = readings("after_big", ["hog_0.py", "tinynet_0.py", "tinynet_1.py"])
    assert big > 1000 > max(fresh)  # hog holds 1 GiB at this batch size
    assert min(after_big) == pytest.approx(min(fresh), abs=8)


PIDNET = """
import os
from torch import nn


def pidnet(num_classes=10):
    with open(os.environ["PIDNET_LOG"], "a") as log:
        log.write(f"{os.getpid()}\\n")
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, num_classes))
"""


@pytest.mark.slow
def test_each_memory_test_runs_in_a_worker_of_its_own(tmp_path: Path, write_test_config,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A memory test's reading must hold nothing an earlier test left in the process: it gets a
    worker that has run no test; latency tests go on in the worker they find."""
    model = tmp_path / "pidnet_0.py"
    model.write_text(PIDNET)
    log = tmp_path / "pids.txt"
    monkeypatch.setenv("PIDNET_LOG", str(log))
    tests = read_test_config(write_test_config(tmp_path / "t.ini", [model], [2, 4]))
    assert [(t.test_var, t.bs) for t in tests] == [("memory", 2), ("memory", 4), ("latency", 2), ("latency", 4)]
    summary = profile_campaign(tests, log_dir=tmp_path / "logs", iterations=1, warmup=0)
    assert summary.passed == 4
    built_by = [int(pid) for pid in log.read_text().split() if int(pid) != os.getpid()]  # not the host's checks
    # a memory test builds its model twice (once before its reading, `workload.run_test`)
    first_memory, first_memory_again, second_memory, second_memory_again, first_latency, second_latency = built_by
    assert first_memory == first_memory_again != second_memory == second_memory_again
    assert first_latency == second_latency == second_memory


@pytest.mark.slow
def test_campaign_killed_mid_way_resumes_with_one_row_per_test(tmp_path: Path, model_dir: Path, write_test_config) -> None:
    test_config = write_test_config(tmp_path / "t.ini", [model_dir / "tinynet_0.py"], [2, 4, 8])
    log_dir = tmp_path / "logs"
    config = tmp_path / "config.ini"
    config.write_text(f"[profile]\ndevice = cpu\nlog_dir = {log_dir}\ntest_config = {test_config}\n"
                      "iterations = 1\n")
    command = [sys.executable, "-c", "import sys; from perf4sight.cli import main; sys.exit(main(sys.argv[1:]))",
               "--quiet", "profile", "run", "--config", str(config)]
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    first = log_dir / "memory" / "tinynet_0.csv"
    deadline = time.monotonic() + 60
    while (not first.exists() or first.read_text().count("\n") < 2) and time.monotonic() < deadline:
        assert process.poll() is None, "campaign ended before it could be killed"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)  # the campaign and its worker
    process.wait()
    with open(first, "a") as handle:
        handle.write("True|||3.1")  # as if killed in the middle of a write

    tests = read_test_config(test_config)
    summary = run_test_config(load_config(config).profile)
    assert summary.already_recorded >= 1 and summary.passed >= 1  # killed mid-way, really resumed
    assert summary.already_recorded + summary.passed == len(tests) == 6
    keys = []
    for test_var in ("memory", "latency"):
        rows = read_journal(log_dir / test_var / "tinynet_0.csv")
        keys += [tuple(sorted(r["params"].items())) for r in rows]
        assert len(_gt(log_dir, test_var, "tinynet_0")) == len(rows) == 3
    assert len(keys) == len(set(keys)) == 6
    assert {dict(k)["bs"] for k in keys} == {2, 4, 8}


# fails while its switch file exists, as a model whose code has a bug until it is fixed
BROKEN_UNTIL_FIXED = """
import os
from torch import nn


class Broken(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(8, num_classes))

    def forward(self, x):
        if os.path.exists(os.environ["BROKEN_SWITCH"]):
            raise ValueError("a bug in the model's code")
        return self.body(x)


def broken(num_classes=10):
    return Broken(num_classes)
"""


@pytest.mark.slow
@pytest.mark.parametrize("retry_failed", [True, False])
def test_a_resumed_campaign_runs_again_what_failed_for_another_reason_than_memory(
        tmp_path: Path, model_dir: Path, write_test_config, monkeypatch: pytest.MonkeyPatch, retry_failed: bool) -> None:
    switch = tmp_path / "broken"
    switch.touch()
    monkeypatch.setenv("BROKEN_SWITCH", str(switch))
    (model_dir / "broken_0.py").write_text(BROKEN_UNTIL_FIXED)
    config = read_test_config(write_test_config(tmp_path / "t.ini", [model_dir / "broken_0.py", model_dir / "fragile_0.py"],
                                                [4, 16, 32], test_var=("latency",)))
    log_dir = tmp_path / "logs"
    first = profile_campaign(config, log_dir=log_dir, iterations=1, till_first_fail=True)
    assert [r.status for r in first.results] == ["error", "skipped", "skipped", "ok", "error", "skipped"]

    switch.unlink()  # the model's bug fixed
    again = profile_campaign(config, log_dir=log_dir, iterations=1, till_first_fail=True, retry_failed=retry_failed)
    broken = _gt(log_dir, "latency", "broken_0")
    fragile = _gt(log_dir, "latency", "fragile_0")
    # fragile's failure says "not enough memory": the device's answer, never run again
    assert fragile["status"].tolist() == ["ok", "error", "skipped"]
    if retry_failed:
        assert (again.passed, again.already_recorded) == (3, 3)
        assert broken["status"].tolist() == ["ok", "ok", "ok"]  # each test's new row, and only it
        assert len(read_journal(log_dir / "latency" / "broken_0.csv")) == 6
    else:
        assert (len(again.results), again.already_recorded) == (0, 6)
        assert broken["status"].tolist() == ["error", "skipped", "skipped"]


def _busy_loops() -> list[subprocess.Popen]:
    """One spinning process per CPU: another job taking the machine."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]


# tinynet's iterations at bs 16 take 3.5-10 ms on this VM as its speed drifts: 150 of them
# outlast the 0.25 s below which a block's CPU share is not measured
ITERATIONS_MEASURED = 150


@pytest.mark.slow
def test_latency_timed_on_a_busy_machine_is_reported(
    tmp_path: Path, model_dir: Path, write_test_config, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_test_config(tmp_path / "t.ini", [model_dir / "tinynet_0.py"], [16], test_var=("latency",))
    tests = read_test_config(config)
    quiet = profile_campaign(tests, log_dir=tmp_path / "quiet", iterations=ITERATIONS_MEASURED)
    (result,) = quiet.results
    # long enough to measure the share (None for a block under 0.25 s)
    assert isinstance(result.outcome.cpu_elsewhere, float) and not math.isnan(result.outcome.cpu_elsewhere)
    loops = _busy_loops()
    try:
        time.sleep(0.5)  # the loops up and running
        busy = profile_campaign(tests, log_dir=tmp_path / "busy", iterations=ITERATIONS_MEASURED)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    (result,) = busy.results
    # every CPU had a spinning process: the test got at most its share of them
    assert result.passed and result.outcome.cpu_elsewhere >= 0.3
    assert busy.disturbed == [result]
    # the share is kept in the logs, for rows read long after the warning scrolled by
    (row,) = read_journal(tmp_path / "busy" / "latency" / "tinynet_0.csv")
    assert row["cpu_elsewhere"] == round(result.outcome.cpu_elsewhere, 3)
    assert _gt(tmp_path / "busy", "latency", "tinynet_0")["cpu_elsewhere"].tolist() == [row["cpu_elsewhere"]]
    for run in ("quiet", "busy"):  # every latency row has its share
        shares = _gt(tmp_path / run, "latency", "tinynet_0")["cpu_elsewhere"]
        assert len(shares) == 1 and shares.dtype == float and shares.notna().all()
    err = capsys.readouterr().err
    assert "1 of 1 latency tests ran while other processes took 20% or more of the CPU" in err
    assert "tinynet_0 bs=16 training" in err


def _run_config(tmp_path: Path, test_config: Path, log_dir: Path, extra: str = "") -> Path:
    """A config.ini whose [profile] runs `test_config` into `log_dir`, one iteration a test."""
    config = tmp_path / "config.ini"
    config.write_text(f"[profile]\nlog_dir = {log_dir}\ntest_config = {test_config}\niterations = 1\n{extra}")
    return config


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("limit", ["-5", "0"])
def test_memory_limit_not_a_positive_integer_is_a_config_error(
    tmp_path: Path, model_dir: Path, write_test_config, capsys: pytest.CaptureFixture[str], limit: str
) -> None:
    test_config = write_test_config(tmp_path / "t.ini", [model_dir / "tinynet_0.py"], [2], test_var=("memory",))
    log_dir = tmp_path / "logs"
    config = _run_config(tmp_path, test_config, log_dir, f"memory_limit_mib = {limit}\n")
    assert main(["--quiet", "profile", "run", "--config", str(config)]) == 2
    err = _one_error_line(capsys)
    assert f"error: {config}: [profile] memory_limit_mib: expected a positive integer (MiB)" in err
    assert not log_dir.exists()


@pytest.mark.slow
@pytest.mark.parametrize("save", [True, False])
def test_worker_over_the_memory_limit_while_starting_stops_the_campaign(
    tmp_path: Path, model_dir: Path, write_test_config, capsys: pytest.CaptureFixture[str], save: bool
) -> None:
    """Python and torch alone are over 50 MiB: no test could run, so none is recorded as crashed."""
    test_config = write_test_config(tmp_path / "t.ini", [model_dir / "tinynet_0.py"], [2, 4], test_var=("memory",))
    log_dir = tmp_path / "logs"
    journal = log_dir / "memory" / "tinynet_0.csv"
    if save:  # a campaign under way: bs 2 recorded already
        profile_campaign(read_test_config(test_config)[:1], log_dir=log_dir, iterations=1)
    capsys.readouterr()
    config = _run_config(tmp_path, test_config, log_dir, f"save = {save}\nmemory_limit_mib = 50\n")
    assert main(["--quiet", "profile", "run", "--config", str(config)]) == 2
    err = _one_error_line(capsys)
    assert (f"error: {config}: [profile] memory_limit_mib = 50: the worker went over it while starting, "
            "before any test") in err
    if save:
        assert [r["status"] for r in read_journal(journal)] == ["ok"]  # kept, and no crashed row for bs 4
        resumed = profile_campaign(read_test_config(test_config), log_dir=log_dir, iterations=1)
        assert resumed.already_recorded == 1 and [(r.test.bs, r.status) for r in resumed.results] == [(4, "ok")]
    else:
        assert not log_dir.exists()


@pytest.mark.slow
@pytest.mark.parametrize("save", [True, False])
def test_worker_that_does_not_start_in_time_stops_the_campaign(
    tmp_path: Path, model_dir: Path, write_test_config, monkeypatch: pytest.MonkeyPatch, save: bool
) -> None:
    monkeypatch.setattr("perf4sight.device.worker._START_TIMEOUT_S", 0.01)  # torch alone takes longer
    test_config = write_test_config(tmp_path / "t.ini", [model_dir / "tinynet_0.py"], [2], test_var=("memory",))
    log_dir = tmp_path / "logs"
    with pytest.raises(ConfigError, match=r"^device = cpu: the worker could not start: "
                                          r"no answer within 0\.01 s") as info:
        profile_campaign(read_test_config(test_config), log_dir=log_dir, iterations=1, save=save)
    assert str(info.value).endswith(f"; its output is in {log_dir / 'worker.log'}" if save else "0.01 s")
    assert not (log_dir / "memory").exists()  # nothing recorded for the test


def test_non_utf8_journal_is_a_log_format_error(
    tmp_path: Path, model_dir: Path, write_test_config, capsys: pytest.CaptureFixture[str]
) -> None:
    test_config = write_test_config(tmp_path / "t.ini", [model_dir / "tinynet_0.py"], [2], test_var=("memory",))
    log_dir = tmp_path / "logs"
    journal = log_dir / "memory" / "tinynet_0.csv"
    journal.parent.mkdir(parents=True)
    journal.write_bytes("passed|mem_used|params\nFalse|1.0|{'model': 'caf\u00e9'}\n".encode("latin-1"))
    config = _run_config(tmp_path, test_config, log_dir)
    assert main(["--quiet", "profile", "run", "--config", str(config)]) == 2
    assert f"error: {journal}: line 2: not UTF-8 text" in _one_error_line(capsys)


def test_a_model_that_cannot_be_read_stops_the_campaign_before_any_test(
    tmp_path: Path, model_dir: Path, write_test_config
) -> None:
    """Its tests would fail without measuring anything, and journalled failures are not
    retried: the campaign refuses to start, naming the file, and records nothing."""
    broken = model_dir / "tinynet_50.json"
    broken.write_text("")  # a spec cut short
    config = write_test_config(tmp_path / "t.ini", [model_dir / "tinynet_0.py", broken], [2])
    log_dir = tmp_path / "logs"
    with pytest.raises(NetworkError, match=f"^{broken}: not valid JSON"):
        profile_campaign(read_test_config(config), log_dir=log_dir)
    (model_dir / "tinynet_0.py").unlink()
    with pytest.raises(ConfigError, match=f"^test config: model file not found: {model_dir / 'tinynet_0.py'}$"):
        profile_campaign(read_test_config(config), log_dir=log_dir)
    assert not log_dir.exists()


@pytest.mark.slow
def test_a_stopped_campaign_says_so_and_leaves_no_worker(tmp_path: Path, model_dir: Path, write_test_config) -> None:
    """SIGTERM stops a campaign as Ctrl-C does (a short message, code 130, no test recorded as
    crashed); a campaign killed outright takes its worker with it, mid-test."""
    psutil = pytest.importorskip("psutil")
    test_config = write_test_config(tmp_path / "t.ini", [model_dir / "slow_0.py"], [2, 8], test_var=("memory",))
    log_dir = tmp_path / "logs"
    config = tmp_path / "config.ini"
    config.write_text(f"[profile]\ndevice = cpu\nlog_dir = {log_dir}\ntest_config = {test_config}\niterations = 1\n")
    command = [sys.executable, "-c", "import sys; from perf4sight.cli import main; sys.exit(main(sys.argv[1:]))",
               "--quiet", "profile", "run", "--config", str(config)]
    journal = log_dir / "memory" / "slow_0.csv"

    def start_slow_test() -> tuple[subprocess.Popen, list]:
        """The campaign, once its worker is in the minute-long test (bs 2 already recorded)."""
        process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        deadline = time.monotonic() + 60
        while not (journal.exists() and "'bs': 2" in journal.read_text()) and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        workers: list = []
        while not workers and time.monotonic() < deadline:  # a worker (restarted, when resuming)
            workers = psutil.Process(process.pid).children()
            time.sleep(0.05)
        assert workers, "no worker running"
        time.sleep(3.0)  # the worker takes the next test
        return process, workers

    process, workers = start_slow_test()
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130 and err.strip().splitlines()[-1] == "aborted"
    assert [row["status"] for row in read_journal(journal)] == ["ok"]  # nothing recorded for bs 8
    psutil.wait_procs(workers, timeout=10)
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)

    process, workers = start_slow_test()
    process.kill()  # the campaign only, not its process group
    process.communicate()
    gone, alive = psutil.wait_procs(workers, timeout=5)
    assert not alive, "the worker outlived its campaign"


@pytest.mark.slow
def test_a_torchvision_name_in_a_test_config_is_profiled(tmp_path: Path) -> None:
    """A test config may name a torchvision network instead of a file: no file is looked for."""
    config = tmp_path / "t.ini"
    config.write_text("[SQUEEZENET_0]\ntest_var= ['memory']\nbs= [2]\ndataset= ['cifar10']\n"
                      "net_name= ['squeezenet1']\nexec_stage= ['training']\nmodel= ['squeezenet1_1']\n")
    summary = profile_campaign(read_test_config(config), log_dir=tmp_path / "logs")
    assert [r.status for r in summary.results] == ["ok"]


def test_a_spec_wider_than_its_base_stops_the_campaign_before_any_test(tmp_path: Path, write_test_config) -> None:
    """A spec consistent in itself but not cut from its base (a first layer of 200 channels
    where squeezenet has 96) would profile another network than fitting assumes: refused."""
    settings = NetworkDatasetSettings(networks=["squeezenet1_0"], pruning_perc=[0], input_size=(3, 32, 32),
                                      num_classes=10, model_path=tmp_path / "models")
    create_network_dataset(settings)
    path = tmp_path / "models" / "squeezenet1_0_0.json"
    spec = json.loads(path.read_text())
    spec["out_channels"]["features.0"] = 200
    for entry in spec["layers"]:
        if entry["name"] == "features.0":
            entry["out"][0] = 200
        if entry["name"] == "features.3.squeeze":
            entry["in"][0] = 200
    path.write_text(json.dumps(spec))
    config = write_test_config(tmp_path / "t.ini", [path], [2])
    log_dir = tmp_path / "logs"
    with pytest.raises(NetworkError, match="features.0"):
        profile_campaign(read_test_config(config), log_dir=log_dir)
    assert not log_dir.exists()


@pytest.mark.slow
def test_a_backend_error_names_its_argument_and_the_pipeline_adds_file_and_section(
    tmp_path: Path, model_dir: Path, write_test_config, capsys: pytest.CaptureFixture[str]
) -> None:
    """Called from Python, the backend speaks of its argument; run from a config, the same
    error is one line that names the file and section too."""
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(ArgumentError, match=r"^device = cuda: CUDA is not available on this machine$"):
        make_backend("cuda").setup()
    test_config = write_test_config(tmp_path / "t.ini", [model_dir / "tinynet_0.py"], [2], test_var=("memory",))
    config = _run_config(tmp_path, test_config, tmp_path / "logs", "device = cuda\nsave = False\n")
    assert main(["--quiet", "run", "--config", str(config)]) == 2
    assert f"error: {config}: [profile] device = cuda: CUDA is not available on this machine" in _one_error_line(capsys)


@pytest.mark.slow
def test_a_campaign_whose_journal_was_deleted_adds_no_test_twice_to_the_gt(
        tmp_path: Path, model_dir: Path, write_test_config) -> None:
    config = read_test_config(write_test_config(tmp_path / "t.ini", [model_dir / "tinynet_0.py"], [2, 4],
                                                test_var=("latency",)))
    log_dir = tmp_path / "logs"
    profile_campaign(config, log_dir=log_dir, iterations=1)
    before = _gt(log_dir, "latency", "tinynet_0")
    (log_dir / "latency" / "tinynet_0.csv").unlink()  # the journal lost, its gt kept

    again = profile_campaign(config, log_dir=log_dir, iterations=1)
    assert (again.passed, again.already_recorded) == (2, 0)  # measured again: nothing said they ran
    after = _gt(log_dir, "latency", "tinynet_0")
    assert sorted(after["bs"]) == [2, 4] and list(after.columns) == list(before.columns)
    journal = read_journal(log_dir / "latency" / "tinynet_0.csv")
    assert sorted(after["latency"]) == sorted(row["latency"] for row in journal)  # the new readings


@pytest.mark.slow
def test_a_campaign_resumes_its_models_wherever_their_files_lie_and_refuses_another_file_of_their_name(
        tmp_path: Path, model_dir: Path, write_test_config) -> None:
    log_dir = tmp_path / "logs"
    first = read_test_config(write_test_config(tmp_path / "t.ini", [model_dir / "tinynet_0.py"], [2, 4],
                                               test_var=("latency",)))
    assert profile_campaign(first, log_dir=log_dir, iterations=1).passed == 2
    journal = read_journal(log_dir / "latency" / "tinynet_0.csv")
    digest = {row["params"]["model_sha256"] for row in journal}
    assert len(digest) == 1 and len(digest.pop()) == 64

    moved = tmp_path / "bundle" / "models"
    moved.mkdir(parents=True)
    (moved / "tinynet_0.py").write_bytes((model_dir / "tinynet_0.py").read_bytes())
    again = read_test_config(write_test_config(tmp_path / "moved.ini", [moved / "tinynet_0.py"], [2, 4, 8],
                                               test_var=("latency",)))
    resumed = profile_campaign(again, log_dir=log_dir, iterations=1)
    assert (resumed.already_recorded, resumed.passed) == (2, 1)  # the same file at another path
    assert sorted(_gt(log_dir, "latency", "tinynet_0")["bs"]) == [2, 4, 8]

    (moved / "tinynet_0.py").write_text((model_dir / "fragile_0.py").read_text().replace("fragile", "tinynet"))
    with pytest.raises(ConfigError, match=r"tinynet_0.csv: holds tests of another tinynet_0 than .*bundle"):
        profile_campaign(again, log_dir=log_dir, iterations=1)
    assert len(read_journal(log_dir / "latency" / "tinynet_0.csv")) == 3  # nothing measured or written

    twice = read_test_config(write_test_config(tmp_path / "twice.ini", [model_dir / "tinynet_0.py",
                                                                        moved / "tinynet_0.py"], [2]))
    with pytest.raises(ConfigError, match="have one name, tinynet_0, and would share its logs"):
        profile_campaign(twice, log_dir=tmp_path / "other", iterations=1)
    assert not (tmp_path / "other").exists()


def test_a_model_file_of_another_network_than_its_spec_stops_the_campaign_before_any_test(
        tmp_path: Path, model_dir: Path, write_test_config) -> None:
    wider = torch.nn.Sequential(torch.nn.Conv2d(3, 24, 3, padding=1), torch.nn.BatchNorm2d(24), torch.nn.ReLU(),
                                torch.nn.Conv2d(24, 32, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    write_spec(spec_from_module(wider, name="tinynet_0", net="tinynet", prune_level=0, input_size=(3, 32, 32),
                                num_classes=10), model_dir / "tinynet_0.json")
    config = read_test_config(write_test_config(tmp_path / "t.ini", [model_dir / "tinynet_0.py"], [2]))
    with pytest.raises(ConfigError, match=r"tinynet_0.py: not the network its spec tinynet_0.json describes "
                                          r"\(0 is \(3, 16, 1, \(3, 3\)\), the spec says \(3, 24, 1, \(3, 3\)\)\)"):
        profile_campaign(config, log_dir=tmp_path / "logs")
    assert not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_logs_remember_the_spec_they_were_measured_as_and_the_fit_refuses_another(tmp_path: Path) -> None:
    from perf4sight.device.definitions import LATENCY
    from perf4sight.errors import LogFormatError
    from perf4sight.fit import ArchitectureCatalog, build_dataset, read_logs

    specs = tmp_path / "specs"

    def write(size: int) -> Path:
        spec = spec_from_module(torchvision.models.squeezenet1_1(num_classes=10), name="squeezenet_0",
                                net="squeezenet", prune_level=0, input_size=(3, size, size), num_classes=10,
                                torchvision_name="squeezenet1_1")
        return write_spec(spec, specs / "squeezenet_0.json")

    measured = write(32).read_bytes()
    test_config = tmp_path / "t.ini"
    test_config.write_text("[SQUEEZENET]\ntest_var = ['latency']\nbs = [2]\ndataset = ['spec']\n"
                           f"net_name = ['squeezenet']\nexec_stage = ['training']\nmodel = ['{specs / 'squeezenet_0.json'}']\n")
    profile_campaign(read_test_config(test_config), log_dir=tmp_path / "logs", iterations=1, warmup=0)
    assert _gt(tmp_path / "logs", "latency", "squeezenet_0")["spec_sha256"].tolist() == [
        file_digest(specs / "squeezenet_0.json")]

    def fit() -> int:
        logs = read_logs(["squeezenet"], [0], [tmp_path / "logs" / "latency"], [LATENCY])
        return len(build_dataset(logs, target=LATENCY.name, feature_set="network", stage="training",
                                 catalog=ArchitectureCatalog(specs)))

    assert fit() == 1
    write(48)  # the spec written again, for another input size
    with pytest.raises(LogFormatError, match=r"squeezenet_0-gt.csv: squeezenet_0 was measured as a spec other than "
                                             rf"{specs / 'squeezenet_0.json'} \(its SHA-256 differs"):
        fit()
    (specs / "squeezenet_0.json").write_bytes(measured)
    assert fit() == 1
