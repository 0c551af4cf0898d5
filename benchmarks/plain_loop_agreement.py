"""A fingerprint's predictions against a plain training loop on this machine: the user's truth.

For each case (a torchvision network, batch size and optimizer, at 3x64x64 and 10 classes, as
`make demo` profiles), `tests/reference_loop.py` (a training loop written without perf4sight)
runs `--runs` times (default 3), in rounds that visit every case once each, so that a slow minute
of a shared machine falls on one run of several cases rather than on every run of one, and its
medians are compared with `perf4sight predict` from the fitted models
of this CPU (`--models`, default `out/demo/fitted`), both clearing the gradients where
`--zero-grad` says (default `first`, as PyTorch's tutorials do). Prints each case (marked `extrapolated`
where the prediction is), and the mean absolute error for memory and latency, over all cases
and over those not extrapolated.

`--models` may be given more than once, to compare fits against the same loops in one run; a
value `DIR@SRC` predicts with the perf4sight source folder SRC first on the path (another
version's checkout, for its models stored in another format).

    make demo
    .venv/bin/python benchmarks/plain_loop_agreement.py [--models out/demo/fitted [--models DIR@SRC]] [--zero-grad after-loss] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "reference_loop.py"
PERF4SIGHT = Path(sys.executable).with_name("perf4sight")
CASES = (("resnet18", 16, "sgd"), ("resnet18", 32, "sgd"), ("mobilenet_v2", 16, "sgd"), ("mobilenet_v2", 32, "sgd"),
         ("squeezenet1_0", 16, "sgd"), ("resnet18", 16, "adam"), ("mobilenet_v2", 32, "adam"))
sys.path.insert(0, str(REFERENCE.parent))
from reference_loop import ZERO_GRAD  # noqa: E402 (the loop's own script, beside the tests)


def _loop(net: str, bs: int, optimizer: str, zero_grad: str) -> dict[str, float]:
    """One run of the plain loop, in a process of its own: its memory (MiB) and latency (ms)."""
    return json.loads(subprocess.run([sys.executable, str(REFERENCE), "--network", net, "--bs", str(bs),
                                      "--optimizer", optimizer, "--iterations", "6", "--warmup", "2",
                                      "--zero-grad", zero_grad],
                                     capture_output=True, text=True, check=True).stdout)


def _loops(runs: int, zero_grad: str) -> dict[tuple[str, int, str], tuple[float, float]]:
    """Each case's median memory and latency over `runs` runs, made in rounds of every case."""
    found: dict[tuple[str, int, str], list[dict[str, float]]] = {case: [] for case in CASES}
    for round_ in range(runs):
        print(f"plain loops, round {round_ + 1} of {runs}", flush=True)
        for case in CASES:
            found[case].append(_loop(*case, zero_grad))
    return {case: (statistics.median(r["mem_used_mib"] for r in results),
                   statistics.median(r["latency_ms"] for r in results)) for case, results in found.items()}


def _predicted(models: str, net: str, bs: int, optimizer: str, zero_grad: str) -> tuple[float, float, bool]:
    folder, _, source = models.partition("@")
    env = {**os.environ, "PYTHONPATH": source} if source else None
    out = subprocess.run([str(PERF4SIGHT), "--quiet", "predict", "--models", folder, "--net", net,
                          "--input-size", "3,64,64", "--num-classes", "10", "--bs", str(bs),
                          "--optimizer", optimizer, "--zero-grad", zero_grad, "--json"],
                         capture_output=True, text=True, check=True, env=env).stdout
    record = json.loads(out)
    record = record[0] if isinstance(record, list) else record
    return record["mem_used_mib"], record["latency_ms"], bool(record["extrapolated"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", action="append", help="fitted models' folder, or DIR@SRC (repeatable; "
                        "default: out/demo/fitted)")
    parser.add_argument("--zero-grad", choices=ZERO_GRAD, default="first",
                        help="where the loops and the predictions clear the gradients")
    parser.add_argument("--runs", type=int, default=3, help="plain-loop runs per case, one per round (default 3)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: at least 1")
    models = args.models or [str(ROOT / "out" / "demo" / "fitted")]
    missing = [m for m in models if not Path(m.partition("@")[0]).is_dir()]
    if missing:
        print(f"no fitted models at {', '.join(missing)}: run `make demo` first")
        return 0
    errors: dict[str, list[tuple[float, float, bool]]] = {m: [] for m in models}
    for (net, bs, optimizer), (loop_mem, loop_lat) in _loops(args.runs, args.zero_grad).items():
        for m in models:
            mem, lat, extrapolated = _predicted(m, net, bs, optimizer, args.zero_grad)
            errors[m].append((100 * (mem / loop_mem - 1), 100 * (lat / loop_lat - 1), extrapolated))
            print(f"{net:14} bs {bs:2} {optimizer:4} | memory: loop {loop_mem:6.1f} predicted {mem:6.1f} "
                  f"({errors[m][-1][0]:+5.1f} %) | latency: loop {loop_lat:6.1f} predicted {lat:6.1f} "
                  f"({errors[m][-1][1]:+5.1f} %){' extrapolated' if extrapolated else ''} | {m}", flush=True)
    for m, found in errors.items():
        for label, cases in (("all cases", found), ("not extrapolated", [e for e in found if not e[2]])):
            if cases:
                print(f"mean |error|, {label}: memory {statistics.mean(abs(e[0]) for e in cases):.1f} %, "
                      f"latency {statistics.mean(abs(e[1]) for e in cases):.1f} % | {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
