"""Device backends: how one device is timed and how its memory is read.

A backend lives in the worker process. `setup()` runs once per worker, before any test:
it initialises the device and primes it (thread pools, CUDA context, cuDNN/cuBLAS
handles) so that the first test pays no more start-up cost than the later ones.
`memory_begin()` runs before a memory test's model is built and `memory_end()` after its
iterations; `release()` after every test.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import psutil
import torch
from torch import nn

from perf4sight.errors import ConfigError
from perf4sight.profile.memory import (
    BYTES_PER_MIB,
    PeakSampler,
    ResidentPeak,
    UnifiedMemoryMeter,
    fix_malloc_mmap_threshold,
    release_free_memory,
)

__all__ = [
    "MemoryFigures",
    "Backend",
    "CpuBackend",
    "CudaBackend",
    "JetsonBackend",
    "BACKENDS",
    "DEVICE_ALIASES",
    "backend_name",
    "make_backend",
]


@dataclass(frozen=True)
class MemoryFigures:
    """One memory test's figures in MiB, named as the original's CSV columns.

    mem_used is the target on every device; mem_alloc/mem_reserved are torch's CUDA
    allocator peaks (None on the CPU); mem_avail/free/capacity describe the device at idle;
    mem_context is the runtime's start-up share included in mem_used (CUDA context).
    """

    mem_alloc: float | None
    mem_reserved: float | None
    mem_used: float
    mem_avail: float | None
    free: float | None
    capacity: float | None
    mem_context: float | None = None


def prime(device: torch.device) -> None:
    """A tiny training and inference step, so that lazily created runtime state exists."""
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
    ).to(device)
    inputs = torch.randn(2, 3, 8, 8, device=device)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    loss = nn.functional.cross_entropy(model(inputs), torch.zeros(2, dtype=torch.long, device=device))
    loss.backward()
    optimiser.step()
    model.eval()
    with torch.no_grad():
        model(inputs)


class Backend(ABC):
    """One kind of device; chosen by name from BACKENDS."""

    name: ClassVar[str]

    def __init__(self, *, gpu_id: int = 0) -> None:
        self.gpu_id = gpu_id

    @property
    @abstractmethod
    def device(self) -> torch.device: ...

    @abstractmethod
    def setup(self) -> dict[str, Any]:
        """Initialise and prime the device; returns facts for the environment record."""

    def synchronize(self) -> None:
        """Wait for queued device work (nothing to wait for on the CPU)."""

    def time_ms(self, step: Callable[[], None]) -> float:
        """Wall time of one step in ms, device work included."""
        start = time.perf_counter()
        step()
        self.synchronize()
        return (time.perf_counter() - start) * 1000

    @abstractmethod
    def memory_begin(self) -> None:
        """Read idle figures and reset peaks; called before the model is built."""

    @abstractmethod
    def memory_end(self) -> MemoryFigures:
        """The test's figures since `memory_begin()`."""

    def release(self) -> None:
        """Free what the finished test left behind."""
        release_free_memory()


