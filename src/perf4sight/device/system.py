"""What the operating system says about memory and CPU time: psutil where it is
installed, the kernel's /proc files otherwise (a Jetson's Python has no psutil)."""

import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

try:
    import psutil
except ImportError:  # a device with only the standard library and torch
    psutil = None

__all__ = [
    "BYTES_PER_MIB",
    "cpu_busy_s",
    "cpu_count",
    "own_cpu_s",
    "own_cpus",
    "physical_cores",
    "read_meminfo",
    "rss_mib",
    "system_memory_mib",
]

BYTES_PER_MIB = 2 ** 20
_MEMINFO = Path("/proc/meminfo")
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# The kernel's busy states (/proc/stat's order, psutil's names): guest time is already in
# user time; steal is time a hypervisor gave to another machine.
_BUSY = ("user", "nice", "system", "irq", "softirq", "steal")
_PROC_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def read_meminfo(path: Union[str, Path] = _MEMINFO) -> Dict[str, float]:
    """A /proc file of `field: value kB` lines (/proc/meminfo, /proc/self/status) as {field: MiB}."""
    values: Dict[str, float] = {}
    for line in Path(path).read_text().splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[name.strip()] = int(parts[0]) / 1024 if parts[-1] == "kB" else int(parts[0])
    return values


def system_memory_mib() -> Dict[str, float]:
    """The machine's memory: `total`, `available` and `free`, MiB."""
    if psutil is not None:
        memory = psutil.virtual_memory()
        return {"total": memory.total / BYTES_PER_MIB, "available": memory.available / BYTES_PER_MIB,
                "free": memory.free / BYTES_PER_MIB}
    info = read_meminfo()
    return {"total": info["MemTotal"], "available": info.get("MemAvailable", info["MemFree"]),
            "free": info["MemFree"]}


def rss_mib(pid: Optional[int] = None) -> Optional[float]:
    """Resident memory of process `pid` (this one by default), MiB; None once it is gone."""
    pid = os.getpid() if pid is None else pid
    if psutil is not None:
        try:
            return psutil.Process(pid).memory_info().rss / BYTES_PER_MIB
        except psutil.Error:
            return None
    try:
        pages = int(Path("/proc/{}/statm".format(pid)).read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * _PAGE_BYTES / BYTES_PER_MIB


def cpu_busy_s(cpus: Optional[Sequence[int]] = None) -> Optional[float]:
    """CPU seconds spent on anything but idling since boot, summed over `cpus` (logical CPU
    numbers; all by default), None where neither psutil nor /proc/stat is there."""
    if psutil is not None:
        per_cpu = psutil.cpu_times(percpu=True)
        chosen = per_cpu if cpus is None else [per_cpu[cpu] for cpu in cpus if cpu < len(per_cpu)]
        return sum(getattr(times, name, 0.0) for times in chosen for name in _BUSY)
    wanted = None if cpus is None else {"cpu{}".format(cpu) for cpu in cpus}
    busy = 0.0
    try:
        with open("/proc/stat") as handle:
            for line in handle:  # a line per CPU, `cpuN ...`, after the total's `cpu ...`
                fields = line.split()
                cpu_line = fields and fields[0].startswith("cpu") and fields[0] != "cpu"
                if cpu_line and (wanted is None or fields[0] in wanted):
                    ticks = dict(zip(_PROC_STAT_FIELDS, (int(f) for f in fields[1:])))
                    busy += sum(ticks.get(name, 0) for name in _BUSY) / _TICKS_PER_S
    except OSError:
        return None
    return busy


def own_cpus() -> List[int]:
    """The logical CPUs this process may run on: its affinity (a lab's CPU device is its share
    of the cores), all of them where the system does not say."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(cpu_count()))


def own_cpu_s() -> float:
    """CPU seconds this process has used (user and system)."""
    times = os.times()
    return times[0] + times[1]


def cpu_count() -> int:
    """Logical CPUs."""
    return os.cpu_count() or 1


def physical_cores() -> Optional[int]:
    """Physical cores, where psutil can tell."""
    return psutil.cpu_count(logical=False) if psutil is not None else None
