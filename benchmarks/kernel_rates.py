"""What the memory-bound kernels of this machine's CPU cost per byte they move, in training.

Each kernel runs forward and backward on one float32 tensor of 32x64x32x32 (8 MiB), two threads,
timed as the mean of 20 iterations after one (`drift_reference.mean_ms`); its cost is given per GB of its input and
output, read and written once each way (what the features count as its bytes: `<group>_bytes`). A
kernel that loops per element (pooling over channels-first maps) is slower per byte than one that
vectorises (an activation, an addition): why pooling has a latency rate of its own
(`perf4sight.features.network`, the `pooling` term).

    .venv/bin/python benchmarks/kernel_rates.py
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F  # noqa: N812 (PyTorch's name)

from drift_reference import mean_ms
from perf4sight import console

SHAPE = (32, 64, 32, 32)
ITERATIONS = 20
KERNELS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu (act)": F.relu,
    "batch norm (norm)": lambda x: F.batch_norm(x, None, None, training=True),
    "add (elementwise)": lambda x: x + x,
    "max pool 3x3, stride 2 (pool)": lambda x: F.max_pool2d(x, 3, 2, 1),
    "max pool 3x3, stride 1 (pool)": lambda x: F.max_pool2d(x, 3, 1, 1),
    "max pool 2x2, stride 2 (pool)": lambda x: F.max_pool2d(x, 2, 2),
    "avg pool 2x2, stride 2 (pool)": lambda x: F.avg_pool2d(x, 2),
    "global avg pool (pool)": lambda x: F.adaptive_avg_pool2d(x, 1),
}


def training_pass(kernel: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> Callable[[], None]:
    """One forward and backward pass of `kernel` on `x`."""
    def work() -> None:
        out = kernel(x)
        out.backward(torch.ones_like(out))
    return work


def main() -> None:
    torch.set_num_threads(2)
    x = torch.randn(SHAPE, requires_grad=True)
    rows = []
    for name, kernel in KERNELS.items():
        ms = mean_ms(training_pass(kernel, x), ITERATIONS)
        moved_gb = (x.numel() + kernel(x.detach()).numel()) * x.element_size() * 2 / 1e9
        rows.append((name, ms, ms / moved_gb))
    relu = rows[0][2]
    console.print_table(f"memory-bound kernels, forward and backward, {'x'.join(map(str, SHAPE))} float32, 2 threads",
                        ("kernel", "ms", "ms per GB moved", "x relu's"), [(*row, row[2] / relu) for row in rows])


if __name__ == "__main__":
    main()
