"""A campaign over a lab on Ray: a real local cluster with two CPU devices (two custom resources,
one core each), faults injected, and logs compared with a campaign on one device."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import psutil
import pytest

from perf4sight.config import load_config
from perf4sight.device.lock import LogFolderLock
from perf4sight.device.logs import LAB_DEVICE
from perf4sight.errors import ConfigError
from perf4sight.profile import read_journal, read_test_config, run_test_config
from perf4sight.profile.lab import parse_devices
from ray_cluster import local_cluster

pytestmark = pytest.mark.xdist_group("ray")  # one cluster: these tests in one worker (make test: --dist loadgroup)

CLI = [sys.executable, "-c", "import sys; from perf4sight.cli import main; sys.exit(main(sys.argv[1:]))"]
DEVICES = {"cpu_a": 0, "cpu_b": 1 % (os.cpu_count() or 1)}  # a core each (one shared on a 1-core machine)


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A Ray head on this machine whose resources are two CPU devices; its address."""
    with local_cluster({name: 1 for name in DEVICES}) as address:
        yield address


def _campaign(tmp_path: Path, model_dir: Path, write_test_config, name: str, bs: list[int]) -> Path:
    """A config of two models at batch sizes `bs`, memory and latency, on the lab's devices."""
    models = [model_dir / "tinynet_0.py", model_dir / "tinynet_50.py"]
    test_config = write_test_config(tmp_path / f"{name}.ini", models, bs)
    config = tmp_path / f"{name}-config.ini"
    devices = [f"{device}:{core}" for device, core in DEVICES.items()]
    config.write_text(f"[profile]\ndevice = cpu\nlog_dir = {tmp_path / name}\ntest_config = {test_config}\n"
                      f"iterations = 1\ndevices = {devices!r}\n")
    return config


def _rows(log_dir: Path) -> dict[tuple, list[dict]]:
    """Every journal row by test key."""
    rows: dict[tuple, list[dict]] = {}
    for journal in sorted(log_dir.glob("*/*.csv")):
        if not journal.name.endswith("-gt.csv"):
            for row in read_journal(journal):
                params = {k: v for k, v in row["params"].items() if k not in (LAB_DEVICE, "model_sha256")}
                rows.setdefault(tuple(sorted(params.items())), []).append(row)
    return rows


def _wait_for_rows(log_dir: Path, count: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 240
    while sum(len(r) for r in _rows(log_dir).values()) < count:
        assert process.poll() is None, "the campaign ended before the fault"
        assert time.monotonic() < deadline, "the campaign made no progress"
        time.sleep(0.1)


def _device_processes(running: bool = False) -> list[psutil.Process]:
    """The lab's device actors with a worker (only those running a test when `running`: Ray
    names the method in hand in the process's title)."""
    title = "ray::LabDevice.run" if running else "ray::LabDevice"
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or []).strip()
        if cmdline.startswith(title) and process.children():
            found.append(process)
    return found


