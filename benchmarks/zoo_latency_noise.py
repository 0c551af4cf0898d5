"""How much of the CPU zoo's latency error is the measurement's: a method judged, each family left
out, against the mean of k of the merged campaigns, for growing k.

Each test of the zoo's `latency/` holds every campaign's timed iterations in campaign order
(`zoo_latency_passes.py`, `ITERATIONS` each). For each k of `--sizes`, up to `--subsets` sets of
k campaigns (consecutive ones, from starts spread over the campaigns) become a log folder whose
latency is the mean of those campaigns' iterations, and the method is fitted and judged on it as
`zoo_accuracy.py` does. If each campaign's drift is its own, the error against the mean of k is
about sqrt(m^2 + s^2 / k): m the model's own, s one campaign's drift. Prints the mean over families
per set, the mean per k, and m and s fitted to those by least squares, with the error the fit
expects against the mean of every campaign and of twice as many.

    .venv/bin/python benchmarks/zoo_latency_noise.py [--method planes] [--sizes 1,2,3,5,11]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from perf4sight import console
from perf4sight.device.definitions import LATENCY
from perf4sight.device.logs import GT_SUFFIX, append_row, latest_rows, read_journal, write_gt
from perf4sight.fit import DEFAULT_METHOD, METHODS, ArchitectureCatalog
from tx2_accuracy import profiled
from zoo_accuracy import ZOO_DIR, leave_family_out
from zoo_latency_passes import ITERATIONS


def latency_rows(logs: Path) -> dict[str, list[dict]]:
    """Each latency journal's latest rows, by the journal's name, read once for every set."""
    return {journal.name: list(latest_rows(read_journal(journal)).values())
            for journal in sorted((logs / LATENCY.kind).glob("*.csv")) if not journal.name.endswith(GT_SUFFIX)}


def campaigns_held(journals: dict[str, list[dict]], logs: Path) -> int:
    """The number of campaigns every passed latency test holds (its iterations over
    `ITERATIONS`); an error naming `logs` where tests hold different numbers."""
    counts = {len(row["latency_iters_ms"]) // ITERATIONS for rows in journals.values() for row in rows if row["passed"]}
    if len(counts) != 1:
        raise SystemExit(f"{logs / LATENCY.kind}: tests hold different numbers of campaigns: {sorted(counts)}")
    return counts.pop()


def subset_folder(logs: Path, journals: dict[str, list[dict]], campaigns: tuple[int, ...], out: Path) -> Path:
    """`out`: `logs` with each latency test of `journals` the mean of `campaigns`' iterations
    (memory, models and environment records as they are)."""
    out.mkdir(parents=True)
    for entry in logs.iterdir():
        if entry.name != LATENCY.kind:
            (out / entry.name).symlink_to(entry.resolve())
    for name, rows in journals.items():
        target = out / LATENCY.kind / name
        for row in rows:
            if row["passed"]:
                times = [t for c in campaigns for t in row["latency_iters_ms"][c * ITERATIONS:(c + 1) * ITERATIONS]]
                row = {**row, "latency": float(np.mean(times)), "latency_iters_ms": times}
            append_row(target, LATENCY.kind, row)
        write_gt(target, LATENCY.kind)
    return out


def subsets(total: int, size: int, count: int) -> list[tuple[int, ...]]:
    """Up to `count` sets of `size` consecutive campaigns (wrapping round), their starts spread
    evenly over the `total` campaigns."""
    if size >= total:
        return [tuple(range(total))]
    starts = sorted({round(i * total / count) % total for i in range(count)})
    return [tuple((start + i) % total for i in range(size)) for start in starts]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="planes", choices=sorted([*METHODS, DEFAULT_METHOD]),
                        help="method to judge (default: %(default)s)")
    parser.add_argument("--logs", type=Path, default=ZOO_DIR, help="folder with memory/, latency/ and models/")
    parser.add_argument("--sizes", default="1,2,3,5,all", help="numbers of campaigns to average (default: %(default)s)")
    parser.add_argument("--subsets", type=int, default=3, help="sets of campaigns per number (default: %(default)s)")
    args = parser.parse_args(argv)
    asked = args.sizes.split(",")
    if any(size != "all" and not (size.isdigit() and int(size) > 0) for size in asked):
        parser.error(f"--sizes: {args.sizes!r}: numbers of campaigns above 0, or 'all', comma-separated")
    console.set_quiet(True)
    journals = latency_rows(args.logs)
    total = campaigns_held(journals, args.logs)
    sizes = sorted({total if size == "all" else min(int(size), total) for size in asked})
    nets, levels = profiled(args.logs)
    catalog = ArchitectureCatalog(args.logs / "models")
    rows, per_size = [], {}
    with tempfile.TemporaryDirectory() as scratch:
        for size in sizes:
            for campaigns in subsets(total, size, args.subsets):
                folder = subset_folder(args.logs, journals, campaigns, Path(scratch) / "-".join(map(str, campaigns)))
                results, _, _ = leave_family_out(args.method, folder, catalog, nets, levels)
                error = float(np.mean([r[LATENCY.name] for r in results.values()]))
                per_size.setdefault(size, []).append(error)
                rows.append((size, " ".join(map(str, campaigns)), error))
                shutil.rmtree(folder)
    console.print_table(f"CPU zoo latency, each family left out, method = {args.method}, against the mean of k "
                        f"of {total} campaigns (MAPE %)", ("k", "campaigns", LATENCY.name), rows)
    k = np.array(sorted(per_size), dtype=float)
    means = np.array([np.mean(per_size[size]) for size in sorted(per_size)])
    (model_sq, drift_sq), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(k), 1 / k]), means**2, rcond=None)
    model, drift = np.sqrt(max(model_sq, 0.0)), np.sqrt(max(drift_sq, 0.0))
    console.print_table("error = sqrt(m^2 + s^2 / k), fitted to the mean per k", ("k", "measured", "fitted"),
                        [(int(size), mean, float(np.sqrt(model**2 + drift**2 / size))) for size, mean in zip(k, means)]
                        + [(2 * total, float("nan"), float(np.sqrt(model**2 + drift**2 / (2 * total))))])
    print(f"m (the model's own) {model:.2f} %, s (one campaign's drift) {drift:.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
