"""Memory readings the device backends share.

A worker runs many tests, so every reading must be the test's own: the resident
high-water mark is reset before each test (Linux `clear_refs`), freed heap pages are
handed back to the OS after each one (`malloc_trim`), and large blocks always get their
own mapping (a fixed `M_MMAP_THRESHOLD`), so a small test after a big one is not served
from pages the big one left resident. Figures are MiB.
"""

import ctypes
import ctypes.util
import functools
import gc
import threading
from pathlib import Path
from typing import Callable, Dict, Optional, Union

from .system import read_meminfo, rss_mib

__all__ = [
    "ResidentPeak",
    "PeakSampler",
    "UnifiedMemoryMeter",
    "fix_malloc_mmap_threshold",
    "release_free_memory",
]

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 128 * 1024


@functools.lru_cache(maxsize=None)
def _libc() -> Optional[ctypes.CDLL]:
    """glibc, looked up once: `find_library` runs `ldconfig`, and memory is released after every test."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


def fix_malloc_mmap_threshold() -> bool:
    """Give every block over 128 KiB its own mapping, returned to the OS when freed.

    glibc otherwise raises the threshold after big frees, and later tensors come from a
    heap that earlier tests grew. Returns False where glibc is not the allocator.
    """
    libc = _libc()
    return bool(libc and libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES))


def release_free_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc only)."""
    gc.collect()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def _status_mib(field: str) -> float:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise OSError("{} has no {}".format(_STATUS, field))


# How often a peak sampler reads: every millisecond catches a layer's allocation.
SAMPLE_INTERVAL_S = 0.001


class PeakSampler:
    """The largest value a reading takes while running, sampled by a background thread."""

    def __init__(self, read: Callable[[], float]) -> None:
        self._read = read
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[Exception] = None
        self.peak = float("-inf")

    def start(self) -> None:
        self.peak = self._read()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.wait(SAMPLE_INTERVAL_S):
                self.peak = max(self.peak, self._read())
        except Exception as exc:  # handed to stop(): a peak with a gap must not pass silently
            self._error = exc

    def stop(self) -> float:
        """Stop sampling (with one last reading); returns the peak."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        self.peak = max(self.peak, self._read())
        return self.peak


class ResidentPeak:
    """Peak resident memory of this process since `reset()`.

    Uses the kernel's own high-water mark (VmHWM, reset through /proc/self/clear_refs),
    which no sampling can miss; where that is unavailable, samples the RSS instead.
    """

    def __init__(self) -> None:
        self._sampler: Optional[PeakSampler] = None
        self.exact = _can_reset_hwm()

    def rss_mib(self) -> float:
        return rss_mib() or 0.0

    def reset(self) -> None:
        if self.exact:
            _CLEAR_REFS.write_text("5")
        else:
            self._sampler = PeakSampler(self.rss_mib)
            self._sampler.start()

    def peak_mib(self) -> float:
        if self.exact:
            return _status_mib("VmHWM")
        if self._sampler is None:
            return self.rss_mib()
        peak = self._sampler.stop()
        self._sampler = None
        return peak


def _can_reset_hwm() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
        _status_mib("VmHWM")
    except OSError:
        return False
    return True


def _used_mib(meminfo: Dict[str, float]) -> float:
    return meminfo["MemTotal"] - meminfo["MemAvailable"]


class UnifiedMemoryMeter:
    """System memory used (MemTotal - MemAvailable) on a device whose CPU and GPU share it.

    `begin()` reads the idle figures before the model is built; `end()` returns the peak
    used during the test minus that idle value, as the original profiler on the TX2 did.
    """

    def __init__(self, meminfo_path: Union[str, Path] = "/proc/meminfo") -> None:
        self.meminfo_path = Path(meminfo_path)
        self._sampler = PeakSampler(self.used_mib)
        self.idle_used_mib = 0.0
        self.idle: Dict[str, float] = {}

    def used_mib(self) -> float:
        return _used_mib(read_meminfo(self.meminfo_path))

    def begin(self) -> None:
        self.idle = read_meminfo(self.meminfo_path)
        self.idle_used_mib = _used_mib(self.idle)
        self._sampler.start()

    def end(self) -> float:
        """Peak used since `begin()` minus the idle value, MiB."""
        return self._sampler.stop() - self.idle_used_mib
