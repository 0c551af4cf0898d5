"""Accuracy of the fingerprinting methods on the Jetson TX2 training measurements.

Two cases, each for memory (`mem_used`) and latency, MAPE in percent over passed rows:
  (a) the paper's protocol: per network, train on levels 0, 30, 50, 70, 90, evaluate on the rest;
  (b) unseen network: train on two networks (all levels), evaluate on the third.

    .venv/bin/python benchmarks/tx2_accuracy.py [--method paper --method ...]

Reads ../shared/datasets/tx2 (relative to the repository root); exits with a message when absent.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from perf4sight import console
from perf4sight.features import FEATURE_SETS, needs_complete_architecture
from perf4sight.fit import (
    METHODS,
    TARGETS,
    ArchitectureCatalog,
    architecture_name,
    build_dataset,
    fit_method,
    mape_pct,
    predict_rows,
    read_logs,
)

TX2_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "tx2"
NETS = ("resnet18", "googlenet", "squeezenet")
LEVELS = (0, 10, 20, 25, 30, 35, 45, 50, 65, 70, 75, 85, 90)
PROTOCOL_TRAIN_LEVELS = (0, 30, 50, 70, 90)


def _cases() -> list[tuple[str, str, dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]]:
    """(case, evaluated net, train {net: levels}, eval {net: levels})."""
    held_out = tuple(level for level in LEVELS if level not in PROTOCOL_TRAIN_LEVELS)
    cases = [("protocol", net, {net: PROTOCOL_TRAIN_LEVELS}, {net: held_out}) for net in NETS]
    cases += [("unseen", net, {other: LEVELS for other in NETS if other != net}, {net: LEVELS}) for net in NETS]
    return cases


def _mask(rows: pd.DataFrame, selection: dict[str, tuple[int, ...]]) -> np.ndarray:
    levels = rows["model"].str.rsplit("_", n=1).str[1].astype(int)
    return np.logical_or.reduce([(rows["net"] == net) & levels.isin(lv) for net, lv in selection.items()])


def evaluate_method(method: str, catalogs: dict[bool, ArchitectureCatalog]) -> dict[tuple[str, str], dict[str, float]]:
    """MAPE per (case, net) and target kind for one method."""
    feature_set = METHODS[method].feature_set
    catalog = catalogs.setdefault(
        needs_complete_architecture(feature_set),
        ArchitectureCatalog(TX2_DIR / "models", complete=needs_complete_architecture(feature_set)),
    )
    results: dict[tuple[str, str], dict[str, float]] = {}
    for target in TARGETS:
        logs = read_logs(NETS, LEVELS, [TX2_DIR / target.kind], [target.column])
        full = build_dataset(logs, target=target.column, feature_set=feature_set, stage="training", catalog=catalog)
        for case, net, train, evaluation in _cases():
            estimator = fit_method(method, full.select(_mask(full.rows, train)), target.column)
            predicted = predict_rows(estimator, full.select(_mask(full.rows, evaluation)))
            results.setdefault((case, net), {})[target.kind] = mape_pct(predicted["measured"], predicted["predicted"])
    return results


def memory_boundary(method: str, catalog: ArchitectureCatalog) -> dict[str, tuple[float, float]]:
    """Per unseen network: % of its tests (passed or not) whose fit/no-fit is predicted right,
    and % of its passed tests whose memory is under-estimated (what crashes a user's run).

    A method with `predict_fits` decides itself; any other fits when its prediction is at
    most the largest `mem_used` measured in training.
    """
    logs = read_logs(NETS, LEVELS, [TX2_DIR / "memory"], ["mem_used"])
    feature_set = METHODS[method].feature_set
    passed = set(zip(logs.loc[logs["passed"], "model"].map(architecture_name), logs.loc[logs["passed"], "bs"]))
    every = build_dataset(logs, target="mem_used", feature_set=feature_set, stage="training", catalog=catalog,
                          passed_only=False)
    ok = np.array([(m, b) in passed for m, b in zip(every.rows["model"], every.rows["batch_size"])])
    out = {}
    for net in NETS:
        held_out = (every.rows["net"] == net).to_numpy()
        train = every.select(~held_out & ok)
        estimator = fit_method(method, train, "mem_used")
        test = every.select(held_out)
        if hasattr(estimator, "predict_fits"):
            fits = estimator.predict_fits(test.features)
        else:
            fits = estimator.predict(test.features) <= train.target.max()
        test_ok = ok[held_out]
        under = estimator.predict(test.features)[test_ok] < test.target[test_ok]
        out[net] = (100 * float(np.mean(fits == test_ok)), 100 * float(np.mean(under)))
    return out


def feature_ms(feature_set: str, catalog: ArchitectureCatalog, batch_sizes: list[int]) -> float:
    """Median time to compute one network's features for all `batch_sizes`, in ms."""
    times = []
    for net in NETS:
        for level in LEVELS:
            arch = catalog.get(f"{net}_{level}")
            start = time.perf_counter()
            FEATURE_SETS[feature_set](arch, batch_sizes, "training")
            times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", action="append", choices=sorted(METHODS),
                        help="method to evaluate (repeatable); default: every method")
    args = parser.parse_args(argv)
    if not (TX2_DIR / "models").is_dir():
        print(f"TX2 dataset not found at {TX2_DIR}; nothing to benchmark")
        return 0
    catalogs: dict[bool, ArchitectureCatalog] = {}
    for method in args.method or list(METHODS):
        start = time.perf_counter()
        results = evaluate_method(method, catalogs)
        seconds = time.perf_counter() - start
        rows = [(case, net, r["memory"], r["latency"]) for (case, net), r in results.items()]
        for case in ("protocol", "unseen"):
            mem = [r["memory"] for (c, _), r in results.items() if c == case]
            lat = [r["latency"] for (c, _), r in results.items() if c == case]
            rows.append((case, "mean", float(np.mean(mem)), float(np.mean(lat))))
        console.print_table(f"TX2 MAPE %, method = {method} ({seconds:.1f} s)",
                            ("case", "evaluated net", "memory (mem_used)", "latency"), rows)
        feature_set = METHODS[method].feature_set
        boundary = memory_boundary(method, catalogs[needs_complete_architecture(feature_set)])
        rows = [(net, *values) for net, values in boundary.items()]
        rows.append(("mean", *np.mean(list(boundary.values()), axis=0).tolist()))
        console.print_table(f"TX2 memory boundary, unseen network, method = {method}",
                            ("evaluated net", "fit / no fit right %", "memory under-estimated %"), rows)
        sizes = list(range(8, 208, 8))
        ms = feature_ms(feature_set, catalogs[needs_complete_architecture(feature_set)], sizes)
        console.info(f"'{feature_set}' features of one network for {len(sizes)} batch sizes: {ms:.2f} ms (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
