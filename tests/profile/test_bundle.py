"""`perf4sight profile bundle`: a folder that profiles on a device without perf4sight, with
the logs `profile run` writes; one campaign per log folder."""

from __future__ import annotations

import json
import shutil
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torchvision

import perf4sight.device
from perf4sight.cli import main
from perf4sight.device.lock import LogFolderLock
from perf4sight.networks import spec_from_module, write_spec
from perf4sight.profile import profile_campaign, read_journal, read_test_config

# Runs a bundle's runner with `import perf4sight` made impossible: the bundle must not need it.
WITHOUT_PERF4SIGHT = ("import runpy, sys; sys.modules['perf4sight'] = None; sys.argv = sys.argv[1:]; "
                      "runpy.run_path(sys.argv[0], run_name='__main__')")
TESTS = 4  # squeezenet_0 at bs 2 and 4, training, memory and latency


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle of a squeezenet spec at 3x32x32 (its model file written from the spec)."""
    root = tmp_path_factory.mktemp("bundle")
    models = root / "models"
    spec = spec_from_module(torchvision.models.squeezenet1_1(num_classes=10), name="squeezenet_0",
                            net="squeezenet", prune_level=0, input_size=(3, 32, 32), num_classes=10,
                            torchvision_name="squeezenet1_1")
    write_spec(spec, models / "squeezenet_0.json")
    config = root / "config.ini"
    config.write_text(
        "[profile]\nnetwork = ['squeezenet']\nbs = [2, 4]\nstage = ['training']\n"
        f"local_model_loc = {models}\ntest_config = {root / 'unused.ini'}\nlog_dir = {root / 'unused'}\n"
        "device = cpu\niterations = 1\nwarmup = 0\n"
    )
    out = root / "out"
    assert main(["--quiet", "profile", "bundle", "--config", str(config), "--out", str(out)]) == 0
    return out


def _runner(bundle: Path, *args: str) -> list[str]:
    return [sys.executable, "-c", WITHOUT_PERF4SIGHT, str(bundle / "run_profile.py"), "--quiet", *args]


def _keys(log_dir: Path) -> list[tuple]:
    """Each journalled test, as its sorted params."""
    return [tuple(sorted(row["params"].items()))
            for test_var in ("memory", "latency") for row in read_journal(log_dir / test_var / "squeezenet_0.csv")]


@pytest.mark.slow
def test_bundle_holds_what_the_device_needs(bundle: Path) -> None:
    device_modules = sorted(p.name for p in Path(perf4sight.device.__file__).parent.glob("*.py"))
    assert sorted(p.name for p in (bundle / "perf4sight_device").glob("*.py")) == device_modules
    assert sorted(p.name for p in (bundle / "models").iterdir()) == ["squeezenet_0.json", "squeezenet_0.py"]
    assert "def squeezenet(" in (bundle / "models" / "squeezenet_0.py").read_text()
    assert [t.model for t in read_test_config(bundle / "test_config.ini")] == ["models/squeezenet_0.py"] * TESTS
    defaults = json.loads((bundle / "bundle.json").read_text())["defaults"]
    assert defaults == {"test_config": "test_config.ini", "log_dir": "logs", "device": "cpu", "gpu_id": 0,
                        "iterations": 1, "warmup": 0, "memory_limit_mib": None, "till_first_fail": False,
                        "retry_failed": True, "budget_minutes": None}
    done = subprocess.run(_runner(bundle, "--help"), capture_output=True, text=True, check=True)
    for option in ("--device", "--gpu-id", "--log-dir", "--iterations", "--warmup", "--memory-limit-mib",
                   "--till-first-fail", "--no-retry-failed", "--budget-minutes"):
        assert option in done.stdout
    assert "timed iterations per test (default: 1)" in " ".join(done.stdout.split())


def test_the_runners_switches_turn_the_recorded_defaults_off(bundle: Path) -> None:
    """A bundle made with till_first_fail, a memory limit and retries can still be run without them."""
    from perf4sight.device.runner import _parser

    recorded = {**json.loads((bundle / "bundle.json").read_text())["defaults"],
                "till_first_fail": True, "memory_limit_mib": 900}
    args = _parser(recorded).parse_args(["--no-till-first-fail", "--memory-limit-mib", "none", "--no-retry-failed"])
    assert (args.till_first_fail, args.memory_limit_mib, args.retry_failed) == (False, None, False)
    args = _parser(recorded).parse_args([])
    assert (args.till_first_fail, args.memory_limit_mib, args.retry_failed) == (True, 900, True)


@pytest.mark.slow
def test_a_bundle_whose_model_file_is_another_networks_is_one_line_before_any_test(
        bundle: Path, tmp_path: Path) -> None:
    """Its runs would be logged under the spec's name: refused, naming the file and a layer."""
    bundle = Path(shutil.copytree(bundle, tmp_path / "bundle"))
    model = bundle / "models" / "squeezenet_0.py"
    model.write_text("import torchvision\n\n\ndef squeezenet(num_classes=10):\n"
                     "    return torchvision.models.squeezenet1_0(num_classes=num_classes)\n")
    done = subprocess.run(_runner(bundle), capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: models/squeezenet_0.py: not the network its spec squeezenet_0.json describes (features.0 is "
        "(3, 96, 1, (7, 7)), the spec says (3, 64, 1, (3, 3))): another network's file? Write the model file "
        "and its spec again together"]
    assert not (bundle / "logs").exists()


def test_a_bundle_record_without_a_default_is_one_line(bundle: Path, tmp_path: Path) -> None:
    bundle = Path(shutil.copytree(bundle, tmp_path / "bundle"))
    record = json.loads((bundle / "bundle.json").read_text())
    del record["defaults"]["device"]
    (bundle / "bundle.json").write_text(json.dumps(record))
    done = subprocess.run(_runner(bundle), capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: {bundle / 'bundle.json'}: not a bundle's record (no default for device)"]


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("iterations", 2.5, "an integer >= 1"),
    ("iterations", True, "an integer >= 1"),
    ("iterations", 0, "an integer >= 1"),
    ("warmup", None, "an integer >= 0"),
    ("device", 5, "a device name"),
    ("gpu_id", "0", "an integer >= 0"),
    ("memory_limit_mib", 0, "a positive integer or null"),
    ("till_first_fail", "yes", "true or false"),
    ("retry_failed", 1, "true or false"),
    ("budget_minutes", 0, "minutes above 0 or null"),
    ("budget_minutes", "15", "minutes above 0 or null"),
    ("test_config", ["t.ini"], "a path"),
])
def test_a_bundle_default_of_the_wrong_type_is_one_line_before_any_test(
        bundle: Path, tmp_path: Path, key: str, value: object, expected: str) -> None:
    """Such a value would fail every test (and be journalled as failed); it is refused first."""
    bundle = Path(shutil.copytree(bundle, tmp_path / "bundle"))
    record = json.loads((bundle / "bundle.json").read_text())
    record["defaults"][key] = value
    (bundle / "bundle.json").write_text(json.dumps(record))
    done = subprocess.run(_runner(bundle), capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: {bundle / 'bundle.json'}: not a bundle's record "
                                        f"({key} = {json.dumps(value)}: expected {expected})"]
    assert not (bundle / "logs").exists()


