"""Device backends: how one device is timed and how its memory is read.

A backend lives in the worker process. `setup()` runs once per worker, before any test:
it initialises the device and primes it (thread pools, CUDA context, cuDNN/cuBLAS
handles) so that the first test pays no more start-up cost than the later ones, and
measures what only the environment record reads where asked (a campaign's first worker).
`memory_begin()` runs before a memory test's model is built and `memory_end()` after its
iterations; `release()` after every test.
"""

import os
import platform
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple, Type, Union

import torch
from torch import nn

from .environment import CLOCKS_LOCKED, DEVICE_NAME, FRESH_PAGES_COST, POWER_MODE
from .definitions import FRESH_PAGES_BYTES
from .errors import ArgumentError
from .recipe import PRECISIONS
from .memory import AnonymousPeak, PeakSampler, UnifiedMemoryMeter, release_free_memory
from .system import BYTES_PER_MIB, read_meminfo, system_memory_mib

__all__ = [
    "MemoryFigures",
    "Backend",
    "CpuBackend",
    "CudaBackend",
    "JetsonBackend",
    "BACKENDS",
    "DEVICE_ALIASES",
    "DEVICE_TYPES",
    "backend_name",
    "clock_state",
    "fresh_and_kept_fill_ms",
    "fresh_pages_ms_per_mib",
    "make_backend",
]


class MemoryFigures(NamedTuple):
    """One memory test's figures in MiB, named as the original's CSV columns.

    mem_used is the target on every device; mem_alloc/mem_reserved are torch's CUDA
    allocator peaks (None on the CPU); mem_avail/free/capacity describe the device at idle;
    mem_context is the runtime's start-up share included in mem_used (CUDA context).
    """

    mem_alloc: Optional[float]
    mem_reserved: Optional[float]
    mem_used: float
    mem_avail: Optional[float]
    free: Optional[float]
    capacity: Optional[float]
    mem_context: Optional[float] = None


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


class Backend:
    """One kind of device; chosen by name from BACKENDS. Its facts are declared here alone:
    the torch device type, whether it is a GPU, and the precisions it computes in."""

    name = ""
    device_type = ""  # the torch device type its tensors live on (autocast's `device_type`)
    gpu = False  # a GPU of its own (a lab's device of this kind takes one of Ray's `num_gpus`)
    grad_scaler = False  # fp16 autocast's gradient scaler (`torch.amp.GradScaler`) runs on it
    # the compute capability its bfloat16 kernels need (None: no capability to check)
    bfloat16_capability: Optional[Tuple[int, int]] = None

    @classmethod
    def precision_problem(cls, precision: str) -> Optional[str]:
        """Why this kind of device cannot compute in `precision`, known before it runs (fp16
        autocast needs its gradient scaler); None when it can."""
        if PRECISIONS[precision].grad_scaler and not cls.grad_scaler:
            return "precision {} needs a CUDA device, not {}".format(precision, cls.device_type)
        return None

    @classmethod
    def device_precision_problem(cls, precision: str) -> Optional[str]:
        """`precision_problem` on this machine's device: also bf16 autocast on a GPU without
        bfloat16 kernels (a TX2, a Xavier, a Turing card), where PyTorch would emulate or
        refuse them."""
        problem = cls.precision_problem(precision)
        needs = cls.bfloat16_capability
        if problem or needs is None or PRECISIONS[precision].autocast_dtype != "bfloat16":
            return problem
        has = torch.cuda.get_device_capability()
        if tuple(has) < needs:
            return "precision {} needs a GPU with bfloat16 kernels (compute capability {}.{} or newer), not {}.{}".format(
                precision, needs[0], needs[1], has[0], has[1])
        return None

    def __init__(self, *, gpu_id: int = 0) -> None:
        self.gpu_id = gpu_id

    @property
    def device(self) -> torch.device:
        raise NotImplementedError

    def setup(self, measure: bool = True) -> Dict[str, Any]:
        """Initialise and prime the device; returns facts for the environment record, with
        `measure` the device's probes too (a restarted worker's facts are the first one's)."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for queued device work (nothing to wait for on the CPU)."""

    def time_ms(self, step: Callable[[], None]) -> float:
        """Wall time of one step in ms, device work included."""
        start = time.perf_counter()
        step()
        self.synchronize()
        return (time.perf_counter() - start) * 1000

    def memory_begin(self) -> None:
        """Read idle figures and reset peaks; called before the model is built."""
        raise NotImplementedError

    def memory_end(self) -> MemoryFigures:
        """The test's figures since `memory_begin()`."""
        raise NotImplementedError

    def release(self) -> None:
        """Free what the finished test left behind."""
        release_free_memory()


