"""The CPU zoo's latency measured in several campaigns, each in another order, and merged.

This 2-core VM's speed drifts over minutes, and not by one factor for every network: two
campaigns of the same 180 latency tests (10 timed iterations each) run five minutes apart
differ by about 20 % per test once a global factor is taken out, while the iterations within a
test vary by 8-9 %. A test's latency from one campaign holds the drift of the minute it ran, and
more iterations in that minute do not remove it. Campaigns that visit the tests in different
orders (as listed, reversed, then shuffled) sample each test at other moments; a test's
latency here is the mean of its timed iterations over all of them.

For each pass this writes `OUT/pass-<n>/config.ini` ([profile] of `examples/cpu_zoo.ini`, latency
only, its networks reordered), runs `perf4sight profile create-config` and `profile run` on it (a
pass already recorded is resumed, not rerun), then writes `OUT/latency/` as `[profile]
latency_passes` does (`perf4sight.profile.passes.merge_passes`): each test once, with the
iterations of every pass, their mean, the largest `cpu_elsewhere` and the sum of `test_s`.
Prints, for every pair of passes, the mean |difference| per test after a global factor (the
floor a model's error against one campaign reads against), and each pass against the merged
latency.

    .venv/bin/python benchmarks/zoo_latency_passes.py --out /tmp/zoo_passes --passes 5
    cp -r /tmp/zoo_passes/latency /tmp/zoo_passes/environment-*.json benchmarks/data/cpu_zoo/

More campaigns join those already merged (`--merge-with`, a folder whose latency/ holds them),
numbered on from `--first-pass` so that their orders are new ones:

    .venv/bin/python benchmarks/zoo_latency_passes.py --out /tmp/zoo_passes2 --passes 5 --first-pass 5 \
        --merge-with benchmarks/data/cpu_zoo
"""

from __future__ import annotations

import argparse
import configparser
import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np

from perf4sight.device.definitions import LATENCY
from perf4sight.device.logs import GT_SUFFIX, latest_rows, read_journal
from perf4sight.profile.passes import merge_passes, pass_order

ROOT = Path(__file__).resolve().parents[1]
ZOO_CONFIG = ROOT / "examples" / "cpu_zoo.ini"
PERF4SIGHT = Path(sys.executable).with_name("perf4sight")
# Timed iterations and warm-up per test: the mean of ten settles a test within its minute.
ITERATIONS, WARMUP = 10, 2


def write_pass_config(out: Path, number: int) -> Path:
    """The config of pass `number`: the zoo's [profile], latency only, in this pass's order."""
    zoo = configparser.ConfigParser()
    zoo.read(ZOO_CONFIG, encoding="utf-8")
    profile = dict(zoo["profile"])
    networks = [name.strip(" '\n") for name in profile["network"].strip("[]").split(",")]
    folder = out / f"pass-{number}"
    folder.mkdir(parents=True, exist_ok=True)
    profile.update(network=repr(pass_order(networks, number)), profile_variables="['latency']",
                   iterations=str(ITERATIONS), warmup=str(WARMUP), log_dir=str(folder),
                   test_config=str(folder / "test_config.ini"))
    config = configparser.ConfigParser()
    config["profile"] = profile
    path = folder / "config.ini"
    with open(path, "w", encoding="utf-8") as handle:
        config.write(handle)
    return path


def latencies(folder: Path) -> dict[tuple, float]:
    """Each passed test's latency in a log folder, by test key."""
    found = {}
    for journal in sorted((folder / LATENCY.kind).glob("*.csv")):
        if not journal.name.endswith(GT_SUFFIX):
            found.update({key: row["latency"] for key, row in latest_rows(read_journal(journal)).items()
                          if row["passed"]})
    return found


def difference_pct(first: np.ndarray, second: np.ndarray) -> float:
    """Mean |second / first - 1| (%) of aligned timings, after their median ratio: a global
    factor, which any fit takes out, is no disagreement."""
    ratio = np.log(np.asarray(second) / np.asarray(first))
    return float(100 * np.mean(np.abs(np.exp(ratio - np.median(ratio)) - 1)))


def compared_pct(first: dict[tuple, float], second: dict[tuple, float]) -> float:
    """`difference_pct` over the tests both campaigns passed."""
    keys = sorted(set(first) & set(second))
    return difference_pct(np.array([first[k] for k in keys]), np.array([second[k] for k in keys]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the passes and the merged latency/")
    parser.add_argument("--passes", type=int, default=5, help="campaigns to run (default: %(default)s)")
    parser.add_argument("--first-pass", type=int, default=0,
                        help="number of the first campaign, which sets its order (default: %(default)s)")
    parser.add_argument("--merge-with", type=Path, action="append", default=[],
                        help="a folder whose latency/ holds campaigns merged earlier, to merge with (repeatable)")
    args = parser.parse_args(argv)
    if args.passes + len(args.merge_with) < 2:
        parser.error("--passes: at least 2 campaigns in all, to merge and compare")
    folders = []
    for number in range(args.first_pass, args.first_pass + args.passes):
        config = write_pass_config(args.out, number)
        for command in ("create-config", "run"):
            subprocess.run([str(PERF4SIGHT), "--quiet", "profile", command, "-c", str(config)], check=True, cwd=ROOT)
        folders.append(config.parent)
    merge_passes([*args.merge_with, *folders], args.out)
    measured = {folder.name: latencies(folder) for folder in [*args.merge_with, *folders]}
    for (a, first), (b, second) in itertools.combinations(measured.items(), 2):
        print(f"{a} against {b}: {compared_pct(first, second):.1f} % per test after a global factor")
    merged = latencies(args.out)
    for name, one in measured.items():
        print(f"{name} against the merged latency: {compared_pct(merged, one):.1f} %")
    print(f"merged: {len(merged)} tests in {args.out / LATENCY.kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
