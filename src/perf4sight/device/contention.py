"""How much of the host's CPU other processes took while a test was timed.

Latency is wall time, so any other job on the machine lengthens it: on a CPU device it
takes cores from the iteration, on a GPU it delays the kernel launches that small batches
wait on. Nothing in a log row would show it, and a model fitted on such rows is off for
every network. The share is measured from the kernel's counters (the busy time of the CPUs
this process may run on, hypervisor steal included, minus this process's own: a lab's CPU
device pinned to its cores is not disturbed by its neighbour on other cores), so the
campaign can say which latencies to distrust.
"""

import time
from typing import Any, Optional

from .system import cpu_busy_s, own_cpu_s, own_cpus

__all__ = ["BUSY_ELSEWHERE_WARNING", "CpuElsewhere"]

# The share of the machine's CPU time taken by other processes above which a timed test
# is reported as disturbed.
BUSY_ELSEWHERE_WARNING = 0.2
# The kernel counts CPU time in ticks (10 ms): over a shorter block the share is noise.
_SHORTEST_S = 0.25


class CpuElsewhere:
    """A context manager; `share` is then the fraction of its CPUs' time (0 to 1) that
    processes other than this one were busy during the block, or None for a block too
    short to tell (or a system that does not say)."""

    def __init__(self) -> None:
        self.share: Optional[float] = None

    def __enter__(self) -> "CpuElsewhere":
        self._cpus = own_cpus()
        self._start = (time.perf_counter(), cpu_busy_s(self._cpus), own_cpu_s())
        return self

    def __exit__(self, *exc: Any) -> None:
        wall, busy, own = time.perf_counter(), cpu_busy_s(self._cpus), own_cpu_s()
        if wall - self._start[0] < _SHORTEST_S or busy is None or self._start[1] is None:
            return
        capacity = (wall - self._start[0]) * len(self._cpus)
        others = (busy - self._start[1]) - (own - self._start[2])
        self.share = min(1.0, max(0.0, others / capacity))
