"""The `network` features under training recipes against this machine's CPU memory.

For each network and recipe, one training iteration per batch size is measured as the
profiler measures it on a CPU (`CpuBackend`: the worker's anonymous peak minus its idle
value, after a throw-away run at batch size 2), each in a fresh process, the model
prepared, stepped and optimized by `perf4sight.device.workload.iteration` under the recipe.
On a CPU nothing freed stays cached, so what memory grows by per sample is what the
features say the worst moment of the backward pass holds (`activation_peak_bytes`), and
what a recipe adds or removes at a fixed batch size is the exact state it changes
(`param_state_bytes`: weights, gradients, optimizer state; `optimizer_temp_bytes`).

Printed per network and recipe: the measured growth per sample (MiB, between the smallest
and the largest batch size) against the features' growth of `activation_peak_bytes`, and the
measured difference from the default recipe at the largest batch size against the features'
(`param_state + max(activation_peak, optimizer_temp)` differences).

    PYTHONPATH=src .venv/bin/python benchmarks/recipe_memory_cpu.py
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys

from perf4sight.device.recipe import Recipe

NETWORKS = {"resnet18": "layer4", "mobilenet_v2": "features.14"}
INPUT_SIZE = (3, 64, 64)
BATCH_SIZES = (8, 32)
_MIB = float(1 << 20)


def recipes(first: str) -> list[Recipe]:
    return [Recipe(), Recipe(optimizer="adam"), Recipe(optimizer="sgd-plain"), Recipe(trainable=first),
            Recipe(trainable="classifier"), Recipe(precision="amp-bf16"), Recipe(checkpoint_segments=4),
            Recipe(optimizer="adamw", trainable=first, precision="amp-bf16", checkpoint_segments=4)]


def _measure(net: str, recipe: tuple, batch_size: int, out: multiprocessing.Queue) -> None:
    """One memory test in this (fresh) process: the profiler's dry run, then the measured iterations."""
    import torch

    from perf4sight.device.backends import CpuBackend
    from perf4sight.device.workload import iteration
    from perf4sight.networks import load_network

    torch.manual_seed(0)
    backend = CpuBackend()
    backend.setup()
    chosen = Recipe(*recipe)

    def run(bs: int, steps: int) -> None:
        network = load_network(net, input_size=INPUT_SIZE)
        inputs = torch.randn(bs, *network.input_size)
        step = iteration(network.module, "training", inputs, network.num_classes, recipe=chosen)
        for _ in range(steps):
            step()

    run(2, 1)
    backend.release()
    backend.memory_begin()
    run(batch_size, 3)
    out.put(backend.memory_end().mem_used)


def measured_mib(net: str, recipe: Recipe, batch_size: int) -> float:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_measure, args=(net, tuple(recipe), batch_size, queue))
    process.start()
    value = queue.get(timeout=600)
    process.join()
    return float(value)


def predicted_mib(net: str, recipe: Recipe) -> dict[str, list[float]]:
    from perf4sight.features import network_features
    from perf4sight.networks import load_architecture

    table = network_features(load_architecture(net, input_size=INPUT_SIZE, recipe=recipe), list(BATCH_SIZES))
    demand = table["param_state_bytes"] + table[["activation_peak_bytes", "optimizer_temp_bytes"]].max(axis=1)
    return {"peak": (table["activation_peak_bytes"] / _MIB).tolist(), "demand": (demand / _MIB).tolist()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--networks", nargs="*", default=list(NETWORKS))
    args = parser.parse_args()
    low, high = BATCH_SIZES
    rows = []
    for net in args.networks:
        base = None
        for recipe in recipes(NETWORKS[net]):
            measured = [measured_mib(net, recipe, bs) for bs in BATCH_SIZES]
            predicted = predicted_mib(net, recipe)
            if base is None:
                base = (measured, predicted)
            slope = (measured[1] - measured[0]) / (high - low)
            feature_slope = (predicted["peak"][1] - predicted["peak"][0]) / (high - low)
            change = measured[1] - base[0][1]
            feature_change = predicted["demand"][1] - base[1]["demand"][1]
            row = {"network": net, "recipe": recipe.label(), "measured_mib": [round(m, 1) for m in measured],
                   "per_sample_mib": round(slope, 3), "features_per_sample_mib": round(feature_slope, 3),
                   "vs_default_mib": round(change, 1), "features_vs_default_mib": round(feature_change, 1)}
            rows.append(row)
            print(f"{net:13s} {recipe.label():60s} measured {measured[0]:7.1f} {measured[1]:7.1f} MiB | "
                  f"per sample {slope:6.3f} (features {feature_slope:6.3f}) | vs default at bs {high}: "
                  f"{change:+7.1f} (features {feature_change:+7.1f}) MiB", flush=True)
    json.dump(rows, sys.stderr)
    print(file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
