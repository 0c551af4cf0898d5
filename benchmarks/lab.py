"""A lab campaign on Ray against the same campaign on one device, and its faults.

On a Ray cluster started on this machine (`tests/ray_cluster.py`) whose custom resources are
CPU devices of one core each:

1. timing: the same campaign (CPU zoo specs, memory and latency) on this machine's device
   without Ray (pinned to one core), on one lab device (Ray, one core), and on two lab
   devices (one core each): wall times, Ray's overhead per test, and each device's share;
2. faults: a campaign whose driver runs as `perf4sight profile run --ray` is hit by KILLS
   kills of a device's process and DRIVER_KILLS of the driver, the driver started again after
   each; then every test must have exactly one row.

    .venv/bin/python benchmarks/lab.py [--skip-timing] [--skip-faults]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from ray_cluster import local_cluster  # noqa: E402

from perf4sight.config import ProfileSettings  # noqa: E402
from perf4sight.device.logs import LAB_DEVICE  # noqa: E402
from perf4sight.profile import read_journal, run_test_config  # noqa: E402

ZOO = ROOT / "benchmarks" / "data" / "cpu_zoo" / "models"
TIMED = ("resnet18", "squeezenet1_1")
FAULTED = ("squeezenet1_1", "mobilenet_v3_small")
LEVELS = (45, 90)
KILLS, DRIVER_KILLS = 10, 3
CLI = [sys.executable, "-c", "import sys; from perf4sight.cli import main; sys.exit(main(sys.argv[1:]))"]


def _test_config(path: Path, networks: tuple[str, ...], bs: list[int]) -> Path:
    sections = [f"[{net.upper()}]\ntest_var= ['memory', 'latency']\nbs= {bs!r}\ndataset= ['spec']\n"
                f"net_name= [{net!r}]\nexec_stage= ['training']\n"
                f"model= {[str(ZOO / f'{net}_{level}.json') for level in LEVELS]!r}\n" for net in networks]
    path.write_text("\n".join(sections))
    return path


def _rows(log_dir: Path) -> list[dict]:
    return [row for journal in sorted(log_dir.glob("*/*.csv")) if not journal.name.endswith("-gt.csv")
            for row in read_journal(journal)]


def timing(work: Path) -> None:
    test_config = _test_config(work / "timed.ini", TIMED, [2, 8])
    base = ProfileSettings(test_config=test_config, iterations=3, log_dir=work / "none")
    runs: dict[str, tuple[float, int]] = {}
    with local_cluster({"cpu_a": 1, "cpu_b": 1}) as address:
        previous = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {0})  # this process and its worker on one core, as a lab device
        start = time.perf_counter()
        summary = run_test_config(dataclasses.replace(base, log_dir=work / "alone"))
        runs["this machine's device, no Ray (core 0)"] = (time.perf_counter() - start, summary.passed)
        os.sched_setaffinity(0, previous)
        for label, devices in (("one lab device (core 0)", ["cpu_a:0"]),
                               ("two lab devices (cores 0 and 1)", ["cpu_a:0", "cpu_b:1"])):
            start = time.perf_counter()
            summary = run_test_config(dataclasses.replace(base, cluster=address, devices=devices,
                                                          log_dir=work / label.split()[0]))
            runs[label] = (time.perf_counter() - start, summary.passed)
    shares = [row["params"][LAB_DEVICE] for row in _rows(work / "two")]
    tests = runs["one lab device (core 0)"][1]
    alone, one, two = (seconds for seconds, _ in runs.values())
    print(f"\ntiming: {tests} tests ({', '.join(TIMED)} at levels {LEVELS}, bs 2 and 8, memory and latency)")
    print("| campaign | tests passed | wall time (s) |\n| --- | ---: | ---: |")
    for label, (seconds, passed) in runs.items():
        print(f"| {label} | {passed} | {seconds:.1f} |")
    print(f"Ray's overhead per test (one lab device against no Ray): {(one - alone) / tests:.2f} s")
    print(f"two devices against one lab device: {one / two:.2f}x; against no Ray: {alone / two:.2f}x")
    print("tests per device: " + ", ".join(f"{d} {shares.count(d)}" for d in sorted(set(shares))))


def _device_processes() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"])
            if " ".join(p.info["cmdline"] or []).startswith("ray::LabDevice") and p.children()]


def faults(work: Path) -> None:
    test_config = _test_config(work / "faulted.ini", FAULTED, [2, 4, 8])
    config = work / "faulted-config.ini"
    log_dir = work / "faulted"
    config.write_text(f"[profile]\ndevice = cpu\nlog_dir = {log_dir}\ntest_config = {test_config}\niterations = 1\n"
                      "devices = ['cpu_a:0', 'cpu_b:1']\n")
    expected = 2 * len(FAULTED) * len(LEVELS) * 3
    print(f"\nfaults: {expected} tests ({', '.join(FAULTED)} at levels {LEVELS}, bs 2, 4, 8, memory and latency)")
    device_kills = driver_kills = drivers = 0
    with local_cluster({"cpu_a": 1, "cpu_b": 1}) as address:
        command = CLI + ["--quiet", "profile", "run", "--config", str(config), "--ray", address]
        start = time.perf_counter()
        while True:
            driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            drivers += 1
            while driver.poll() is None:
                seen = len(_rows(log_dir))
                while driver.poll() is None and len(_rows(log_dir)) <= seen:  # a new row since the last fault
                    time.sleep(0.05)
                if driver.poll() is not None:
                    break
                if device_kills >= (driver_kills + 1) * KILLS // (DRIVER_KILLS + 1) and driver_kills < DRIVER_KILLS:
                    driver.send_signal(signal.SIGKILL)
                    driver_kills += 1
                    break
                busy = _device_processes()
                if busy and device_kills < KILLS:
                    busy[0].kill()
                    device_kills += 1
            _, stderr = driver.communicate()
            if driver.returncode == 0:
                break
            if driver.returncode != -signal.SIGKILL:
                raise SystemExit(f"driver failed ({driver.returncode}): {stderr}")
        seconds = time.perf_counter() - start
        report(log_dir, expected, "after the faults")
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)  # resumed, no fault
        report(log_dir, expected, "after a run without faults (retry_failed runs the crashed tests again)")
    print(f"{drivers} drivers, {seconds:.0f} s; device processes killed: {device_kills}, drivers killed: {driver_kills}")


def report(log_dir: Path, expected: int, when: str) -> None:
    rows = _rows(log_dir)
    by_test: dict[tuple, list[dict]] = {}
    for row in rows:
        by_test.setdefault(tuple(sorted((k, v) for k, v in row["params"].items() if k != LAB_DEVICE)), []).append(row)
    passed_twice = sum(sum(r["status"] == "ok" for r in test_rows) > 1 for test_rows in by_test.values())
    gt_rows = sum(len(gt.read_text().splitlines()) - 1 for gt in log_dir.glob("*/*-gt.csv"))
    last = [test_rows[-1]["status"] for test_rows in by_test.values()]
    print(f"{when}: tests with a row {len(by_test)} of {expected} (lost: {expected - len(by_test)}); journal rows "
          f"{len(rows)}; tests measured twice {passed_twice}; -gt.csv rows {gt_rows}; last statuses: "
          + ", ".join(f"{status} {last.count(status)}" for status in sorted(set(last))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--skip-faults", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: the cluster is stopped too
    with tempfile.TemporaryDirectory(prefix="p4s-lab-") as work:
        if not args.skip_timing:
            timing(Path(work))
        if not args.skip_faults:
            faults(Path(work))


if __name__ == "__main__":
    main()
