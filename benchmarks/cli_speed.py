"""Command-line speed: how long a wrong option takes to be answered, against importing the
packages a command's work needs.

Each is a fresh subprocess, timed as wall time from start to exit, the best of 5 runs (the
least disturbed by other processes):

- `python -c "import torch, sklearn, pandas"`: what a command that loaded its stage before
  checking its options would spend at least;
- `perf4sight predict --bs 8 --max-batch-size`: an argument error (click's: no --models);
- `perf4sight predict --models fitted --net resnet18 --bs 8 --max-batch-size`: a bad flag
  combination, refused by the command itself (no --budget);
- `perf4sight predict --models fitted --net resnet18 --bs 8 --bs 2`: a flag given twice;
- `perf4sight --help`.

    .venv/bin/python benchmarks/cli_speed.py [--runs 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

PERF4SIGHT = str(Path(sys.executable).with_name("perf4sight"))

COMMANDS: dict[str, tuple[list[str], int]] = {  # what is timed: the command and the exit code it must give
    "import torch, sklearn, pandas": ([sys.executable, "-c", "import torch, sklearn, pandas"], 0),
    "predict --bs 8 --max-batch-size": ([PERF4SIGHT, "predict", "--bs", "8", "--max-batch-size"], 2),
    "predict --models --net --bs 8 --max-batch-size": (
        [PERF4SIGHT, "predict", "--models", "fitted", "--net", "resnet18", "--bs", "8", "--max-batch-size"], 2),
    "predict --models --net --bs 8 --bs 2": (
        [PERF4SIGHT, "predict", "--models", "fitted", "--net", "resnet18", "--bs", "8", "--bs", "2"], 2),
    "perf4sight --help": ([PERF4SIGHT, "--help"], 0),
}


def best_wall_s(command: list[str], code: int, runs: int) -> float:
    """The shortest wall time of `runs` runs of `command`, each checked to exit with `code`
    (a command that failed otherwise would time something else)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if done.returncode != code:
            raise SystemExit(f"{' '.join(command)}: exit code {done.returncode}, expected {code}\n{done.stderr}")
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per command; the best is printed")
    args = parser.parse_args()
    width = max(map(len, COMMANDS))
    print(f"{'command':<{width}}  best of {args.runs} (s)")
    for name, (command, code) in COMMANDS.items():
        print(f"{name:<{width}}  {best_wall_s(command, code, args.runs):.3f}", flush=True)


if __name__ == "__main__":
    main()
