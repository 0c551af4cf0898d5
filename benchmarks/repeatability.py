"""Repeatability of a device's measurements: the same tests profiled in two campaigns.

A model's error against one campaign cannot fall much below the difference between two
campaigns of the same tests, so this is the floor to read the accuracy figures against.
Tests are matched by model, stage and batch size among the passed rows of both log folders'
`-gt.csv` files; for each quantity (`mem_used_mib`, `latency_ms`) and batch size, the mean and
median of |second / first - 1| in percent. For latency, also the spread within one test (the
coefficient of variation of its timed iterations, `latency_iters_ms`) in each campaign: when
it is much smaller than the difference between campaigns, more iterations per test would not
bring the two closer.

    .venv/bin/python benchmarks/repeatability.py --first benchmarks/data/h200 --second benchmarks/data/h200-rerun
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from perf4sight import console
from perf4sight.device.definitions import LATENCY, QUANTITIES, Quantity
from perf4sight.device.logs import GT_SUFFIX
from perf4sight.fit import architecture_name
from perf4sight.fit.logs import read_gt_log


def passed_rows(log_dir: Path, quantity: Quantity) -> pd.DataFrame:
    """Passed rows of every `-gt.csv` under `log_dir/<kind>`: test key and measured value."""
    frames = []
    for path in sorted((log_dir / quantity.kind).glob(f"*{GT_SUFFIX}")):
        log = read_gt_log(path, [quantity])
        log = log[log["passed"]]
        stage = log["stage"] if "stage" in log.columns else "training"
        frames.append(pd.DataFrame({
            "model": log["model"].map(architecture_name), "stage": stage, "bs": log["bs"],
            "value": log[quantity.name].astype(float),
            "iterations": log["latency_iters_ms"] if "latency_iters_ms" in log.columns else None,
        }))
    if not frames:
        raise SystemExit(f"no {quantity.kind} logs ({GT_SUFFIX}) under {log_dir / quantity.kind}")
    # a test repeated within one campaign counts once, its first run
    return pd.concat(frames, ignore_index=True).drop_duplicates(["model", "stage", "bs"])


def _spread_pct(times: object) -> float:
    """Coefficient of variation (%) of one test's timed iterations (the log's list), NaN when
    fewer than two."""
    if not isinstance(times, list) or len(times) < 2:
        return np.nan
    values = np.asarray(times, dtype=float)
    return float(100 * values.std() / values.mean())


def compare(first: Path, second: Path, quantity: Quantity,
            stage: str | None = None) -> tuple[pd.DataFrame, list[float]]:
    """Per batch size (and all): pairs, mean and median |difference| %; and each campaign's
    mean within-test spread (%) over the matched tests (NaN without iteration times).
    `stage`: only the tests of that stage."""
    a, b = passed_rows(first, quantity), passed_rows(second, quantity)
    pairs = a.merge(b, on=["model", "stage", "bs"], suffixes=("_first", "_second"))
    if stage is not None:
        pairs = pairs[pairs["stage"] == stage]
    if pairs.empty:
        raise SystemExit(f"no {quantity.kind} test{f' of stage {stage}' if stage else ''} passed in both {first} "
                         f"and {second}")
    pairs["diff_pct"] = 100 * (pairs["value_second"] / pairs["value_first"] - 1).abs()
    rows = [(str(bs), len(group), group["diff_pct"].mean(), group["diff_pct"].median())
            for bs, group in pairs.groupby("bs")]
    rows.append(("all", len(pairs), pairs["diff_pct"].mean(), pairs["diff_pct"].median()))
    table = pd.DataFrame(rows, columns=["batch size", "pairs", "mean |diff| %", "median |diff| %"])
    spreads = [float(np.nanmean(pairs[f"iterations_{side}"].map(_spread_pct)))
               if pairs[f"iterations_{side}"].notna().any() else np.nan for side in ("first", "second")]
    return table, spreads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=Path, required=True, help="log folder of one campaign (memory/, latency/)")
    parser.add_argument("--second", type=Path, required=True, help="log folder of a campaign of the same tests")
    parser.add_argument("--stage", choices=("training", "inference"), help="only this stage (default: both)")
    args = parser.parse_args(argv)
    for quantity in QUANTITIES:
        table, spreads = compare(args.first, args.second, quantity, args.stage)
        console.print_table(f"{quantity.name}: {args.second} against {args.first}", list(table.columns),
                            table.round(2).values.tolist())
        if quantity == LATENCY:
            print("within one test, the timed iterations' coefficient of variation: "
                  + ", ".join(f"{name} {value:.2f} %" for name, value in zip(("first", "second"), spreads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
