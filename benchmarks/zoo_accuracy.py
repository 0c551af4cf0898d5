"""Accuracy with each family of architectures left out, on the CPU zoo (`examples/cpu_zoo.ini`).

Four networks on one device cannot tell a model that generalises from one that fits them. The
zoo holds twenty torchvision architectures of twelve families, each at three pruning levels
and three batch sizes, profiled in training on this repository's CPU. For each family, every
method is fitted on the other families' runs (every level) and evaluated on all of this
family's (every network and level of it held out together), as fingerprinting fits and the
tool predicts (`default` chooses per split on the training rows alone). MAPE % per family for
memory (`mem_used_mib`) and latency (`latency_ms`), the mean over families, and where the
latency error lies: per family and batch size, the mean signed error.

    .venv/bin/python benchmarks/zoo_accuracy.py [--method physical --method ...]

The logs and specs are `benchmarks/data/cpu_zoo/` (made by `perf4sight run --config
examples/cpu_zoo.ini`; `--logs` for another folder of the same layout); `--memory-logs
benchmarks/data/cpu_zoo-rerun` judges memory on a second campaign of the same memory tests.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from perf4sight import console
from perf4sight.device.definitions import LATENCY, MEMORY, QUANTITIES
from perf4sight.fit import DEFAULT_METHOD, METHODS, ArchitectureCatalog, mape_pct, read_logs
from perf4sight.fit.logs import device_fresh_pages
from tx2_accuracy import fit_chosen, method_datasets, profiled, signed_error_pct

ZOO_DIR = Path(__file__).resolve().parent / "data" / "cpu_zoo"
# What is held out together: networks of one design (their widths, depths and pruned levels).
FAMILIES = {
    "plain": ("alexnet", "vgg11"),
    "resnet basic": ("resnet18", "resnet34"),
    "resnet bottleneck": ("resnet50", "wide_resnet50_2"),
    "resnext": ("resnext50_32x4d",),
    "regnet": ("regnet_x_400mf", "regnet_y_400mf", "regnet_y_800mf"),
    "mobilenet": ("mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large"),
    "mnasnet": ("mnasnet1_0",),
    "efficientnet": ("efficientnet_b0",),
    "convnext": ("convnext_tiny",),
    "googlenet": ("googlenet",),
    "densenet": ("densenet121",),
    "squeezenet": ("squeezenet1_0", "squeezenet1_1"),
}


def leave_family_out(method: str, logs_dir: Path, catalog: ArchitectureCatalog, nets: tuple[str, ...],
                     levels: tuple[int, ...], memory_dir: Path | None = None
                     ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, str]], dict[tuple[str, str], float]]:
    """MAPE per family and target, the method fitted for each, and the latency's mean signed
    error (%) per (family, batch size named as `signed_error_pct` names it: `bs 8`); the memory
    logs from `memory_dir` (default `logs_dir`)."""
    results: dict[str, dict[str, float]] = {}
    chosen_methods: dict[str, dict[str, str]] = {}
    signed: dict[tuple[str, str], float] = {}
    for target in QUANTITIES:
        folder = (memory_dir or logs_dir) if target is MEMORY else logs_dir
        logs = read_logs(nets, levels, [folder / target.kind], [target])
        fresh_pages = device_fresh_pages([folder / target.kind])  # as fingerprinting reads it
        full = {None: method_datasets(method, logs, target.name, catalog, "training",
                                      fresh_pages_ms_per_mib=fresh_pages)}
        rows = next(iter(full[None].values())).rows
        for family, members in FAMILIES.items():
            held = rows["net"].isin(members).to_numpy()
            if not held.any():
                continue
            trained = {None: {m: d.select(~held) for m, d in full[None].items()}}
            chosen, _, model = fit_chosen(method, trained, target.name)
            evaluated = full[None][chosen].select(held)
            predicted = model.predict(evaluated.rows)
            results.setdefault(family, {})[target.name] = mape_pct(evaluated.target, predicted)
            chosen_methods.setdefault(family, {})[target.name] = chosen
            if target is LATENCY:
                sizes = evaluated.rows["batch_size"]
                bands = signed_error_pct(predicted, evaluated.target, sizes, [(bs, bs) for bs in sorted(set(sizes))])
                signed.update({(family, band): error for band, error in bands.items()})
    return results, chosen_methods, signed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", action="append", choices=sorted([*METHODS, DEFAULT_METHOD]),
                        help="method to evaluate (repeatable); default: every method, then 'default'")
    parser.add_argument("--logs", type=Path, default=ZOO_DIR, help="folder with memory/, latency/ and models/")
    parser.add_argument("--memory-logs", type=Path, help="folder whose memory/ holds another campaign of the same "
                        "memory tests (benchmarks/data/cpu_zoo-rerun); default: --logs")
    args = parser.parse_args(argv)
    console.set_quiet(True)
    nets, levels = profiled(args.logs)
    if not nets:
        print(f"no logs under {args.logs / MEMORY.kind}; nothing to benchmark")
        return 0
    unknown = sorted(set(nets) - {net for members in FAMILIES.values() for net in members})
    if unknown:
        raise SystemExit(f"{args.logs}: networks of no family: {unknown}; add them to FAMILIES")
    catalog = ArchitectureCatalog(args.logs / "models")
    summary = []
    for method in args.method or [*METHODS, DEFAULT_METHOD]:
        start = time.perf_counter()
        results, chosen, signed = leave_family_out(method, args.logs, catalog, nets, levels, args.memory_logs)
        seconds = time.perf_counter() - start
        rows = [(family, ", ".join(n for n in FAMILIES[family] if n in nets), r[MEMORY.name], r[LATENCY.name],
                 chosen[family][MEMORY.name], chosen[family][LATENCY.name]) for family, r in results.items()]
        means = [float(np.mean([r[q.name] for r in results.values()])) for q in (MEMORY, LATENCY)]
        rows.append(("mean over families", "", *means, "", ""))
        summary.append((method, *means))
        console.print_table(f"CPU zoo, each family left out, training MAPE %, method = {method} ({seconds:.1f} s)",
                            ("family", "networks", MEMORY.name, LATENCY.name, f"{MEMORY.name} method",
                             f"{LATENCY.name} method"), rows)
        bands = list(dict.fromkeys(band for _, band in signed))
        console.print_table(f"latency, mean signed error % by batch size, method = {method}", ("family", *bands),
                            [(family, *(signed.get((family, band), float("nan")) for band in bands)) for family in results])
    console.print_table("CPU zoo, each family left out: mean over families, MAPE %",
                        ("method", MEMORY.name, LATENCY.name), summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
