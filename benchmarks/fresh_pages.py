"""What a tensor allocated afresh at every iteration costs on this CPU, by size.

PyTorch's CPU allocator keeps no cache: each tensor is glibc's, and glibc serves a large one
from a fresh mapping (always above 32 MiB, its largest dynamic mmap threshold), whose pages
the kernel faults in and zeroes at first touch. For each size this times allocating a tensor
and filling it, against filling one kept from before (median of repeats; the difference per
MiB is the fresh pages' cost; `backends.fresh_and_kept_fill_ms`, what the CPU's probe runs at
64 MiB), then lists the allocations of 8 MiB or more in one training
iteration of a Linear layer of 9216 x 4096 (alexnet's first; the default recipe's SGD with
momentum and weight decay, batch size 8, after three iterations), each with the time of the
operation that made it.

    .venv/bin/python benchmarks/fresh_pages.py
"""

from __future__ import annotations

import sys

import torch
from torch.profiler import ProfilerActivity, profile

from perf4sight.device.backends import fresh_and_kept_fill_ms
from perf4sight.device.recipe import DEFAULT_RECIPE
from perf4sight.device.system import BYTES_PER_MIB as _MIB
from perf4sight.device.workload import make_optimizer

SIZES_MIB = (1, 2, 4, 8, 16, 32, 64, 128, 400)


def linear_allocations() -> list[tuple[str, float, float]]:
    """(operation, MiB, ms) of the allocations of 8 MiB or more in one training iteration."""
    model = torch.nn.Sequential(torch.nn.Linear(9216, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10))
    optimizer = make_optimizer(model.parameters(), DEFAULT_RECIPE)  # as the profiler steps
    inputs, labels = torch.randn(8, 9216), torch.randint(0, 10, (8,))
    loss = torch.nn.CrossEntropyLoss()

    def step() -> None:
        optimizer.zero_grad()
        loss(model(inputs), labels).backward()
        optimizer.step()
    for _ in range(3):
        step()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as trace:
        step()
    return [(event.key, event.self_cpu_memory_usage / _MIB, event.self_cpu_time_total / 1e3)
            for event in trace.key_averages() if event.self_cpu_memory_usage >= 8 * _MIB]


def main() -> int:
    torch.set_num_threads(2)
    print("size MiB | fresh + fill ms | kept fill ms | fresh pages ms/MiB")
    for mib in SIZES_MIB:
        fresh, kept = fresh_and_kept_fill_ms(mib, repeats=max(5, 200 // mib))
        print(f"{mib:8d} | {fresh:15.3f} | {kept:12.3f} | {(fresh - kept) / mib:.3f}")
    print("allocations of 8 MiB or more in one iteration of Linear(9216, 4096) (its weight: 144 MiB):")
    for name, mib, ms in linear_allocations():
        print(f"  {name}: {mib:.1f} MiB, {ms:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
