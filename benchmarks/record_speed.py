"""Recording speed: a base network's training iteration recorded on the meta device (`replay`).

Prints, per torchvision network at 224x224, the best of five recordings of its training
tensor lifetimes (`record_timeline`, attributed to its trace, as a base is recorded), in
seconds of CPU time with one thread, in one process (the trace and the build are not timed).
With `--in-place-off`, each recording is also timed with the pointwise in-place ops run
every time (`_KnownOutputs` remembering new tensors only), the two ways interleaved: the
machines are shared, and their speed moves more between runs than the difference.

    .venv/bin/python benchmarks/record_speed.py [--networks resnet18 googlenet] [--in-place-off]
"""

from __future__ import annotations

import argparse
import functools
import time

import torch

from perf4sight.architecture import lifetimes, record_timeline
from perf4sight.console import set_quiet
from perf4sight.networks import load_architecture
from perf4sight.networks.registry import build_torchvision, build_uninitialised

NETWORKS = ["alexnet", "vgg11", "squeezenet1_0", "resnet18", "resnet50", "googlenet", "mnasnet1_0", "mobilenet_v2"]
REPEATS = 5
KIND = lifetimes._KnownOutputs._kind


def _fresh_only(mode: lifetimes._KnownOutputs, func: object) -> str | None:
    kind = KIND(mode, func)
    return None if kind == "in_place" else kind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=NETWORKS)
    parser.add_argument("--in-place-off", action="store_true", help="also time each with in-place ops run every time")
    args = parser.parse_args()
    set_quiet(True)
    torch.set_num_threads(1)
    size = (3, 224, 224)
    ways = {"record s": KIND, "in-place off s": _fresh_only} if args.in_place_off else {"record s": KIND}
    print(f"{'network':<16}{'events':>8}" + "".join(f"{way:>16}" for way in ways))
    for name in args.networks:
        arch = load_architecture(name, input_size=size, num_classes=1000)
        build = functools.partial(build_uninitialised, functools.partial(build_torchvision, name, num_classes=1000))
        best = dict.fromkeys(ways, float("inf"))
        for _ in range(REPEATS):
            for way, kind in ways.items():
                lifetimes._KnownOutputs._kind = kind
                start = time.process_time()
                timeline = record_timeline(build, size, 1000, "training", arch)
                best[way] = min(best[way], time.process_time() - start)
        lifetimes._KnownOutputs._kind = KIND
        print(f"{name:<16}{len(timeline.tensor):>8}" + "".join(f"{best[way]:>16.3f}" for way in ways))


if __name__ == "__main__":
    main()