class CpuBackend(Backend):
    """The host CPU: latency by perf_counter, memory as the worker's resident peak minus idle."""

    name = "cpu"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._resident = ResidentPeak()
        self._idle_rss_mib = 0.0
        self._idle = psutil.virtual_memory()

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def setup(self) -> dict[str, Any]:
        fix_malloc_mmap_threshold()
        prime(self.device)
        self.release()
        return {
            "device_name": _cpu_model(),
            "torch_threads": torch.get_num_threads(),
            "power_mode": _read_first(Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")),
            "resident_peak": "VmHWM" if self._resident.exact else "sampled RSS",
        }

    def memory_begin(self) -> None:
        self.release()
        self._idle = psutil.virtual_memory()
        self._resident.reset()
        self._idle_rss_mib = self._resident.rss_mib()

    def memory_end(self) -> MemoryFigures:
        return MemoryFigures(
            mem_alloc=None,
            mem_reserved=None,
            mem_used=self._resident.peak_mib() - self._idle_rss_mib,
            mem_avail=self._idle.available / BYTES_PER_MIB,
            free=self._idle.free / BYTES_PER_MIB,
            capacity=self._idle.total / BYTES_PER_MIB,
        )


class _TorchCudaBackend(Backend):
    """What CUDA GPUs and Jetsons share: CUDA events, torch's allocator peaks, the context."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.context_mib = 0.0

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self.gpu_id)

    def _check_cuda(self) -> None:
        if not torch.cuda.is_available():
            raise ConfigError(f"[profile] device = {self.name}: CUDA is not available on this machine")
        if not 0 <= self.gpu_id < torch.cuda.device_count():
            raise ConfigError(
                f"[profile] gpu_id = {self.gpu_id}: only {torch.cuda.device_count()} CUDA device(s) "
                f"visible (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
            )

    def _init_cuda(self, used_mib: Callable[[], float]) -> dict[str, Any]:
        """Create and prime the context; its size is `used_mib` after minus before."""
        before = used_mib()
        torch.cuda.set_device(self.device)
        prime(self.device)
        self.release()
        self.context_mib = used_mib() - before
        props = torch.cuda.get_device_properties(self.device)
        return {
            "device_name": props.name,
            "device_memory_mib": props.total_memory / BYTES_PER_MIB,
            "compute_capability": f"{props.major}.{props.minor}",
            "cuda_context_mib": self.context_mib,
            "cuda_module_loading": os.environ.get("CUDA_MODULE_LOADING"),
        }

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def time_ms(self, step: Callable[[], None]) -> float:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def _reset_torch_peaks(self) -> None:
        self.synchronize()
        self.release()
        torch.cuda.reset_peak_memory_stats(self.device)

    def _torch_peaks(self) -> tuple[float, float]:
        self.synchronize()
        return (
            torch.cuda.max_memory_allocated(self.device) / BYTES_PER_MIB,
            torch.cuda.max_memory_reserved(self.device) / BYTES_PER_MIB,
        )

    def release(self) -> None:
        super().release()
        torch.cuda.empty_cache()


class CudaBackend(_TorchCudaBackend):
    """A discrete NVIDIA GPU: device memory used according to NVML, minus idle, plus context."""

    name = "cuda"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._handle: Any = None
        self._sampler: PeakSampler | None = None
        self._idle_used_mib = 0.0
        self._idle_free_mib = 0.0
        self._total_mib = 0.0

    def _nvml_used_mib(self) -> float:
        import pynvml

        return pynvml.nvmlDeviceGetMemoryInfo(self._handle).used / BYTES_PER_MIB

    def setup(self) -> dict[str, Any]:
        import pynvml

        self._check_cuda()
        pynvml.nvmlInit()
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(_nvml_index(self.gpu_id))
        facts = self._init_cuda(self._nvml_used_mib)
        facts["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
        facts["nvml_device_name"] = _text(pynvml.nvmlDeviceGetName(self._handle))
        try:
            facts["power_limit_w"] = pynvml.nvmlDeviceGetPowerManagementLimit(self._handle) / 1000
        except pynvml.NVMLError:
            facts["power_limit_w"] = None
        return facts

    def memory_begin(self) -> None:
        import pynvml

        self._reset_torch_peaks()
        info = pynvml.nvmlDeviceGetMemoryInfo(self._handle)
        self._idle_used_mib = info.used / BYTES_PER_MIB
        self._idle_free_mib = info.free / BYTES_PER_MIB
        self._total_mib = info.total / BYTES_PER_MIB
        self._sampler = PeakSampler(self._nvml_used_mib)
        self._sampler.start()

    def memory_end(self) -> MemoryFigures:
        alloc, reserved = self._torch_peaks()
        peak = self._sampler.stop() if self._sampler is not None else self._nvml_used_mib()
        return MemoryFigures(
            mem_alloc=alloc,
            mem_reserved=reserved,
            mem_used=peak - self._idle_used_mib + self.context_mib,
            mem_avail=self._idle_free_mib,
            free=self._idle_free_mib,
            capacity=self._total_mib,
            mem_context=self.context_mib,
        )


class JetsonBackend(_TorchCudaBackend):
    """An NVIDIA Jetson: CPU and GPU share memory, so /proc/meminfo is the measure."""

    name = "jetson"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._meter = UnifiedMemoryMeter()

    def setup(self) -> dict[str, Any]:
        self._check_cuda()
        fix_malloc_mmap_threshold()
        facts = self._init_cuda(self._meter.used_mib)
        facts["power_mode"] = _nvpmodel_mode()
        facts["l4t_release"] = _read_first(Path("/etc/nv_tegra_release"))
        return facts

    def memory_begin(self) -> None:
        self._reset_torch_peaks()
        self._meter.begin()

    def memory_end(self) -> MemoryFigures:
        alloc, reserved = self._torch_peaks()
        used = self._meter.end()
        idle = self._meter.idle
        return MemoryFigures(
            mem_alloc=alloc,
            mem_reserved=reserved,
            mem_used=used + self.context_mib,
            mem_avail=idle["MemAvailable"],
            free=idle.get("MemFree"),
            capacity=idle["MemTotal"],
            mem_context=self.context_mib,
        )


BACKENDS: dict[str, type[Backend]] = {b.name: b for b in (CpuBackend, CudaBackend, JetsonBackend)}
# the original tool's device names
DEVICE_ALIASES = {"tx2": "jetson", "2080ti": "cuda", "gpu": "cuda"}


def backend_name(device: str) -> str:
    """The backend for a device name or alias; ConfigError for an unknown one."""
    name = DEVICE_ALIASES.get(device.lower(), device.lower())
    if name not in BACKENDS:
        known = ", ".join([*BACKENDS, *DEVICE_ALIASES])
        raise ConfigError(f"[profile] device: unknown device {device!r}; expected one of {known}")
    return name


def make_backend(device: str, **options: Any) -> Backend:
    """Instantiate the backend for a device name or alias."""
    return BACKENDS[backend_name(device)](**options)


def _nvml_index(gpu_id: int) -> int:
    """NVML numbers devices physically; torch numbers the CUDA_VISIBLE_DEVICES subset."""
    try:
        return torch.cuda._get_nvml_device_index(gpu_id)
    except (AttributeError, RuntimeError, ValueError):
        return gpu_id


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _read_first(path: Path) -> str | None:
    try:
        return path.read_text().strip().splitlines()[0]
    except (OSError, IndexError):
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvpmodel_mode() -> str | None:
    tool = shutil.which("nvpmodel")
    if tool is None:
        return None
    try:
        done = subprocess.run([tool, "-q"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return " ".join(done.stdout.split()) or None
