"""How much of the host's CPU other processes took while a test was timed.

Latency is wall time, so any other job on the machine lengthens it: on a CPU device it
takes cores from the iteration, on a GPU it delays the kernel launches that small batches
wait on. Nothing in a log row would show it, and a model fitted on such rows is off for
every network. The share is measured from the kernel's counters (all CPUs' busy time,
hypervisor steal included, minus this process's own), so the campaign can say which
latencies to distrust.
"""

from __future__ import annotations

import time
from types import TracebackType

import psutil

__all__ = ["BUSY_ELSEWHERE_WARNING", "CpuElsewhere"]

# The share of the machine's CPU time taken by other processes above which a timed test
# is reported as disturbed.
BUSY_ELSEWHERE_WARNING = 0.2
# The kernel counts CPU time in ticks (10 ms): over a shorter block the share is noise.
_SHORTEST_S = 0.25


def _busy_s(times: object) -> float:
    """CPU seconds spent on anything but idling, summed over the CPUs (guest time is
    already in user time; steal is time a hypervisor gave to another machine)."""
    return sum(getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))


class CpuElsewhere:
    """A context manager; `share` is then the fraction of all CPUs' time (0 to 1) that
    processes other than this one were busy during the block, or None for a block too
    short to tell."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self.share: float | None = None

    def _own_s(self) -> float:
        own = self._process.cpu_times()
        return own.user + own.system

    def __enter__(self) -> CpuElsewhere:
        self._start = (time.perf_counter(), _busy_s(psutil.cpu_times()), self._own_s())
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        wall, busy, own = time.perf_counter(), _busy_s(psutil.cpu_times()), self._own_s()
        if wall - self._start[0] < _SHORTEST_S:
            return
        capacity = (wall - self._start[0]) * (psutil.cpu_count() or 1)
        others = (busy - self._start[1]) - (own - self._start[2])
        self.share = min(1.0, max(0.0, others / capacity))
