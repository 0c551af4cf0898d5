"""Recording speed: a base network's training iteration recorded on the meta device (`replay`).

Prints, per torchvision network at 224x224, the best of three recordings of its training
tensor lifetimes (`record_timeline`, attributed to its trace, as a base is recorded), in
seconds, in one process (the trace and the build are not timed).

    .venv/bin/python benchmarks/record_speed.py [--networks resnet18 googlenet]
"""

from __future__ import annotations

import argparse
import functools
import time

from perf4sight.architecture import record_timeline
from perf4sight.console import set_quiet
from perf4sight.networks import load_architecture
from perf4sight.networks.registry import build_torchvision, build_uninitialised

NETWORKS = ["alexnet", "vgg11", "squeezenet1_0", "resnet18", "resnet50", "googlenet", "mnasnet1_0", "mobilenet_v2"]
REPEATS = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=NETWORKS)
    args = parser.parse_args()
    set_quiet(True)
    size = (3, 224, 224)
    print(f"{'network':<16}{'events':>8}{'record s':>10}")
    for name in args.networks:
        arch = load_architecture(name, input_size=size, num_classes=1000)
        build = functools.partial(build_uninitialised, functools.partial(build_torchvision, name, num_classes=1000))
        times = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            timeline = record_timeline(build, size, 1000, "training", arch)
            times.append(time.perf_counter() - start)
        print(f"{name:<16}{len(timeline.tensor):>8}{min(times):>10.2f}")


if __name__ == "__main__":
    main()
