"""Memory readings: the anonymous peak of this process and a Jetson's /proc/meminfo (faked)."""

from __future__ import annotations

import mmap
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from perf4sight.device.backends import DEVICE_ALIASES, backend_name, make_backend
from perf4sight.device.memory import AnonymousPeak, UnifiedMemoryMeter, release_free_memory
from perf4sight.device.system import read_meminfo
from perf4sight.errors import ConfigError

MEMINFO = """MemTotal:        8038468 kB
MemFree:         {free} kB
MemAvailable:    {avail} kB
Buffers:           81500 kB
Cached:          1520000 kB
HugePages_Total:       0
"""


def _write(path: Path, avail_kib: int, free_kib: int) -> None:
    """Replace the file in one step, as the kernel's /proc/meminfo reads are atomic."""
    temporary = path.with_name("meminfo.tmp")
    temporary.write_text(MEMINFO.format(avail=avail_kib, free=free_kib))
    os.replace(temporary, path)


def test_meminfo_is_read_in_mib(tmp_path: Path) -> None:
    path = tmp_path / "meminfo"
    _write(path, 6 * 1024 * 1024, 5 * 1024 * 1024)
    info = read_meminfo(path)
    assert info["MemTotal"] == pytest.approx(8038468 / 1024)
    assert info["MemAvailable"] == 6 * 1024 and info["MemFree"] == 5 * 1024
    assert info["HugePages_Total"] == 0


def test_unified_meter_takes_the_peak_over_idle(tmp_path: Path) -> None:
    """A fake /proc/meminfo whose available memory dips by 1500 MiB, then recovers."""
    path = tmp_path / "meminfo"
    idle_avail = 7000 * 1024
    _write(path, idle_avail, 5000 * 1024)
    meter = UnifiedMemoryMeter(path)
    meter.begin()

    def training() -> None:
        for used_mib in (300, 900, 1500, 700, 200):
            _write(path, idle_avail - used_mib * 1024, 4000 * 1024)
            time.sleep(0.05)

    thread = threading.Thread(target=training)
    thread.start()
    thread.join()
    assert meter.end() == pytest.approx(1500)
    assert meter.idle["MemAvailable"] == 7000 and meter.idle["MemFree"] == 5000


def test_anonymous_peak_sees_a_freed_allocation_and_resets() -> None:
    peak = AnonymousPeak()
    assert peak.exact  # Linux: the tests run where the status fields are
    release_free_memory()
    peak.reset()
    block = np.ones(300 * 2**20 // 8)  # 300 MiB, touched
    del block
    release_free_memory()
    assert peak.peak_mib() == pytest.approx(300, abs=30)
    peak.reset()
    assert peak.peak_mib() < 30  # the next test starts from a clean high-water mark


def test_anonymous_peak_leaves_out_the_pages_of_a_file(tmp_path: Path) -> None:
    """A library's code the kernels map in is a file's pages: read, mapped, then unmapped before
    the reading, they are not in it, while a buffer allocated meanwhile is."""
    data = tmp_path / "library.so"
    data.write_bytes(os.urandom(200 * 2**20))  # in the page cache once written
    peak = AnonymousPeak()
    release_free_memory()
    peak.reset()
    with data.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        checksum = sum(mapped[offset] for offset in range(0, len(mapped), 4096))  # every page resident
        block = np.ones(100 * 2**20 // 8)
        time.sleep(0.05)  # sampled
    del block
    assert checksum >= 0
    assert peak.peak_mib() == pytest.approx(100, abs=20)


def test_device_names_and_aliases() -> None:
    assert backend_name("tx2") == "jetson" and backend_name("2080ti") == "cuda"
    assert backend_name("CPU") == "cpu"
    assert set(DEVICE_ALIASES.values()) <= {"cuda", "jetson"}
    assert make_backend("cpu").device.type == "cpu"
    with pytest.raises(ConfigError, match="unknown device 'tpu'"):
        backend_name("tpu")
