"""Memory readings the device backends share.

The C library's allocator is left as a user's training script leaves it: its settings
decide how much of an iteration's memory is mapped afresh each time, so changing them
would time and measure a training no user runs. A memory test has a worker of its own
(`campaign.py`), so nothing an earlier test left in the heap is in its reading; the
high-water mark is reset before the test (Linux `clear_refs`), and freed heap pages are
handed back to the OS after every test (`malloc_trim`). Figures are MiB.
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
    "AnonymousPeak",
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


def _mapped_mib(status: Dict[str, float]) -> float:
    """Resident pages of files and shared memory: the libraries' code the kernels map in, which
    the system reclaims at will and whose share depends on what its page cache holds."""
    return status["RssFile"] + status["RssShmem"]


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


class AnonymousPeak:
    """Peak anonymous memory of this process since `reset()`, above its value at `reset()`: the
    heap and the mappings of tensors, which a training step needs; not the pages of files.

    Linux keeps a high-water mark of all resident memory only (VmHWM, reset through
    /proc/self/clear_refs), so two lower bounds are read and the larger kept: the anonymous
    memory sampled every millisecond (`RssAnon`), and the high-water mark less the most file
    and shared pages sampled (a short peak between samples is still caught). Where the status
    fields are unavailable, the resident memory is sampled instead.
    """

    def __init__(self) -> None:
        self.exact = _can_reset_hwm()
        self._sampler = None  # type: Optional[PeakSampler]
        self._idle_mib = 0.0
        self._mapped_peak_mib = 0.0

    def _anonymous_mib(self) -> float:
        """The anonymous memory now; the file and shared pages' peak kept on the side (one
        reading of the status file per sample, by the sampler's one thread)."""
        if not self.exact:
            return rss_mib() or 0.0
        status = read_meminfo(_STATUS)
        self._mapped_peak_mib = max(self._mapped_peak_mib, _mapped_mib(status))
        return status["RssAnon"]

    def reset(self) -> None:
        if self.exact:
            _CLEAR_REFS.write_text("5")
        self._mapped_peak_mib = 0.0
        self._sampler = PeakSampler(self._anonymous_mib)
        self._sampler.start()
        self._idle_mib = self._sampler.peak

    def peak_mib(self) -> float:
        """The peak since `reset()` above the value at `reset()`; sampling stops."""
        if self._sampler is None:
            return 0.0
        peak = self._sampler.stop()
        self._sampler = None
        if self.exact:
            peak = max(peak, read_meminfo(_STATUS)["VmHWM"] - self._mapped_peak_mib)
        return peak - self._idle_mib


def _can_reset_hwm() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
        status = read_meminfo(_STATUS)
    except OSError:
        return False
    return {"VmHWM", "RssAnon", "RssFile", "RssShmem"} <= status.keys()


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