@pytest.mark.slow
def test_a_lab_campaign_survives_a_killed_driver_and_a_killed_device_and_writes_one_device_s_logs(
        tmp_path: Path, model_dir: Path, write_test_config, cluster: str) -> None:
    config = _campaign(tmp_path, model_dir, write_test_config, "lab", [2, 8])
    log_dir = tmp_path / "lab"
    command = CLI + ["--quiet", "profile", "run", "--config", str(config), "--ray", cluster]

    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for_rows(log_dir, 3, driver)
    orphans = [process for actor in _device_processes() for process in [actor] + actor.children(recursive=True)]
    driver.kill()  # the driver, mid-campaign: Ray ends its devices' actors, their workers follow
    driver.wait()
    _, alive = psutil.wait_procs(orphans, timeout=60)
    assert not alive, "a device or its worker outlived the driver"
    before = sum(len(r) for r in _rows(log_dir).values())
    assert 3 <= before < 8

    with LogFolderLock(log_dir):  # held as a running campaign holds it: a second driver is refused in one line
        second = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert second.returncode == 2 and f"another campaign (pid {os.getpid()})" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1

    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _device_processes(running=True):
        assert time.monotonic() < deadline and driver.poll() is None, "no device busy to kill"
        time.sleep(0.05)
    _device_processes(running=True)[0].kill()  # a device's process dies mid-test
    _, stderr = driver.communicate(timeout=300)
    assert driver.returncode == 0, stderr
    assert "lost while running" in stderr

    rows = _rows(log_dir)
    tests = read_test_config(tmp_path / "lab.ini")
    assert len(rows) == len(tests) == 8  # every test, none lost
    assert all(len(test_rows) == 1 for test_rows in rows.values())  # none twice
    assert all(row["status"] == "ok" for (row,) in rows.values())
    assert {row["params"][LAB_DEVICE] for (row,) in rows.values()} == set(DEVICES)  # both devices worked
    records = sorted(path.name for path in log_dir.glob("environment-*.json"))
    assert {name.rsplit("-", 1)[1][:-len(".json")] for name in records} == set(DEVICES)

    # the logs, faults and all, are those of the same campaign on one device
    alone = dataclasses.replace(load_config(config).profile, log_dir=tmp_path / "alone")
    assert run_test_config(alone).passed == 8

    def files(folder: Path) -> list[str]:
        return sorted(str(p.relative_to(folder)) for p in folder.glob("*/*.csv"))

    assert files(log_dir) == files(tmp_path / "alone") != []
    for name in files(log_dir):
        lab_lines = (log_dir / name).read_text().splitlines()
        one_lines = (tmp_path / "alone" / name).read_text().splitlines()
        assert lab_lines[0] == one_lines[0]  # the same header
        if name.endswith("-gt.csv"):
            columns = ["test_var", "bs", "dataset", "net_name", "model", "stage", "status", "passed"]
            read = [pd.read_csv(folder / name, sep="|")[columns].sort_values(["bs"]).reset_index(drop=True)
                    for folder in (log_dir, tmp_path / "alone")]
            pd.testing.assert_frame_equal(*read)  # the same tests, statuses and what names them, once each
    assert rows.keys() == _rows(tmp_path / "alone").keys()


@pytest.mark.slow
def test_a_lab_campaign_starts_no_test_once_its_budget_is_spent(
        tmp_path: Path, model_dir: Path, write_test_config, cluster: str) -> None:
    config = _campaign(tmp_path, model_dir, write_test_config, "lab", [2, 8])
    settings = dataclasses.replace(load_config(config).profile, cluster=cluster, budget_minutes=1e-5)
    summary = run_test_config(settings)  # each device starts at most the one test it took before any ended
    assert 1 <= len(summary.results) <= len(DEVICES) and summary.not_run == 8 - len(summary.results)
    assert sum(len(rows) for rows in _rows(tmp_path / "lab").values()) == len(summary.results)


@pytest.mark.slow
def test_a_lab_campaign_without_ray_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    config = tmp_path / "config.ini"
    config.write_text(f"[profile]\ntest_config = {tmp_path / 't.ini'}\ndevices = cpu_a\n")
    hide_ray = ("import importlib.abc, sys\n"
                "class NoRay(importlib.abc.MetaPathFinder):\n"
                "    def find_spec(self, name, path, target=None):\n"
                "        if name == 'ray' or name.startswith('ray.'):\n"
                "            raise ModuleNotFoundError(\"No module named 'ray'\")\n"
                "sys.meta_path.insert(0, NoRay())\n"
                "from perf4sight.cli import main; sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", hide_ray, "profile", "run", "--config", str(config),
                           "--ray", "auto"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert str(config) in line and "pip install 'perf4sight[ray]'" in line


@pytest.mark.parametrize("devices, problem", [
    ([], "name the Ray resource of each device"),
    (["cpu a"], "is not a Ray resource name"),
    (["cpu_a:3-1"], "no cores from 3 to 1"),
    (["cpu_a", "cpu_a:0"], "cpu_a is named twice"),
])
def test_bad_devices_are_one_line_naming_the_key(devices: list[str], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_devices(devices)


def test_devices_name_their_cores() -> None:
    assert [(d.name, d.cores) for d in parse_devices(["orin", "cpu_a:0", "cpu_b:2-3"])] == [
        ("orin", None), ("cpu_a", (0,)), ("cpu_b", (2, 3))]


@pytest.mark.slow
def test_a_cluster_address_where_no_head_answers_is_one_line_in_seconds(tmp_path: Path) -> None:
    with socket.socket() as free:  # a port nothing listens on once closed
        free.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{free.getsockname()[1]}"
    config = tmp_path / "config.ini"
    config.write_text(f"[profile]\ntest_config = {tmp_path / 't.ini'}\ndevices = cpu_a\n")
    started = time.monotonic()
    done = subprocess.run(CLI + ["profile", "run", "--config", str(config), "--ray", address],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert f"cluster = {address}: no Ray head answers there" in line
    assert time.monotonic() - started < 30  # not Ray's minutes of retries
