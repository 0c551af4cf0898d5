"""The device package runs where perf4sight cannot: Python 3.6, PyTorch 1.8, no psutil."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

import perf4sight.device
from perf4sight.device import system
from perf4sight.device.backends import CpuBackend, clock_state
from perf4sight.device.environment import FRESH_PAGES_COST
from perf4sight.device.worker import WorkerProcess
from old_stacks import StackUnavailable, find_interpreter

DEVICE = Path(perf4sight.device.__file__).parent
MODULES = sorted(DEVICE.glob("*.py"))
# What a Jetson on JetPack 4.6 has besides the standard library, and what is used where present.
REQUIRED = {"torch"}
OPTIONAL = {"psutil", "pynvml", "torchvision"}


def test_device_package_needs_nothing_newer_than_python_36() -> None:
    """vermin finds the syntax and library APIs each module needs (3.7's `capture_output`,
    3.8's walrus, 3.9's `list[int]`...); any above 3.6 fails the test."""
    vermin = shutil.which("vermin", path=str(Path(sys.executable).parent)) or shutil.which("vermin")
    if vermin is None:
        pytest.skip("vermin not installed (pip install -e '.[test]')")
    done = subprocess.run([vermin, "--target=3.6-", "--no-tips", "--violations", "--eval-annotations", str(DEVICE)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_device_module_compiles_with_python_36(tmp_path: Path) -> None:
    try:
        python36 = find_interpreter("3.6")
    except StackUnavailable as exc:
        pytest.skip(str(exc))
    for module in MODULES:
        done = subprocess.run([str(python36), "-c", "import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')",
                               str(module)], capture_output=True, text=True)
        assert done.returncode == 0, f"{module.name}: {done.stderr}"


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(top-level module, imported under `except ImportError`) of each absolute import."""
    tree = ast.parse(path.read_text())
    guarded = {id(node) for handler in ast.walk(tree) if isinstance(handler, ast.Try)
               for node in ast.walk(handler) if any(
                   isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in handler.handlers)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], id(node) in guarded) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append((node.module.split(".")[0], id(node) in guarded))
    return found


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.name)
def test_device_modules_import_only_the_standard_library_and_torch(module: Path) -> None:
    """Relative imports within the package (the bundle copies it under another name), torch,
    and psutil/NVML/torchvision only where an ImportError is handled."""
    for name, guarded in _imports(module):
        if name in sys.stdlib_module_names or name in REQUIRED:
            continue
        assert name in OPTIONAL and guarded, f"{module.name} imports {name}"
    assert "from __future__ import annotations" not in module.read_text()  # 3.7


def test_stdlib_readings_match_psutil(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without psutil, /proc gives the same memory and CPU figures."""
    with_psutil = (system.rss_mib(), system.system_memory_mib(), system.cpu_busy_s())
    monkeypatch.setattr(system, "psutil", None)
    rss, memory, busy = system.rss_mib(), system.system_memory_mib(), system.cpu_busy_s()
    assert rss == pytest.approx(with_psutil[0], abs=8)
    assert memory["total"] == pytest.approx(with_psutil[1]["total"], rel=1e-6)
    assert memory["available"] == pytest.approx(with_psutil[1]["available"], rel=0.05)
    assert busy == pytest.approx(with_psutil[2], rel=0.01)
    assert system.rss_mib(psutil.Process().pid) == pytest.approx(rss, abs=8)


def _freq(folder: Path, low_name: str, high_name: str, low: int, high: int) -> None:
    folder.mkdir(parents=True)
    (folder / low_name).write_text(f"{low}\n")
    (folder / high_name).write_text(f"{high}\n")


def test_clocks_locked_as_jetson_clocks_leaves_them(tmp_path: Path) -> None:
    """A TX2's sysfs, faked: every CPU and the GPU at min = max is locked; one CPU free to
    scale is not; no frequency readable is unknown."""
    for cpu in range(2):
        _freq(tmp_path / f"devices/system/cpu/cpu{cpu}/cpufreq", "scaling_min_freq", "scaling_max_freq",
              2035200, 2035200)
    gpu = tmp_path / "class/devfreq/17000000.gp10b"
    _freq(gpu, "min_freq", "max_freq", 1300500000, 1300500000)
    _freq(tmp_path / "class/devfreq/memory-controller", "min_freq", "max_freq", 40800000, 1866000000)
    assert clock_state(tmp_path) == {"cpu_clocks_locked": True, "gpu_clocks_locked": True, "clocks_locked": True}
    # a core the power mode switched off (a TX2's Denver cores in mode 3) keeps its range
    offline = tmp_path / "devices/system/cpu/cpu2"
    _freq(offline / "cpufreq", "scaling_min_freq", "scaling_max_freq", 345600, 2035200)
    (offline / "online").write_text("0\n")
    assert clock_state(tmp_path)["clocks_locked"] is True
    (offline / "online").write_text("1\n")
    assert clock_state(tmp_path)["cpu_clocks_locked"] is False
    (offline / "cpufreq" / "scaling_min_freq").write_text("2035200\n")
    (gpu / "min_freq").write_text("114750000\n")
    assert clock_state(tmp_path)["clocks_locked"] is False
    assert clock_state(tmp_path / "nothing")["clocks_locked"] is None


@pytest.mark.slow
def test_a_restarted_worker_keeps_its_first_start_facts_and_skips_the_probes() -> None:
    """Each memory test restarts the worker; the CPU's fresh-pages probe runs at the first only."""
    assert FRESH_PAGES_COST in CpuBackend().setup()
    assert FRESH_PAGES_COST not in CpuBackend().setup(measure=False)
    worker = WorkerProcess("cpu")
    try:
        first = worker.start()
        assert first[FRESH_PAGES_COST] >= 0 and worker.options == {"device": "cpu", "gpu_id": 0, "loader": None}
        worker.stop()
        assert worker.start() is first and worker.alive
    finally:
        worker.stop()
