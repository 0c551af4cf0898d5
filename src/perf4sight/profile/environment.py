"""The environment a campaign ran in, recorded once per campaign beside its logs.

Figures from two software stacks or power modes are not comparable, so every campaign
writes what it ran on: library versions, device, driver, power mode, CPU.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil
import torch
import torchvision

from perf4sight.files import write_text
from perf4sight.profile.memory import BYTES_PER_MIB

__all__ = ["environment_record", "write_environment"]


def environment_record(worker_facts: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """Host and library facts merged with what the worker found on its device."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": settings,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": platform.node(),
        "cpu_cores_logical": os.cpu_count(),
        "cpu_cores_physical": psutil.cpu_count(logical=False),
        "memory_total_mib": psutil.virtual_memory().total / BYTES_PER_MIB,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": cudnn,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        **worker_facts,
    }


def write_environment(log_dir: Path, record: dict[str, Any]) -> Path:
    """Write `environment-<UTC time>.json` in `log_dir`; returns its path."""
    stamp = record["started_utc"].replace(":", "").replace("-", "").replace("+0000", "Z")
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / f"environment-{stamp}.json"
    write_text(path, json.dumps(record, indent=2, default=str) + "\n")
    return path
