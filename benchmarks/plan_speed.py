"""`perf4sight plan` over 20 pruned variants of one network: how long a user waits.

`perf4sight plan --net NET --levels 0:95:5 --budget 4GiB` prunes NET at 20 levels, finds each
variant's largest batch size within the budget and ranks the variants by throughput. Timed as
wall time of fresh subprocesses, the best of `--runs` (the least disturbed), beside `python -c
"import torch, sklearn, pandas"` (what any command that loads models pays first): the command's
own work is the difference. The commands run with a disk cache of their own (`perf4sight.cache`),
empty for the first (cold: the network built and traced, its levels' widths found by its pruner)
and holding what that one kept for the others (cached: neither torchvision imported nor the
network built). Then the same planning in this process (`plan_variants`), the imports and the
models' loading already done.

    .venv/bin/python benchmarks/plan_speed.py [--models out/demo/fitted] [--net resnet18] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from cli_speed import PERF4SIGHT, best_wall_s
from perf4sight import console
from perf4sight.cache import DIR_VARIABLE
from perf4sight.cli.prune import parse_levels
from perf4sight.predict import Predictor
from perf4sight.predict.plan import plan_variants
from perf4sight.predict.units import parse_memory_mib

ROOT = Path(__file__).resolve().parents[1]
LEVELS = "0:95:5"
BUDGET = "4GiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=ROOT / "out" / "demo" / "fitted", help="fitted models' folder")
    parser.add_argument("--net", default="resnet18", help="network to plan for")
    parser.add_argument("--runs", type=int, default=3, help="runs per command; the best is printed")
    args = parser.parse_args()
    imports = best_wall_s([sys.executable, "-c", "import torch, sklearn, pandas"], 0, args.runs)
    command = [PERF4SIGHT, "--quiet", "plan", "--models", str(args.models), "--net", args.net, "--levels", LEVELS,
               "--budget", BUDGET]
    os.environ[DIR_VARIABLE] = tempfile.mkdtemp(prefix="plan_speed_cache_")  # the commands' and this process's
    cold = best_wall_s(command, 0, 1)
    cached = best_wall_s(command, 0, args.runs)
    print(f"import torch, sklearn, pandas: {imports:.2f} s")
    for label, whole in (("cold", cold), (f"cached, best of {args.runs}", cached)):
        print(f"perf4sight plan --net {args.net} --levels {LEVELS} --budget {BUDGET}, {label}: {whole:.2f} s "
              f"(own work {whole - imports:.2f} s)")

    console.set_quiet(True)
    predictor = Predictor.load(args.models)
    levels = parse_levels(LEVELS)
    best = float("inf")
    for _ in range(args.runs):
        start = time.perf_counter()
        plan = plan_variants(predictor=predictor, network=args.net, levels=levels, budget_mib=parse_memory_mib(BUDGET))
        best = min(best, time.perf_counter() - start)
    print(f"in this process, models loaded: {len(levels)} variants planned in {best:.2f} s "
          f"({len(plan)} feasible rows)")


if __name__ == "__main__":
    main()
