"""What each recipe optimizer's step costs on this CPU, per MiB of trained parameters and per pass.

The latency model prices the optimizer's passes over the parameters (`Optimizer.passes`: SGD
with momentum 11, Adam 19) at the layers' traffic rate times `PARAMETER_STREAM_FACTOR`, a
factor calibrated under SGD. This times each optimizer's step as the profiler runs it
(`make_optimizer`: one parameter at a time) over parameters of `--mib` MiB in tensors of 4 MiB
(below the size whose temporaries are fresh pages), gradients set, median of `--repeats` steps
after warm-up ones, and prints the step's ms per MiB and per MiB-pass: where a pass of one
optimizer costs more than another's, passes alone do not price it.

    .venv/bin/python benchmarks/optimizer_steps.py [--mib 64 --repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from perf4sight.device.recipe import OPTIMIZERS, Recipe
from perf4sight.device.workload import make_optimizer

_TENSOR_MIB = 4
_WARMUP = 3


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="MiB of parameters stepped")
    parser.add_argument("--repeats", type=int, default=15, help="timed steps; the median is printed")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.mib} MiB of parameters")
    print("optimizer | passes | step ms | ms per MiB | ms per MiB-pass")
    for name, optimizer in OPTIMIZERS.items():
        ms = step_ms(name, args.mib, args.repeats)
        print(f"{name:9s} | {optimizer.passes:6d} | {ms:7.2f} | {ms / args.mib:10.4f} | "
              f"{ms / args.mib / optimizer.passes:.5f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
