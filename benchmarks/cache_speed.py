"""Disk cache speed: the first and the second query of a network, each from a new process.

Models: the H200 runs in the repository (`benchmarks/data/h200`), memory fitted with `replay`
(whose features need the base network's recorded tensor lifetimes), latency with `physical`.
Queried: resnet18 (a torchvision name) and resnet18 pruned by 50 % (a spec `prune` wrote), at
25 batch sizes. Each query runs in a new process with a cache folder of its own
(`PERF4SIGHT_CACHE_DIR`): empty for the first query, holding what the first wrote for the second.

- In Python: the process times its imports (perf4sight's predictor, torch), loading the fitted
  models (which checks their features of a small reference network: its trace, its recording and
  the compiled allocator replay's loading), then `Predictor.predict(source, 25 sizes)`.
- The command line: `perf4sight predict --models ... --net ... --bs <25 sizes>`, wall time,
  beside `python -c "import torch, sklearn, pandas"` (what any command that predicts imports).

Best of `--runs` (3) each; the setup (fitting, pruning) is not timed.

    .venv/bin/python benchmarks/cache_speed.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

H200 = Path(__file__).resolve().parent / "data" / "h200"
PERF4SIGHT = str(Path(sys.executable).with_name("perf4sight"))
BATCH_SIZES = list(range(8, 8 * 25 + 1, 8))

# What a new process runs for one query: argv[1] the models' folder, argv[2] the network.
_QUERY = """
import json, sys, time
start = time.perf_counter()
from perf4sight.predict import Predictor
import torch
imported = time.perf_counter()
predictor = Predictor.load(sys.argv[1])
loaded = time.perf_counter()
predictor.predict(sys.argv[2], [int(size) for size in sys.argv[3].split(",")])
done = time.perf_counter()
print(json.dumps({"imports": imported - start, "models": loaded - imported, "predict": done - loaded}))
"""


def _query(models: Path, source: str, cache: Path) -> dict[str, float]:
    env = {**os.environ, "PERF4SIGHT_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-c", _QUERY, str(models), source, ",".join(map(str, BATCH_SIZES))],
                          capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout.splitlines()[-1])


def _wall(command: list[str], cache: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PERF4SIGHT_CACHE_DIR": str(cache)})
    if done.returncode:
        raise SystemExit(f"{' '.join(command)}: exit code {done.returncode}\n{done.stderr}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per case; the best is printed")
    args = parser.parse_args()
    from perf4sight import console
    from perf4sight.config import FingerprintSettings, NetworkDatasetSettings
    from perf4sight.fit import fingerprint_device
    from perf4sight.networks import create_network_dataset

    console.set_quiet(True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        os.environ["PERF4SIGHT_CACHE"] = "0"  # the setup leaves no cache behind
        fingerprint_device(FingerprintSettings(
            train_nets=["resnet18", "googlenet", "squeezenet"], train_logs=[0, 30, 90], eval_logs=[],
            memory_logs=[H200 / "memory"], latency_logs=[H200 / "latency"], pruned_models_storedir=H200 / "models",
            model_storedir=out / "models", method="replay",
        ))
        create_network_dataset(NetworkDatasetSettings(networks=["resnet18"], pruning_perc=[50],
                                                      model_path=out / "nets"))
        del os.environ["PERF4SIGHT_CACHE"]
        sources = {"resnet18": "resnet18", "resnet18 pruned 50 %": str(out / "nets" / "resnet18_50.json")}
        parts = ("imports", "models", "predict")
        print(f"{len(BATCH_SIZES)} batch sizes, best of {args.runs} new processes per case (s)")
        print(f"{'query':<42}" + "".join(f"{part:>17}" for part in parts))
        for name, source in sources.items():
            for which in ("first (empty cache)", "second (cached)"):
                best: dict[str, float] = {}
                for run in range(args.runs):  # the second query's cache is the one its first filled
                    times = _query(out / "models", source, out / f"cache-{name}-{run}")
                    best = {part: min(best.get(part, float("inf")), times[part]) for part in parts}
                print(f"{name + ', ' + which:<42}" + "".join(f"{best[part]:>17.3f}" for part in parts), flush=True)
        sizes = ",".join(map(str, BATCH_SIZES))
        imports = min(_wall([sys.executable, "-c", "import torch, sklearn, pandas"], out / "none")
                      for _ in range(args.runs))
        print(f"\ncommand line, wall time (s): python -c 'import torch, sklearn, pandas' {imports:.3f}")
        for name, source in sources.items():
            command = [PERF4SIGHT, "predict", "--models", str(out / "models"), "--net", source, "--bs", sizes]
            first = min(_wall(command, out / f"cli-{name}-{run}") for run in range(args.runs))
            second = min(_wall(command, out / f"cli-{name}-{run}") for run in range(args.runs))
            print(f"perf4sight predict --net {name} --bs <25 sizes>: first {first:.3f} (own work {first - imports:.3f}), "
                  f"second {second:.3f} (own work {second - imports:.3f})", flush=True)


if __name__ == "__main__":
    main()
