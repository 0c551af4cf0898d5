"""Where a training step clears the gradients: the profiler in each order against a plain loop in each.

`optimizer.zero_grad()` sets the gradients to None on PyTorch 2. A script that calls it first
(zero_grad, forward, loss, backward, step) frees the last step's gradients before the forward
pass; one that calls it after the loss (forward, loss, zero_grad, backward, step, the original
tool's order) holds them through it. Their peaks differ by up to the gradients' size: little
where the activations dominate, most where the parameters do. The recipe's `zero_grad` says
which a user runs; the profiler runs it, and the memory model counts, cleared first, the
gradients the backward pass has made again at the activations' peak
(`perf4sight.features.network`).

For each case (a CPU zoo network at level 0, 3x64x64, 10 classes, SGD with momentum), each of
`--rounds` rounds runs the profiler's memory test of the zoo's spec in both orders (a worker of
its own) and `tests/reference_loop.py` in both orders (a process each); prints the medians, the
profiler's reading against the loop of its order, and the saving of clearing first: the loops',
the profiler's, and the model's (its features' gradients held at the peak, after the loss less
first).

    .venv/bin/python benchmarks/gradient_order.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from perf4sight import console
from perf4sight.device.recipe import Recipe
from perf4sight.features import network_features
from perf4sight.networks import load_architecture
from perf4sight.profile import ProfileTest, profile_campaign
from zoo_accuracy import ZOO_DIR

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "reference_loop.py"
sys.path.insert(0, str(REFERENCE.parent))
from reference_loop import ZERO_GRAD  # noqa: E402 (the loop's own script, beside the tests)

CASES = (("resnet18", 16), ("mobilenet_v2", 32), ("resnet34", 2), ("resnet34", 32), ("convnext_tiny", 2),
         ("convnext_tiny", 32), ("vgg11", 2))
ITERATIONS, WARMUP = 3, 1  # the zoo's memory tests'


MIB = float(1 << 20)


def _spec(net: str) -> str:
    return str(ZOO_DIR / "models" / f"{net}_0.json")


def _profiler_mib(net: str, bs: int, zero_grad: str, log_dir: Path) -> float:
    test = ProfileTest("memory", bs, "spec", net, "training", _spec(net), Recipe(zero_grad=zero_grad))
    with contextlib.redirect_stdout(io.StringIO()):  # the campaign's summary table, one per test
        summary = profile_campaign([test], log_dir=log_dir, save=False, iterations=ITERATIONS, warmup=WARMUP)
    (result,) = summary.results
    if not result.passed:
        raise SystemExit(f"{net} bs {bs}: the profiler's memory test failed: {result.outcome}")
    return result.outcome.memory.mem_used


def _loop_mib(net: str, bs: int, zero_grad: str) -> float:
    done = subprocess.run([sys.executable, str(REFERENCE), "--network", net, "--bs", str(bs), "--size", "64",
                           "--classes", "10", "--iterations", str(ITERATIONS), "--warmup", str(WARMUP),
                           "--zero-grad", zero_grad], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)["mem_used_mib"]


def _model_saving_mib(net: str, bs: int) -> float:
    """The gradients the memory model holds at the peak, after the loss less first."""
    first, after = (network_features(load_architecture(_spec(net), recipe=Recipe(zero_grad=order)), [bs])
                    ["gradient_bytes"].iloc[0] for order in ZERO_GRAD)
    return float(after - first) / MIB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per case; medians are printed")
    args = parser.parse_args(argv)
    console.set_quiet(True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for net, bs in CASES:
            readings: dict[tuple[str, str], list[float]] = {
                (side, order): [] for side in ("profiler", "loop") for order in ZERO_GRAD}
            for _ in range(args.rounds):
                for order in ZERO_GRAD:
                    readings["profiler", order].append(_profiler_mib(net, bs, order, Path(tmp)))
                    readings["loop", order].append(_loop_mib(net, bs, order))
            median = {key: statistics.median(values) for key, values in readings.items()}
            first, after = ZERO_GRAD
            rows.append((f"{net} bs {bs}", *(median[side, order] for side in ("profiler", "loop") for order in ZERO_GRAD),
                         *(100 * (median["profiler", order] / median["loop", order] - 1) for order in ZERO_GRAD),
                         median["loop", after] - median["loop", first],
                         median["profiler", after] - median["profiler", first], _model_saving_mib(net, bs)))
            print(net, bs, {" ".join(key): [round(v, 1) for v in values] for key, values in readings.items()},
                  flush=True)
    console.print_table(f"memory (MiB), median of {args.rounds} rounds: the profiler and a plain loop, each "
                        "clearing the gradients first or after the loss; the saving of clearing first (MiB)",
                        ("case", *(f"{side}, {order}" for side in ("profiler", "loop") for order in ZERO_GRAD),
                         *(f"profiler vs loop, {order} %" for order in ZERO_GRAD),
                         "saving: loops", "saving: profiler", "saving: model"), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
