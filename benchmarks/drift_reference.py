"""Whether a reference workload timed beside each test takes this machine's drift out of latency.

Campaigns of the same tests minutes apart differ by far more than a test's iterations vary
(`zoo_latency_passes.py`). If the drift were one factor for everything running at a moment, a
fixed reference timed just before and after each test would carry it, and the ratio of the
two would repeat. In one process, plain training steps (SGD with momentum, 3x64x64, 10
classes, 2 threads) of the CPU zoo's networks at one pruning level and batch size 8 are timed
in several passes, alternately in the zoo's order and reversed; beside each, three references
(5 iterations each, before and after): a small CNN's training step (resnet18 pruned 90 %), 20
GEMMs of 256x256, and a streaming add over 16 MiB. Prints, over every pair of passes, the mean
|difference| per test after a global factor: raw, and divided by each reference (the geometric
mean of its before and after).

    .venv/bin/python benchmarks/drift_reference.py --passes 6 --level 45
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from perf4sight.networks.loader import load_network
from zoo_accuracy import FAMILIES, ZOO_DIR
from zoo_latency_passes import difference_pct

BATCH, ITERATIONS = 8, 5


def training_step(spec: Path) -> Callable[[], None]:
    """One plain training iteration of the network in `spec`."""
    network = load_network(spec)
    model = network.module.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs = torch.randn(BATCH, *network.input_size)
    labels = torch.randint(0, network.num_classes, (BATCH,))
    loss = torch.nn.CrossEntropyLoss()

    def step() -> None:
        optimizer.zero_grad()
        loss(model(inputs), labels).backward()
        optimizer.step()
    return step


def references() -> dict[str, Callable[[], object]]:
    """The reference workloads: a small CNN's training step, GEMMs, a streaming add."""
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    stream, out = torch.randn(4 << 20), torch.empty(4 << 20)
    return {"cnn": training_step(ZOO_DIR / "models" / "resnet18_90.json"),
            "gemm": lambda: [torch.mm(a, b) for _ in range(20)],
            "stream": lambda: [torch.add(stream, 1.0, out=out) for _ in range(4)]}


def mean_ms(work: Callable[[], object], iterations: int = ITERATIONS) -> float:
    """Mean milliseconds of `iterations` runs of `work` after one."""
    work()
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.mean(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=6)
    parser.add_argument("--level", type=int, default=45, help="the zoo's pruning level (0, 45, 90)")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    refs = references()
    names = [net for members in FAMILIES.values() for net in members]
    steps = {net: training_step(ZOO_DIR / "models" / f"{net}_{args.level}.json") for net in names}
    times = {key: np.zeros((args.passes, len(names))) for key in ("net", *refs)}
    for number in range(args.passes):
        order = list(enumerate(names)) if number % 2 == 0 else list(enumerate(names))[::-1]
        for index, net in order:
            before = {key: mean_ms(work) for key, work in refs.items()}
            times["net"][number, index] = mean_ms(steps[net])
            for key, work in refs.items():
                times[key][number, index] = np.sqrt(before[key] * mean_ms(work))
        print(f"pass {number + 1} of {args.passes} done", file=sys.stderr)
    pairs = list(itertools.combinations(range(args.passes), 2))
    ways = {"raw": times["net"], **{f"/ {key}": times["net"] / times[key] for key in refs}}
    print(f"{len(names)} networks at level {args.level}, batch size {BATCH}, {args.passes} passes: "
          "mean |difference| per test between passes, after a global factor")
    for label, values in ways.items():
        print(f"  {label:10s} {np.mean([difference_pct(values[p], values[q]) for p, q in pairs]):6.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
