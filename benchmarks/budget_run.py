"""A campaign planned for a time budget, run with the budget kept and then to its end.

The demo's six networks (`examples/cpu_quick.ini`: seven levels, batch sizes 2 to 128, memory
and latency) are pruned into a scratch folder, `perf4sight profile plan --minutes M` plans the
campaign on this machine, and `perf4sight profile run` runs it twice: with `budget_minutes` the
share F of M (no test starts once its tests have held the CPU that long: F below 1 stands for a
plan whose estimate fell short, F = 1 is the plan's own budget), then without a budget, which
runs what the first left. Then, with `--again`, a second plan of M minutes is made on those logs
(what has run costs nothing, the rest is timed by what it took against its estimates) and run.
Printed: each plan's estimate, each run's wall time, device minutes (the logs' `test_s`) and
tests, so that what a whole plan took (what a run without the stop spends) stands beside what
the budget let run, and the second plan's estimate beside what its tests took.

    .venv/bin/python -u benchmarks/budget_run.py [--minutes 5] [--share 0.6] [--again]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "import sys; from perf4sight.cli import main; sys.exit(main(sys.argv[1:]))"]


def _config(work: Path, minutes: float | None) -> Path:
    """cpu_quick.ini's pruning and profiling in `work`, with `minutes` as the budget (None: none)."""
    text = (ROOT / "examples" / "cpu_quick.ini").read_text()
    text = text[:text.index("[fingerprint]")].replace("out/quick", str(work))
    text = text.replace("budget_minutes = 15\n", "" if minutes is None else f"budget_minutes = {minutes:g}\n")
    path = work / ("budget.ini" if minutes is not None else "rest.ini")
    path.write_text(text)
    return path


def _cli(args: list[str]) -> tuple[float, str]:
    """Run the command line; its wall seconds and output (stop on failure)."""
    started = time.monotonic()
    done = subprocess.run(CLI + args, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: exit {done.returncode}\n{done.stderr}")
    return time.monotonic() - started, done.stdout + done.stderr


def _logged(log_dir: Path) -> pd.DataFrame:
    return pd.concat([pd.read_csv(path, sep="|") for path in log_dir.glob("*/*-gt.csv")], ignore_index=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="the plan's budget")
    parser.add_argument("--share", type=float, default=0.6, help="the first run's budget, a share of the plan's")
    parser.add_argument("--again", action="store_true", help="then plan again on the logs, and run that plan")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="p4s-budget-") as scratch:
        work = Path(scratch)
        budget, rest = _config(work, args.minutes * args.share), _config(work, None)
        text = budget.read_text()
        prune = budget.with_name("prune.ini")
        prune.write_text(text[:text.index("[profile]")])
        _cli(["-q", "run", "--config", str(prune)])
        _plan(budget, args.minutes)
        rest.write_text(rest.read_text().replace("[profile]\n", "[profile]\ncreate_config = False\n"))
        budget.write_text(budget.read_text().replace("[profile]\n", "[profile]\ncreate_config = False\n"))
        log_dir = work / "logs"
        first_s, said = _cli(["profile", "run", "--config", str(budget)])
        first = _logged(log_dir)
        left = re.search(r"(\d+) tests not run", " ".join(said.split()))
        second_s, _ = _cli(["profile", "run", "--config", str(rest)])
        every = _logged(log_dir)
        print(f"the first run's budget: {args.minutes * args.share:g} minutes")
        rows = [("with the budget", first_s, first["test_s"].sum(), len(first), int(left.group(1)) if left else 0),
                ("then without, the rest", second_s, every["test_s"].sum() - first["test_s"].sum(),
                 len(every) - len(first), 0),
                ("the whole plan", first_s + second_s, every["test_s"].sum(), len(every), 0)]
        print(f"{'run':<24} {'wall min':>9} {'device min':>11} {'tests':>6} {'not run':>8}")
        for name, wall, device, tests, not_run in rows:
            print(f"{name:<24} {wall / 60:>9.2f} {device / 60:>11.2f} {tests:>6} {not_run:>8}")
        if args.again:
            estimate = _plan(rest, args.minutes)
            third_s, _ = _cli(["profile", "run", "--config", str(rest)])
            new = _logged(log_dir)["test_s"].sum() - every["test_s"].sum()
            print(f"the second plan's tests: estimated {estimate:.2f} min, took {new / 60:.2f} device min "
                  f"({third_s / 60:.2f} wall min)")


def _plan(config: Path, minutes: float) -> float:
    """Plan `minutes` with `config`'s [profile]; print what was planned, return its estimate."""
    planning_s, said = _cli(["profile", "plan", "--config", str(config), "--minutes", f"{minutes:g}"])
    said = " ".join(said.split())
    found = re.search(r"planned (\d+) of (\d+) tests \(model, batch size\), about ([0-9.]+) of", said)
    assert found, said
    scaled = re.search(r"(\d+) of the candidates are in \S+ already: they took ([0-9.]+)x their estimates", said)
    print(f"plan: {found.group(1)} of {found.group(2)} (model, batch size) pairs, estimated {found.group(3)} of "
          f"{minutes:g} minutes; planning took {planning_s:.0f} s"
          + (f"; {scaled.group(1)} pairs already measured, at {scaled.group(2)}x their estimates" if scaled else ""))
    return float(found.group(3))


if __name__ == "__main__":
    main()