@pytest.mark.slow
def test_bundle_logs_are_those_of_profile_run(bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same tests run by the bundle (no perf4sight) and by `profile run`: same files, header
    lines, tests and statuses, memory within noise."""
    bundle_logs, host_logs = tmp_path / "bundle_logs", tmp_path / "host_logs"
    done = subprocess.run(_runner(bundle, "--log-dir", str(bundle_logs)), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    monkeypatch.chdir(bundle)  # the test config's model paths are relative to the bundle
    profile_campaign(read_test_config("test_config.ini"), log_dir=host_logs, iterations=1, warmup=0)

    def files(log_dir: Path) -> list[str]:
        return sorted(str(p.relative_to(log_dir)) for p in log_dir.rglob("*.csv"))

    assert files(bundle_logs) == files(host_logs) == [
        "latency/squeezenet_0-gt.csv", "latency/squeezenet_0.csv", "memory/squeezenet_0-gt.csv", "memory/squeezenet_0.csv"]
    for name in files(host_logs):
        assert (bundle_logs / name).read_text().splitlines()[0] == (host_logs / name).read_text().splitlines()[0]
    assert sorted(_keys(bundle_logs)) == sorted(_keys(host_logs)) and len(set(_keys(host_logs))) == TESTS
    for test_var in ("memory", "latency"):
        rows = [read_journal(d / test_var / "squeezenet_0.csv") for d in (bundle_logs, host_logs)]
        assert all(row["status"] == "ok" for log in rows for row in log)
    memory = [{r["params"]["bs"]: r["mem_used"] for r in read_journal(d / "memory" / "squeezenet_0.csv")}
              for d in (bundle_logs, host_logs)]
    for bs in (2, 4):
        # a standalone model file and a spec leave different amounts of Python objects behind
        # the build (up to 12 MiB seen), which weigh on a reading of 40-60 MiB
        assert memory[0][bs] == pytest.approx(memory[1][bs], rel=0.25, abs=15)
    (environment,) = bundle_logs.glob("environment-*.json")
    record = json.loads(environment.read_text())
    assert record["settings"] == {"device": "cpu", "gpu_id": 0, "iterations": 1, "warmup": 0,
                                  "till_first_fail": False, "memory_limit_mib": None}


@pytest.mark.slow
def test_a_bundle_stops_at_its_budget_and_the_next_run_goes_on(bundle: Path, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    done = subprocess.run(_runner(bundle, "--log-dir", str(log_dir), "--budget-minutes", "1e-5"),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert len(_keys(log_dir)) == 1 and f"{TESTS - 1} tests not run" in done.stderr  # the first test spent it
    done = subprocess.run(_runner(bundle, "--log-dir", str(log_dir), "--budget-minutes", "none"),
                          capture_output=True, text=True)
    assert done.returncode == 0 and "not run" not in done.stderr, done.stderr
    keys = _keys(log_dir)
    assert len(keys) == len(set(keys)) == TESTS


def test_a_bundle_made_with_a_budget_lists_its_tests_in_the_order_picked(tmp_path: Path) -> None:
    """The device is not here to time them: every test, in spread order, and the budget as the runner's default."""
    models = tmp_path / "models"
    for level in (0, 50, 90):
        spec = spec_from_module(torchvision.models.squeezenet1_1(num_classes=10), name=f"squeezenet_{level}",
                                net="squeezenet", prune_level=level, input_size=(3, 32, 32), num_classes=10,
                                torchvision_name="squeezenet1_1")
        write_spec(spec, models / f"squeezenet_{level}.json")
    config = tmp_path / "config.ini"
    config.write_text(f"[profile]\nnetwork = ['squeezenet']\nbs = [2, 8, 32]\nlocal_model_loc = {models}\n"
                      f"test_config = {tmp_path / 'unused.ini'}\nbudget_minutes = 15\n")
    out = tmp_path / "out"
    assert main(["--quiet", "profile", "bundle", "--config", str(config), "--out", str(out)]) == 0
    assert json.loads((out / "bundle.json").read_text())["defaults"]["budget_minutes"] == 15
    tests = read_test_config(out / "test_config.ini")
    pairs = list(dict.fromkeys((Path(t.model).stem, t.bs) for t in tests))
    assert len(pairs) == 9 and pairs[0] == ("squeezenet_0", 2)  # every pair; the least pruned at the smallest first
    assert list(dict.fromkeys(model for model, _ in pairs)) == ["squeezenet_0", "squeezenet_90", "squeezenet_50"]


@pytest.mark.slow
def test_bundle_killed_mid_way_resumes_with_one_row_per_test(bundle: Path, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    journal = log_dir / "memory" / "squeezenet_0.csv"
    process = subprocess.Popen(_runner(bundle, "--log-dir", str(log_dir)), start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while (not journal.exists() or journal.read_text().count("\n") < 2) and time.monotonic() < deadline:
        assert process.poll() is None, "campaign ended before it could be killed"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)  # the campaign and its worker
    process.wait()
    assert 1 <= len(_keys(log_dir)) < TESTS
    with open(journal, "a") as handle:
        handle.write("True|||3.1")  # as if killed in the middle of a write
    done = subprocess.run(_runner(bundle, "--log-dir", str(log_dir)), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    keys = _keys(log_dir)
    assert len(keys) == len(set(keys)) == TESTS
    for test_var in ("memory", "latency"):
        gt = (log_dir / test_var / "squeezenet_0-gt.csv").read_text().splitlines()
        assert len(gt) - 1 == len(read_journal(log_dir / test_var / "squeezenet_0.csv")) == 2


@pytest.mark.slow
def test_bundle_refuses_a_log_folder_in_use(bundle: Path, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    with LogFolderLock(log_dir):
        done = subprocess.run(_runner(bundle, "--log-dir", str(log_dir)), capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: {log_dir}: another campaign (pid {os.getpid()}) is profiling into this log folder; "
        "wait for it to end or give another log folder"]
    assert not (log_dir / "memory").exists()


@pytest.mark.slow
def test_two_campaigns_on_one_log_folder(tmp_path: Path, model_dir: Path, write_test_config,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The second is refused in one line naming the folder and the first's pid (exit 2); the
    first finishes with one row per test."""
    test_config = write_test_config(tmp_path / "t.ini", [model_dir / "tinynet_0.py"], [2, 4])
    log_dir = tmp_path / "logs"
    config = tmp_path / "config.ini"
    config.write_text(f"[profile]\ndevice = cpu\nlog_dir = {log_dir}\ntest_config = {test_config}\niterations = 1\n")
    command = [sys.executable, "-c", "import sys; from perf4sight.cli import main; sys.exit(main(sys.argv[1:]))",
               "--quiet", "profile", "run", "--config", str(config)]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lock = log_dir / "campaign.lock"
    deadline = time.monotonic() + 120
    while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
        assert first.poll() is None, first.communicate()
        time.sleep(0.02)
    assert main(["--quiet", "profile", "run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"error: {log_dir}: another campaign (pid {first.pid}) is profiling into this "
                                "log folder; wait for it to end or give another log folder"]
    assert first.wait(timeout=300) == 0, first.communicate()
    keys = [tuple(sorted(row["params"].items()))
            for test_var in ("memory", "latency") for row in read_journal(log_dir / test_var / "tinynet_0.csv")]
    assert len(keys) == len(set(keys)) == len(read_test_config(test_config)) == 4


def test_bundle_of_a_model_file_without_its_input_size_is_refused(
    tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dataset = spec takes the input size from the spec beside the model file: none there is
    one line on the host, not a failure on the device."""
    config = tmp_path / "config.ini"
    config.write_text(f"[profile]\nnetwork = ['tinynet']\nbs = [2]\nlocal_model_loc = {model_dir}\n")
    assert main(["--quiet", "profile", "bundle", "--config", str(config), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"error: {config}: [profile] dataset = spec: the model file "
                                f"{model_dir / 'tinynet_0.py'} has no spec tinynet_0.json beside it to take its input "
                                "size from; add it or name a dataset"]


def test_runner_without_torch_says_so_in_one_line(bundle: Path) -> None:
    done = subprocess.run([sys.executable, "-S", str(bundle / "run_profile.py")], capture_output=True, text=True)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: PyTorch cannot be imported by {sys.executable} (No module named 'torch')")
