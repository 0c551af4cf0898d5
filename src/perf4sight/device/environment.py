"""The environment a campaign ran in, recorded once per campaign (per device of a lab) beside its logs.

Figures from two software stacks or power modes are not comparable, so every campaign
writes what it ran on: library versions, device, driver, power mode, clocks, CPU. What is
read back of a record (the campaign's warning about unlocked clocks, the host's fit: the
device's PyTorch and name) is `Environment`, read from the keys its writers use: this
module's `environment_record` and the backends' `setup`.
"""

import json
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, NamedTuple, Optional

import torch

from .errors import LogFormatError
from .files import write_text
from .system import physical_cores, system_memory_mib

__all__ = ["CLOCKS_LOCKED", "DEVICE_NAME", "FRESH_PAGES_COST", "POWER_MODE", "Environment", "environment_record",
           "write_environment"]

# The keys of a record that are read back (`Environment`): written here (PyTorch's version, the
# host's name) and by the backends' `setup` (the device's name, power mode, clocks).
TORCH, HOSTNAME, DEVICE_NAME, POWER_MODE, CLOCKS_LOCKED = "torch", "hostname", "device_name", "power_mode", "clocks_locked"
# What a training tensor in fresh pages costs per MiB on the device (the CPU backend's probe,
# `backends.fresh_pages_ms_per_mib`; absent where tensors come from a caching allocator).
FRESH_PAGES_COST = "fresh_pages_ms_per_mib"


class Environment(NamedTuple):
    """What is read back of an environment record: the PyTorch the device ran, the device's
    name (the host's where its backend found none), its power mode, whether its clocks
    were locked and what a tensor in fresh pages costs per MiB (None where not known)."""

    torch: str
    device: Optional[str]
    power_mode: Optional[str]
    clocks_locked: Optional[bool]
    fresh_pages_ms_per_mib: Optional[float] = None

    @classmethod
    def of(cls, record: Any, where: str) -> "Environment":
        """The fields of `record` (a parsed file, or one just made); LogFormatError naming
        `where` for a record that names no PyTorch version."""
        if not isinstance(record, dict) or not isinstance(record.get(TORCH), str):
            raise LogFormatError("{}: an environment record without a '{}' version".format(where, TORCH))
        device = record.get(DEVICE_NAME) or record.get(HOSTNAME)
        fresh = record.get(FRESH_PAGES_COST)
        if fresh is not None and (isinstance(fresh, bool) or not isinstance(fresh, (int, float))
                                  or not 0 <= fresh < float("inf")):
            raise LogFormatError("{}: {}={!r}, expected a number of milliseconds >= 0".format(where, FRESH_PAGES_COST, fresh))
        return cls(record[TORCH], None if device is None else str(device), record.get(POWER_MODE),
                   record.get(CLOCKS_LOCKED), None if fresh is None else float(fresh))


def environment_record(worker_facts: Dict[str, Any], settings: Dict[str, Any]) -> Dict[str, Any]:
    """Host and library facts merged with what the worker found on its device."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    record = {
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": settings,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        HOSTNAME: platform.node(),
        "cpu_cores_logical": os.cpu_count(),
        "cpu_cores_physical": physical_cores(),
        "memory_total_mib": system_memory_mib()["total"],
        TORCH: torch.__version__,
        "torchvision": _version("torchvision"),
        "psutil": _version("psutil"),
        "torch_cuda": torch.version.cuda,
        "cudnn": cudnn,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    record.update(worker_facts)
    return record


def _version(name: str) -> Optional[str]:
    """The version of an optional library, None where it is not installed: read from its
    metadata where Python has `importlib.metadata` (3.8+), since importing torchvision takes
    seconds; imported on Python 3.6 or where the metadata is missing."""
    try:
        from importlib.metadata import PackageNotFoundError, version  # novermin: 3.6 takes the except
    except ImportError:  # Python 3.6 and 3.7 (JetPack 4)
        pass
    else:
        try:
            return version(name)
        except PackageNotFoundError:
            pass
    try:
        module = __import__(name)
    except ImportError:
        return None
    return getattr(module, "__version__", None)


def write_environment(log_dir: Path, record: Dict[str, Any], *, device: Optional[str] = None) -> Path:
    """Write `environment-<UTC time>.json` in `log_dir` (`environment-<UTC time>-<device>.json`
    for a lab's device); returns its path."""
    stamp = record["started_utc"].replace(":", "").replace("-", "").replace("+0000", "Z")
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / "environment-{}{}.json".format(stamp, "-" + device if device else "")
    write_text(path, json.dumps(record, indent=2, default=str) + "\n")
    return path