class CpuBackend(Backend):
    """The host CPU: latency by perf_counter, memory as the worker's peak anonymous memory
    (heap and tensors, not the pages of files) above its value before the model is built."""

    name = "cpu"
    device_type = "cpu"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._anonymous = AnonymousPeak()
        self._idle = system_memory_mib()

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def setup(self, measure: bool = True) -> Dict[str, Any]:
        """Nothing to prime: a test's warm-up iterations start the thread pools, and a memory
        test counts what its first iteration initialises, as a training script's process would."""
        facts = {
            DEVICE_NAME: _cpu_model(),
            "torch_threads": torch.get_num_threads(),
            POWER_MODE: _read_first(Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")),
            "anonymous_peak": "RssAnon and VmHWM" if self._anonymous.exact else "sampled RSS",
        }
        if measure:
            facts[FRESH_PAGES_COST] = fresh_pages_ms_per_mib()
        return facts

    def memory_begin(self) -> None:
        self.release()
        self._idle = system_memory_mib()
        self._anonymous.reset()

    def memory_end(self) -> MemoryFigures:
        return MemoryFigures(
            mem_alloc=None,
            mem_reserved=None,
            mem_used=self._anonymous.peak_mib(),
            mem_avail=self._idle["available"],
            free=self._idle["free"],
            capacity=self._idle["total"],
        )


class _TorchCudaBackend(Backend):
    """What CUDA GPUs and Jetsons share: CUDA events, torch's allocator peaks, the context."""

    device_type = "cuda"
    gpu = True
    grad_scaler = True
    bfloat16_capability = (8, 0)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.context_mib = 0.0

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self.gpu_id)

    def _check_cuda(self) -> None:
        if not torch.cuda.is_available():
            raise ArgumentError("device = {}: CUDA is not available on this machine".format(self.name))
        if not 0 <= self.gpu_id < torch.cuda.device_count():
            raise ArgumentError(
                "gpu_id = {}: only {} CUDA device(s) visible (CUDA_VISIBLE_DEVICES={})".format(
                    self.gpu_id, torch.cuda.device_count(), os.environ.get("CUDA_VISIBLE_DEVICES", "unset"))
            )

    def _init_cuda(self, used_mib: Callable[[], float]) -> Dict[str, Any]:
        """Create and prime the context; its size is `used_mib` after minus before."""
        before = used_mib()
        torch.cuda.set_device(self.device)
        prime(self.device)
        self.release()
        self.context_mib = used_mib() - before
        props = torch.cuda.get_device_properties(self.device)
        return {
            DEVICE_NAME: props.name,
            "device_memory_mib": props.total_memory / BYTES_PER_MIB,
            "compute_capability": "{}.{}".format(props.major, props.minor),
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

    def _torch_peaks(self) -> Tuple[float, float]:
        self.synchronize()
        return (
            torch.cuda.max_memory_allocated(self.device) / BYTES_PER_MIB,
            torch.cuda.max_memory_reserved(self.device) / BYTES_PER_MIB,
        )

    def release(self) -> None:
        super().release()
        torch.cuda.empty_cache()


class _DeviceMemory:
    """A discrete GPU's memory (used, free, total; bytes): NVML where pynvml is installed,
    else the CUDA runtime through torch (`mem_get_info`, PyTorch >= 1.11: before, it read
    the current device whatever the index). The runtime's reading creates the CUDA context,
    so with it the context is part of the idle reading and `cuda_context_mib` is about 0;
    NVML sees the context come."""

    def __init__(self, gpu_id: int) -> None:
        try:
            import pynvml
        except ImportError:
            pynvml = None
        self.nvml = pynvml
        if pynvml is not None:
            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(_nvml_index(gpu_id))
        elif tuple(int(part) for part in re.findall(r"\d+", torch.__version__)[:2]) < (1, 11):
            raise ArgumentError("device = cuda: reading the GPU's memory needs pynvml "
                              "(pip install nvidia-ml-py) or PyTorch >= 1.11")
        self.gpu_id = gpu_id

    def read(self) -> Tuple[float, float, float]:
        if self.nvml is not None:
            info = self.nvml.nvmlDeviceGetMemoryInfo(self.handle)
            return float(info.used), float(info.free), float(info.total)
        free, total = torch.cuda.mem_get_info(self.gpu_id)
        return float(total - free), float(free), float(total)

    def used_mib(self) -> float:
        return self.read()[0] / BYTES_PER_MIB

    def facts(self) -> Dict[str, Any]:
        if self.nvml is None:
            return {"memory_reader": "torch.cuda.mem_get_info"}
        facts: Dict[str, Any] = {"memory_reader": "NVML"}
        facts["driver"] = _text(self.nvml.nvmlSystemGetDriverVersion())
        facts["nvml_device_name"] = _text(self.nvml.nvmlDeviceGetName(self.handle))
        try:
            facts["power_limit_w"] = self.nvml.nvmlDeviceGetPowerManagementLimit(self.handle) / 1000
        except self.nvml.NVMLError:
            facts["power_limit_w"] = None
        return facts


class CudaBackend(_TorchCudaBackend):
    """A discrete NVIDIA GPU: device memory used, minus idle, plus context."""

    name = "cuda"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._memory: Optional[_DeviceMemory] = None
        self._sampler: Optional[PeakSampler] = None
        self._idle = (0.0, 0.0, 0.0)

    def setup(self, measure: bool = True) -> Dict[str, Any]:
        self._check_cuda()
        self._memory = _DeviceMemory(self.gpu_id)
        facts = self._init_cuda(self._memory.used_mib)
        facts.update(self._memory.facts())
        return facts

    def memory_begin(self) -> None:
        self._reset_torch_peaks()
        self._idle = tuple(b / BYTES_PER_MIB for b in self._memory.read())
        self._sampler = PeakSampler(self._memory.used_mib)
        self._sampler.start()

    def memory_end(self) -> MemoryFigures:
        alloc, reserved = self._torch_peaks()
        peak = self._sampler.stop() if self._sampler is not None else self._memory.used_mib()
        idle_used, idle_free, total = self._idle
        return MemoryFigures(
            mem_alloc=alloc,
            mem_reserved=reserved,
            mem_used=peak - idle_used + self.context_mib,
            mem_avail=idle_free,
            free=idle_free,
            capacity=total,
            mem_context=self.context_mib,
        )


class JetsonBackend(_TorchCudaBackend):
    """An NVIDIA Jetson: CPU and GPU share memory, so /proc/meminfo is the measure."""

    name = "jetson"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._meter = UnifiedMemoryMeter()

    def setup(self, measure: bool = True) -> Dict[str, Any]:
        self._check_cuda()
        facts = self._init_cuda(self._meter.used_mib)
        facts[POWER_MODE] = _nvpmodel_mode()
        facts["l4t_release"] = _read_first(Path("/etc/nv_tegra_release"))
        facts["meminfo_mib"] = read_meminfo()
        facts.update(clock_state())
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


BACKENDS: Dict[str, Type[Backend]] = {b.name: b for b in (CpuBackend, CudaBackend, JetsonBackend)}
# The facts of a torch device type (`inputs.device.type`, where no backend is at hand): its
# backends' (a Jetson's are CUDA's).
DEVICE_TYPES: Dict[str, Type[Backend]] = {b.device_type: b for b in BACKENDS.values()}
# the original tool's device names
DEVICE_ALIASES = {"tx2": "jetson", "2080ti": "cuda", "gpu": "cuda"}


def backend_name(device: str) -> str:
    """The backend for a device name or alias; ArgumentError for an unknown one."""
    name = DEVICE_ALIASES.get(device.lower(), device.lower())
    if name not in BACKENDS:
        known = ", ".join(list(BACKENDS) + list(DEVICE_ALIASES))
        raise ArgumentError("device: unknown device {!r}; expected one of {}".format(device, known))
    return name


def make_backend(device: str, **options: Any) -> Backend:
    """Instantiate the backend for a device name or alias."""
    return BACKENDS[backend_name(device)](**options)


def clock_state(sysfs: Union[str, Path] = "/sys") -> Dict[str, Any]:
    """Whether the clocks are locked at one frequency, as `jetson_clocks` leaves them.

    A CPU or GPU whose governor may scale its clock between tests times the same work
    differently; `jetson_clocks` sets every CPU's and the GPU's minimum frequency to the
    maximum. `clocks_locked` is None where no frequency is readable.
    """
    root = Path(sysfs)
    cpus = [d for d in sorted(root.glob("devices/system/cpu/cpu[0-9]*/cpufreq"))
            if _read_first(d.parent / "online") != "0"]  # a core switched off by the power mode
    gpus = [d for d in sorted(root.glob("class/devfreq/*")) if _is_gpu(d.name)]
    cpu_locked = _all_locked(cpus, "scaling_min_freq", "scaling_max_freq")
    gpu_locked = _all_locked(gpus, "min_freq", "max_freq")
    known = [v for v in (cpu_locked, gpu_locked) if v is not None]
    return {
        "cpu_clocks_locked": cpu_locked,
        "gpu_clocks_locked": gpu_locked,
        CLOCKS_LOCKED: all(known) if known else None,
    }


def _is_gpu(devfreq_name: str) -> bool:
    """A Jetson GPU's devfreq node: `17000000.gp10b` (TX2), `57000000.gpu` (Nano),
    `17000000.gv11b` (Xavier), `17000000.ga10b` (Orin)."""
    return re.search(r"gpu|\.g[a-z]\d+b$", devfreq_name) is not None


def _all_locked(folders: List[Path], low: str, high: str) -> Optional[bool]:
    """Whether every folder's `low` frequency file equals its `high` one (None: none readable)."""
    states = []
    for folder in folders:
        low_text, high_text = _read_first(folder / low), _read_first(folder / high)
        if low_text is not None and high_text is not None:
            states.append(low_text == high_text)
    return all(states) if states else None


def _nvml_index(gpu_id: int) -> int:
    """NVML numbers devices physically; torch numbers the CUDA_VISIBLE_DEVICES subset."""
    try:
        return torch.cuda._get_nvml_device_index(gpu_id)
    except (AttributeError, RuntimeError, ValueError):
        return gpu_id


def _text(value: Union[bytes, str]) -> str:
    return value.decode() if isinstance(value, bytes) else value


# The probe's tensors: twice the size above which every allocation is fresh pages.
_PROBE_MIB = 2 * FRESH_PAGES_BYTES // BYTES_PER_MIB
_PROBE_REPEATS = 5


def fresh_and_kept_fill_ms(mib: int, repeats: int) -> Tuple[float, float]:
    """Median milliseconds, over `repeats`, to allocate a CPU tensor of `mib` MiB afresh and
    fill it, and to fill one of that size kept from before (its pages already touched)."""
    elements = mib * BYTES_PER_MIB // 4
    kept = torch.empty(elements).fill_(0.0)

    def median_ms(work: Callable[[], Any]) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            work()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3

    return median_ms(lambda: torch.empty(elements).fill_(1.0)), median_ms(lambda: kept.fill_(1.0))


def fresh_pages_ms_per_mib() -> float:
    """Milliseconds per MiB that a tensor above `FRESH_PAGES_BYTES` costs at each allocation on
    the CPU beyond filling one kept from before (`fresh_and_kept_fill_ms` at `_PROBE_MIB`
    MiB; about 0.1 s)."""
    fresh, kept = fresh_and_kept_fill_ms(_PROBE_MIB, _PROBE_REPEATS)
    return max(0.0, (fresh - kept) / _PROBE_MIB)


def _read_first(path: Path) -> Optional[str]:
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


def _nvpmodel_mode() -> Optional[str]:
    """`nvpmodel -q`: the power mode (its name and number), or None without the tool."""
    tool = shutil.which("nvpmodel")
    if tool is None:
        return None
    try:
        done = subprocess.run([tool, "-q"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              universal_newlines=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return " ".join(done.stdout.split()) or None
