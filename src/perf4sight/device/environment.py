"""The environment a campaign ran in, recorded once per campaign (per device of a lab) beside its logs.

Figures from two software stacks or power modes are not comparable, so every campaign
writes what it ran on: library versions, device, driver, power mode, clocks, CPU.
"""

import json
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, Optional

import torch

from .files import write_text
from .system import physical_cores, system_memory_mib

__all__ = ["environment_record", "write_environment"]


def environment_record(worker_facts: Dict[str, Any], settings: Dict[str, Any]) -> Dict[str, Any]:
    """Host and library facts merged with what the worker found on its device."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    record = {
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": settings,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": platform.node(),
        "cpu_cores_logical": os.cpu_count(),
        "cpu_cores_physical": physical_cores(),
        "memory_total_mib": system_memory_mib()["total"],
        "torch": torch.__version__,
        "torchvision": _version("torchvision"),
        "psutil": _version("psutil"),
        "torch_cuda": torch.version.cuda,
        "cudnn": cudnn,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    record.update(worker_facts)
    return record


def _version(module_name: str) -> Optional[str]:
    """The version of an optional library, None where it is not installed."""
    try:
        module = __import__(module_name)
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
