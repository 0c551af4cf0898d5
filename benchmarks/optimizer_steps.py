"""What each recipe optimizer's step costs on this CPU, per MiB of trained parameters and per pass.

The latency model prices the optimizer's passes over the parameters (`Optimizer.passes`: SGD
with momentum 11, Adam 19) at the layers' traffic rate times `PARAMETER_STREAM_FACTOR`, a
factor calibrated under SGD. This times each optimizer's step as the profiler runs it
(`make_optimizer`: one parameter at a time) over parameters of `--mib` MiB in tensors of 4 MiB
(below the size whose temporaries are fresh pages), gradients set, median of `--repeats` steps
after warm-up ones, and prints the step's ms per MiB and per MiB-pass: where a pass of one
optimizer costs more than another's, passes alone do not price it.

Then the step inside a plain training loop (torchvision network, 3x64x64 inputs, 10 classes,
zero_grad, forward, cross-entropy, backward, step; the optimizer as the profiler makes it), per
network and batch size of `--loop` under SGD and Adam: the step's median ms over the iterations
after warm-up ones, and the MiB of pages faulted in during each of those steps (minor faults:
pages the C library had handed back to the system and the step touched anew).

    .venv/bin/python benchmarks/optimizer_steps.py [--mib 64 --repeats 15 --loop resnet18:16 ...]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time

import torch
import torchvision

from perf4sight.device.recipe import OPTIMIZERS, Recipe
from perf4sight.device.workload import make_optimizer

_TENSOR_MIB = 4
_WARMUP = 3
_LOOP_CASES = ("resnet18:2", "resnet18:16", "resnet18:64", "resnet50:8", "resnet50:32", "mobilenet_v2:16",
               "densenet121:8")
_PAGE_MIB = resource.getpagesize() / (1 << 20)


def step_ms(optimizer: str, mib: int, repeats: int) -> float:
    """The median wall time (ms) of one step of `optimizer` over `mib` MiB of parameters."""
    elements = _TENSOR_MIB * (1 << 20) // 4
    params = [torch.nn.Parameter(torch.randn(elements)) for _ in range(mib // _TENSOR_MIB)]
    for param in params:
        param.grad = torch.randn(elements)
    step = make_optimizer(params, Recipe(optimizer=optimizer))
    times = []
    for i in range(_WARMUP + repeats):
        start = time.perf_counter()
        step.step()
        if i >= _WARMUP:
            times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def loop_step(network: str, batch_size: int, optimizer: str, repeats: int) -> tuple[float, float]:
    """The median ms of the step of `optimizer` in a plain training loop of `network` at
    `batch_size`, and the median MiB of pages faulted in during one step."""
    model = getattr(torchvision.models, network)(num_classes=10)
    step = make_optimizer(model.parameters(), Recipe(optimizer=optimizer))
    images, labels = torch.randn(batch_size, 3, 64, 64), torch.randint(0, 10, (batch_size,))
    times, faulted = [], []
    for i in range(_WARMUP + repeats):
        step.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        step.step()
        if i >= _WARMUP:
            times.append(time.perf_counter() - start)
            faulted.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) * _PAGE_MIB)
    return 1e3 * statistics.median(times), statistics.median(faulted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="MiB of parameters stepped")
    parser.add_argument("--repeats", type=int, default=15, help="timed steps; the median is printed")
    parser.add_argument("--loop", action="append", metavar="NET:BS",
                        help=f"a plain loop's network and batch size (repeatable; default {' '.join(_LOOP_CASES)})")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.mib} MiB of parameters")
    print("optimizer | passes | step ms | ms per MiB | ms per MiB-pass")
    for name, optimizer in OPTIMIZERS.items():
        ms = step_ms(name, args.mib, args.repeats)
        print(f"{name:9s} | {optimizer.passes:6d} | {ms:7.2f} | {ms / args.mib:10.4f} | "
              f"{ms / args.mib / optimizer.passes:.5f}", flush=True)
    print("\nin a plain training loop: network | batch size | optimizer | step ms | MiB faulted per step")
    for case in args.loop or _LOOP_CASES:
        network, _, batch_size = case.partition(":")
        for optimizer in ("sgd", "adam"):
            ms, faulted = loop_step(network, int(batch_size), optimizer, args.repeats)
            print(f"{network} | {batch_size} | {optimizer} | {ms:.1f} | {faulted:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
