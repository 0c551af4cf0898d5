"""A plain PyTorch training loop, written without perf4sight: what a user's own script sees.

The profiler's figures are checked against it (`test_reference_loop.py`), never against
themselves. Run as a script, it trains a torchvision network on random data, as a user's
script would, and prints one JSON line:

- `latency_ms`: the mean wall time of the timed iterations (zero_grad, forward, loss,
  backward, step; on a GPU, up to the device's end of the step; with `--zero-grad after-loss`,
  forward, loss, zero_grad, backward, step: the order of scripts that hold the last step's
  gradients through the forward pass);
- `mem_used_mib`: on the CPU, the process's peak anonymous memory (heap and tensors, not the
  pages of files such as PyTorch's libraries) minus its value just before the model is built:
  the larger of `RssAnon` sampled every millisecond (through the warm-up steps) and the
  resident high-water mark (VmHWM, reset after the imports) less the most file and shared pages
  seen; on a GPU, the peak of the device's used memory (NVML, sampled every millisecond through
  the warm-up steps) minus its value before the process touched CUDA, so the CUDA context is
  included.
"""

import argparse
import functools
import json
import threading
import time
from pathlib import Path

import torch
import torchvision

OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=5e-4),
    "adam": lambda params: torch.optim.Adam(params, lr=1e-3),
}


def _status() -> dict:
    """/proc/self/status's amounts in kB, as MiB."""
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if rest.strip().endswith(" kB"):
            values[name] = int(rest.split()[0]) / 1024
    return values


class _Sampled:
    """Peaks of `read()`'s values while running, read every millisecond by a thread."""

    def __init__(self, read) -> None:
        self._read = read
        self.peak = read()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.001):
            self.peak = {key: max(value, self.peak[key]) for key, value in self._read().items()}

    def __enter__(self) -> "_Sampled":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = {key: max(value, self.peak[key]) for key, value in self._read().items()}


def _cpu_memory() -> dict:
    status = _status()
    return {"anonymous": status["RssAnon"], "files": status["RssFile"] + status["RssShmem"]}


@functools.lru_cache(maxsize=None)
def _gpu_handle() -> object:
    import pynvml

    pynvml.nvmlInit()
    return pynvml.nvmlDeviceGetHandleByIndex(0)


def _gpu_memory() -> dict:
    import pynvml

    return {"used": pynvml.nvmlDeviceGetMemoryInfo(_gpu_handle()).used / 2**20}


ZERO_GRAD = ("first", "after-loss")  # where a step clears the gradients (to None, PyTorch 2's default)


def train(network: str, bs: int, size: int, classes: int, optimizer: str, device: str,
          iterations: int, warmup: int, zero_grad: str = "first") -> dict:
    """Train `network` for `warmup + iterations` steps; the timed steps' mean and the peak memory.

    Memory is sampled through the model's construction and the warm-up steps (at least one), not
    while the timed steps run: a thread reading every millisecond takes a share of a small
    machine's cores. On the CPU the high-water mark covers the timed steps too."""
    gpu = device == "cuda"
    if not gpu:
        Path("/proc/self/clear_refs").write_text("5")
    meter = _Sampled(_gpu_memory if gpu else _cpu_memory)
    idle = meter.peak["used" if gpu else "anonymous"]
    with meter:
        model = getattr(torchvision.models, network)(num_classes=classes).to(device)
        model.train()
        step = OPTIMIZERS[optimizer](model.parameters())
        loss_fn = torch.nn.CrossEntropyLoss()
        inputs = torch.randn(bs, 3, size, size, device=device)
        labels = torch.randint(0, classes, (bs,), device=device)

        def iteration() -> float:
            start = time.perf_counter()
            if zero_grad == "first":
                step.zero_grad(set_to_none=True)
            loss = loss_fn(model(inputs), labels)
            if zero_grad == "after-loss":
                step.zero_grad(set_to_none=True)
            loss.backward()
            step.step()
            del loss
            if gpu:
                torch.cuda.synchronize()
            return (time.perf_counter() - start) * 1000

        for _ in range(max(warmup, 1)):
            iteration()
    times = [iteration() for _ in range(iterations)]
    if gpu:
        peak = meter.peak["used"]
    else:
        files = max(meter.peak["files"], _cpu_memory()["files"])
        peak = max(meter.peak["anonymous"], _status()["VmHWM"] - files)
    return {"latency_ms": sum(times) / len(times), "mem_used_mib": peak - idle}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="resnet18", help="a torchvision builder's name")
    parser.add_argument("--bs", type=int, default=16)
    parser.add_argument("--size", type=int, default=64, help="input height and width")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="sgd")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps, memory sampled through them (at least 1)")
    parser.add_argument("--zero-grad", choices=ZERO_GRAD, default="first",
                        help="clear the gradients before the forward pass, or after the loss")
    args = parser.parse_args()
    print(json.dumps(train(args.network, args.bs, args.size, args.classes, args.optimizer, args.device,
                           args.iterations, args.warmup, args.zero_grad)))


if __name__ == "__main__":
    main()
