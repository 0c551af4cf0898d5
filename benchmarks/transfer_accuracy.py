"""Accuracy where the query differs from everything profiled: fit on one profiled set, evaluate on another.

Each method is fitted on every passed run of the training set (`--train-logs`, `--train-models`)
as fingerprinting fits it (the device's fresh-page cost read from the training logs' environment
records, so a CPU's process-memory terms count; `default` chooses on the training runs alone)
and evaluated on every passed run of the other (`--eval-logs`, `--eval-models`), for memory
(`mem_used_mib`) and latency (`latency_ms`), as the tool predicts (calibrated where a network's
family, at the same input size, was trained on); MAPE in percent per evaluated network, and the
latency's mean signed error per batch size. The two sets may differ in input size (the demo's
3x64x64 against `examples/cpu_resolution.ini`'s 3x128x128), in networks, or in both; what is
evaluated was never seen by the fit; `--train-nets` and `--eval-nets` keep some networks of
either set. What a user with `make demo`'s fingerprint gets on the twenty networks of the CPU zoo
(same machine, same input size), and on the zoo's networks that none of the demo's six is, from
all six or from the original tool's three alone:

    make demo
    .venv/bin/python benchmarks/transfer_accuracy.py --train-logs out/demo/logs --train-models out/demo/models \
        --eval-logs benchmarks/data/cpu_zoo --eval-models benchmarks/data/cpu_zoo/models
    .venv/bin/python benchmarks/transfer_accuracy.py --train-logs out/demo/logs --train-models out/demo/models \
        --eval-logs benchmarks/data/cpu_zoo --eval-models benchmarks/data/cpu_zoo/models --eval-nets \
        convnext_tiny,densenet121,efficientnet_b0,googlenet,mnasnet1_0,mobilenet_v3_large,regnet_y_400mf,regnet_y_800mf,resnet34,resnet50,resnext50_32x4d,squeezenet1_1,vgg11,wide_resnet50_2 \
        [--train-nets resnet18,mobilenetv2,squeezenet]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from perf4sight import console
from perf4sight.device.definitions import LATENCY, MEMORY, QUANTITIES, Quantity
from perf4sight.fit import DEFAULT_METHOD, METHODS, ArchitectureCatalog, Dataset, mape_pct, read_logs
from perf4sight.fit.logs import device_fresh_pages
from tx2_accuracy import fit_chosen, method_datasets, profiled, signed_error_pct


def _datasets(method: str, logs: Path, models: Path, target: Quantity, fresh_pages: float | None,
              nets: list[str] | None) -> dict[str, Dataset]:
    """The passed training runs of `nets` (None: every network) under `logs` in each feature set
    `method` fits, on a device whose fresh pages cost `fresh_pages` ms per MiB (the training
    device's: the evaluated runs are predicted for it)."""
    profiled_nets, levels = profiled(logs)
    runs = read_logs(nets or profiled_nets, levels, [logs / target.kind], [target])
    return method_datasets(method, runs, target.name, ArchitectureCatalog(models), "training",
                           fresh_pages_ms_per_mib=fresh_pages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for role in ("train", "eval"):
        parser.add_argument(f"--{role}-logs", type=Path, required=True, help=f"{role} set: folder with memory/, latency/")
        parser.add_argument(f"--{role}-models", type=Path, required=True, help=f"{role} set: folder of the specs")
    for role in ("train", "eval"):
        parser.add_argument(f"--{role}-nets", type=lambda text: text.split(","),
                            help=f"{role} set: its networks to use, comma-separated (default: every one)")
    parser.add_argument("--method", action="append", choices=sorted([*METHODS, DEFAULT_METHOD]),
                        help=f"method to evaluate (repeatable); default: '{DEFAULT_METHOD}'")
    args = parser.parse_args(argv)
    for role in ("train", "eval"):
        logs, nets = getattr(args, f"{role}_logs"), getattr(args, f"{role}_nets")
        profiled_nets, _ = profiled(logs)
        if not profiled_nets:
            parser.error(f"--{role}-logs: no logs under {logs / MEMORY.kind}")
        unknown = sorted(set(nets or ()) - set(profiled_nets))
        if unknown:
            parser.error(f"--{role}-nets: {logs} holds no logs of {', '.join(unknown)} "
                         f"(it holds {', '.join(profiled_nets)})")
    console.set_quiet(True)
    summary = []
    for method in args.method or [DEFAULT_METHOD]:
        results: dict[str, dict[str, float]] = {}
        chosen: dict[str, str] = {}
        signed: dict[tuple[str, str], float] = {}
        for target in QUANTITIES:
            fresh_pages = device_fresh_pages([args.train_logs / target.kind])  # as fingerprinting reads it
            train = _datasets(method, args.train_logs, args.train_models, target, fresh_pages, args.train_nets)
            chosen[target.name], _, model = fit_chosen(method, {None: train}, target.name)
            # the evaluated runs in the chosen method's features alone (a replay's are seconds per base)
            evaluated = _datasets(chosen[target.name], args.eval_logs, args.eval_models, target, fresh_pages,
                                  args.eval_nets)[chosen[target.name]]
            predicted = model.predict(evaluated.rows)
            rows = evaluated.rows.assign(predicted=predicted, measured=evaluated.target)
            for net, group in rows.groupby("net", sort=True):
                results.setdefault(str(net), {})[target.name] = mape_pct(group["measured"], group["predicted"])
                if target is LATENCY:
                    sizes = group["batch_size"]
                    bands = signed_error_pct(group["predicted"].to_numpy(), group["measured"], sizes,
                                             [(bs, bs) for bs in sorted(set(rows["batch_size"]))])
                    signed.update({(str(net), band): error for band, error in bands.items()})
        means = [float(np.mean([r[q.name] for r in results.values()])) for q in (MEMORY, LATENCY)]
        summary.append((f"{method} ({chosen[MEMORY.name]} / {chosen[LATENCY.name]})", *means))
        bands = list(dict.fromkeys(band for _, band in signed))
        console.print_table(f"{args.eval_logs} predicted from {args.train_logs}, MAPE % and latency's signed error %, "
                            f"method = {method}", ("evaluated net", MEMORY.name, LATENCY.name, *bands),
                            [(net, r[MEMORY.name], r[LATENCY.name], *(signed.get((net, band), float("nan"))
                                                                     for band in bands))
                             for net, r in results.items()] + [("mean over networks", *means)])
    console.print_table("mean over the evaluated networks, MAPE % (the methods chosen for memory / latency)",
                        ("method", MEMORY.name, LATENCY.name), summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
