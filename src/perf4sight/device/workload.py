"""One test, run inside the worker: build the model, warm up, time or measure iterations.

A training iteration is the original's: forward, CrossEntropy loss, backward and an SGD
step (lr 0.1, momentum 0.9, weight decay 5e-4), one parameter at a time as the original's
PyTorch ran it on every device (not the multi-tensor `foreach` kernels that later PyTorch
picks on GPUs, which would hold a temporary copy of every gradient at once rather than of
one layer's, a different memory peak than the TX2's measurements and the models describe).
Inference is a forward pass in eval mode under no_grad. Inputs are random tensors of the
model's input size.
"""

import inspect
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import torch
from torch import nn

from .backends import Backend, MemoryFigures
from .contention import CpuElsewhere
from .test_config import ProfileTest

__all__ = ["SGD_OPTIONS", "TestOutcome", "iteration", "run_test"]

SGD_OPTIONS = {"lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4}
# The per-parameter loop; PyTorch before 1.12 has no other, nor the `foreach` argument.
_PER_PARAMETER = {"foreach": False} if "foreach" in inspect.signature(torch.optim.SGD).parameters else {}
_ERROR_CHARS = 300
_DRY_RUN_BS = 2

# test -> an object with `module`, `input_size` (C, H, W) and `num_classes` (`models.py`)
Loader = Callable[[ProfileTest], Any]


class TestOutcome(NamedTuple):
    """What one test produced; `error` is one line when it failed. `cpu_elsewhere` is the
    share of the host's CPU time other processes took while the iterations ran (None
    when they ran too briefly to tell; `contention.py`)."""

    passed: bool
    latency_iters_ms: List[float]
    memory: Optional[MemoryFigures]
    error: Optional[str] = None
    cpu_elsewhere: Optional[float] = None

    def to_json(self) -> Dict[str, Any]:
        return {
            "passed": self.passed,
            "latency_iters_ms": self.latency_iters_ms,
            "memory": None if self.memory is None else dict(self.memory._asdict()),
            "error": self.error,
            "cpu_elsewhere": self.cpu_elsewhere,
        }

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "TestOutcome":
        memory = data.get("memory")
        return cls(
            passed=bool(data["passed"]),
            latency_iters_ms=[float(t) for t in data.get("latency_iters_ms", [])],
            memory=None if memory is None else MemoryFigures(**memory),
            error=data.get("error"),
            cpu_elsewhere=data.get("cpu_elsewhere"),
        )


def run_test(test: ProfileTest, backend: Backend, load: Loader, *, iterations: int, warmup: int) -> TestOutcome:
    """Run one test on `backend`, its model built by `load`; any error (out of memory
    included) is a failed outcome.

    A memory test first runs one step of its model at batch size 2 and throws it away,
    so that what the first use of a kind of model leaves behind for good (imported
    modules, lazily initialised kernels and tables) is not charged to whichever test
    happens to come first in a worker.
    """
    times: List[float] = []
    error = None
    measuring = False
    elsewhere = CpuElsewhere()
    try:
        if test.test_var == "memory":
            _iterate(test._replace(bs=min(test.bs, _DRY_RUN_BS)), backend, load, 0, 1, [])
            backend.release()
            backend.memory_begin()
            measuring = True
        _iterate(test, backend, load, iterations, warmup, times, elsewhere)
    except Exception as exc:  # the model's own code, OOM included: a failed test, not a crash
        error = " ".join("{}: {}".format(type(exc).__name__, exc).split())[:_ERROR_CHARS]
    memory = backend.memory_end() if measuring else None
    backend.release()
    return TestOutcome(passed=error is None, latency_iters_ms=times, memory=memory, error=error,
                       cpu_elsewhere=elsewhere.share)


def _iterate(test: ProfileTest, backend: Backend, load: Loader, iterations: int, warmup: int,
             times: List[float], elsewhere: Optional[CpuElsewhere] = None) -> None:
    """Build and run, the iterations watched by `elsewhere` when given; locals die with this
    frame so that `release()` can free them."""
    network = load(test)
    device = backend.device
    model = network.module.to(device)
    inputs = torch.randn(test.bs, *network.input_size, device=device)
    step = iteration(model, test.stage, inputs, network.num_classes)
    if elsewhere is not None:
        with elsewhere:
            _timed(backend, step, iterations, warmup, times)
    else:
        _timed(backend, step, iterations, warmup, times)


def _timed(backend: Backend, step: Callable[[], None], iterations: int, warmup: int, times: List[float]) -> None:
    for _ in range(warmup):
        step()
    backend.synchronize()
    times.extend(backend.time_ms(step) for _ in range(iterations))


def iteration(model: nn.Module, stage: str, inputs: torch.Tensor, num_classes: int) -> Callable[[], None]:
    """One iteration of `stage` on `inputs`, as a function to call repeatedly: what is measured
    (and what `perf4sight.architecture.lifetimes` records on the meta device)."""
    if stage == "inference":
        model.eval()

        def infer() -> None:
            with torch.no_grad():
                model(inputs)

        return infer
    model.train()
    targets = torch.randint(num_classes, (inputs.shape[0],), device=inputs.device)
    criterion = nn.CrossEntropyLoss()
    options = dict(SGD_OPTIONS, **_PER_PARAMETER)
    optimiser = torch.optim.SGD(model.parameters(), **options)

    def train() -> None:
        output = model(inputs)
        logits = output[0] if isinstance(output, tuple) else output  # GoogLeNet's aux outputs
        loss = criterion(logits, targets)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()

    return train
