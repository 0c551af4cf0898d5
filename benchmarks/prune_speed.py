"""Pruning speed: one network at 19 levels (0 to 90 in steps of 5), graph built once.

Prints, per network, the time to build it and its dependency graph, the time to prune
it at every level (searching for each level on the meta device), the time to describe
every pruned network as a spec, and the levels reached.

    .venv/bin/python benchmarks/prune_speed.py [--networks resnet18 mobilenet_v2] [--mode random]
"""

from __future__ import annotations

import argparse
import time

from perf4sight.networks import ChannelPruner, spec_from_module
from perf4sight.networks.registry import build_torchvision, resolve_network

LEVELS = list(range(0, 91, 5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=["resnet18", "mobilenet_v2", "squeezenet", "googlenet"])
    parser.add_argument("--mode", default="random", choices=["random", "l1-norm"])
    parser.add_argument("--input-size", type=int, nargs=3, default=[3, 224, 224])
    args = parser.parse_args()
    size = tuple(args.input_size)
    print(f"mode {args.mode}, input {'x'.join(map(str, size))}, {len(LEVELS)} levels 0..90")
    print(f"{'network':<14}{'setup s':>9}{'prune s':>9}{'per level s':>13}{'specs s':>9}{'worst |reached-target|':>24}")
    for network in args.networks:
        start = time.perf_counter()
        base = build_torchvision(network, num_classes=1000, device="meta" if args.mode == "random" else "cpu", seed=0)
        pruner = ChannelPruner(base, input_size=size, mode=args.mode, seed=0, name=network)
        built = time.perf_counter()
        pruned = [pruner.prune(level, meta=True) for level in LEVELS]
        done = time.perf_counter()
        builder, kwargs = resolve_network(network)
        for level, result in zip(LEVELS, pruned):
            spec_from_module(result.module, name=f"{network}_{level}", net=network, prune_level=level,
                             input_size=size, num_classes=1000, torchvision_name=builder, torchvision_kwargs=kwargs)
        described = time.perf_counter()
        worst = max(abs(r.level - r.target_level) for r in pruned)
        prune_s = done - built
        print(f"{network:<14}{built - start:>9.2f}{prune_s:>9.2f}{prune_s / len(LEVELS):>13.3f}"
              f"{described - done:>9.2f}{worst:>24.2f}")


if __name__ == "__main__":
    main()
