"""The C library's heap holes: a plain training loop's, read from glibc, against the replay's.

For each torchvision network (3x64x64, 10 classes, SGD with momentum 0.9 and weight decay
5e-4, as the CPU zoo trains), a plain loop runs three iterations in a process of its own and
reads glibc's `mallinfo2` after each forward, backward and step: where the heap and the mapped
chunks together were largest, how much of the heap was free (`fordblks`), above what was free
before the network was built. Beside it, what the heap
replay (`perf4sight.features.c_heap`) finds the heap holds beyond the live tensors at its peak,
from the network's recorded tensor lifetimes. Linux with glibc only.

    .venv/bin/python benchmarks/heap_holes.py [--batch-size 2] [--net resnet18 ...]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import platform
import subprocess
import sys

NETWORKS = ("alexnet", "vgg11", "resnet18", "resnet34", "resnet50", "wide_resnet50_2", "resnext50_32x4d",
            "regnet_x_400mf", "mobilenet_v2", "efficientnet_b0", "convnext_tiny", "densenet121")
INPUT = (3, 64, 64)
CLASSES = 10
MIB = 1 << 20


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _loop(net: str, batch_size: int) -> float:
    """Run in a process of its own: the heap's free bytes above its start where the heap and
    the mapped chunks held the most, MiB."""
    import torch
    import torchvision

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    torch.set_num_threads(2)
    start = libc.mallinfo2().fordblks
    model = getattr(torchvision.models, net)(num_classes=CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x, y = torch.randn(batch_size, *INPUT), torch.randint(0, CLASSES, (batch_size,))
    readings = []

    def read() -> None:
        info = libc.mallinfo2()
        readings.append((info.arena + info.hblkhd, info.fordblks))

    for _ in range(3):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        read()
        loss.backward()
        read()
        optimizer.step()
        read()
    return (max(readings)[1] - start) / MIB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--net", action="append", help="torchvision network (repeatable); default: twelve of the zoo's")
    parser.add_argument("--loop", help=argparse.SUPPRESS)  # the plain loop, in a process of its own
    args = parser.parse_args(argv)
    if args.loop:
        print(json.dumps(_loop(args.loop, args.batch_size)))
        return 0
    if platform.libc_ver()[0] != "glibc":
        print("not a glibc system: nothing to compare")
        return 0
    from perf4sight import console
    from perf4sight.architecture import Detail
    from perf4sight.features.c_heap import heap_replay
    from perf4sight.networks import load_architecture

    rows = []
    for net in args.net or NETWORKS:
        done = subprocess.run([sys.executable, __file__, "--loop", net, "--batch-size", str(args.batch_size)],
                              check=True, capture_output=True, text=True)
        measured = json.loads(done.stdout.strip().splitlines()[-1])
        arch = load_architecture(net, needs=Detail.LIFETIMES, input_size=INPUT, num_classes=CLASSES)
        peaks = heap_replay(arch.lifetimes["training"], args.batch_size)
        rows.append((net, measured, (peaks.peak_resident - peaks.peak_live) / MIB, peaks.peak_live / MIB))
    console.print_table(f"heap holes at batch size {args.batch_size}, MiB",
                        ("network", "plain loop: free in the heap where it held most", "replay: resident beyond live at its peak",
                         "replay: live peak"), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
