"""Accuracy where the query differs from everything profiled: fit on one profiled set, evaluate on another.

Each method is fitted on every passed run of the training set (`--train-logs`, `--train-models`)
and evaluated on every passed run of the other (`--eval-logs`, `--eval-models`), for memory
(`mem_used_mib`) and latency (`latency_ms`), as the tool predicts (calibrated where a network's family, at the same
input size, was trained on); MAPE in percent per evaluated network. The two sets may differ in
input size (the demo's 3x64x64 against `examples/cpu_resolution.ini`'s 3x128x128), in networks,
or in both; what is evaluated was never seen by the fit.

    make demo
    .venv/bin/perf4sight run --config examples/cpu_resolution.ini
    .venv/bin/python benchmarks/transfer_accuracy.py --train-logs out/demo/logs --train-models out/demo/models \
        --eval-logs out/resolution/logs --eval-models out/resolution/models
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from perf4sight import console
from perf4sight.device.definitions import LATENCY, MEMORY, QUANTITIES, Quantity
from perf4sight.fit import (
    METHODS,
    ArchitectureCatalog,
    CalibratedModel,
    Dataset,
    build_dataset,
    mape_pct,
    read_logs,
)
from tx2_accuracy import profiled


def _dataset(logs: Path, models: Path, feature_set: str, target: Quantity) -> Dataset:
    nets, levels = profiled(logs)
    if not nets:
        raise SystemExit(f"no logs under {logs / MEMORY.kind}")
    runs = read_logs(nets, levels, [logs / target.kind], [target])
    catalog = ArchitectureCatalog(models)
    return build_dataset(runs, target=target.name, feature_set=feature_set, stage="training", catalog=catalog)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for role in ("train", "eval"):
        parser.add_argument(f"--{role}-logs", type=Path, required=True, help=f"{role} set: folder with memory/, latency/")
        parser.add_argument(f"--{role}-models", type=Path, required=True, help=f"{role} set: folder of the specs")
    parser.add_argument("--method", action="append", choices=sorted(METHODS),
                        help="method to evaluate (repeatable); default: every method")
    args = parser.parse_args(argv)
    for method in args.method or list(METHODS):
        feature_set = METHODS[method].feature_set
        results: dict[str, dict[str, float]] = {}
        for target in QUANTITIES:
            train = _dataset(args.train_logs, args.train_models, feature_set, target)
            evaluated = _dataset(args.eval_logs, args.eval_models, feature_set, target)
            # as the tool predicts: a network of a profiled family (same input size) is calibrated
            model = CalibratedModel(method, target.name, train.stage).fit(train.rows, train.target)
            predicted = model.predict(evaluated.rows)
            rows = evaluated.rows.assign(predicted=predicted)
            for net, group in rows.groupby("net", sort=True):
                results.setdefault(str(net), {})[target.name] = mape_pct(group["measured"], group["predicted"])
            results.setdefault("all", {})[target.name] = mape_pct(rows["measured"], rows["predicted"])
        table = [(net, r[MEMORY.name], r[LATENCY.name]) for net, r in results.items()]
        console.print_table(f"{args.eval_logs} predicted from {args.train_logs}, MAPE %, method = {method}",
                            ("evaluated net", MEMORY.name, LATENCY.name), table)
        means = np.mean([[r[MEMORY.name], r[LATENCY.name]] for net, r in results.items() if net != "all"], axis=0)
        console.info(f"mean over networks: {MEMORY.name} {means[0]:.2f} %, {LATENCY.name} {means[1]:.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
