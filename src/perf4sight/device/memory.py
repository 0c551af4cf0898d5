"""Memory readings the device backends share.

The C library's allocator is left as a user's training script leaves it: its settings
decide how much of an iteration's memory is mapped afresh each time, so changing them
would time and measure a training no user runs. A memory test has a worker of its own
(`campaign.py`), so nothing an earlier test left in the heap is in its reading; the
resident high-water mark is reset before the test (Linux `clear_refs`), and freed heap
pages are handed back to the OS after every test (`malloc_trim`). Figures are MiB.
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
    "release_free_memory",
]

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


@functools.lru_cache(maxsize=None)
def _libc() -> Optional[ctypes.CDLL]:
    """glibc, looked up once: `find_library` runs `ldconfig`, and memory is released after every test."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None


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
