"""Which networks the toolflow handles: every torchvision classification network, traced,
pruned at 50 % (random channels) and predicted with a device's fitted models.

    .venv/bin/python benchmarks/network_coverage.py [--models out/demo/fitted] [--nets resnet18,vit_b_16]

Each network runs in its own process (one thread, `--timeout` seconds: torch-pruning can
take very long on some graphs) at 3x64x64, or at 3x224x224 when it does not run at 64
(vision transformers, Inception). Prints one row per network: the input size, the traced
layers and whether the trace's parameter count is the module's, the level pruning reached
(or why not) and whether the pruned network still runs, the predicted memory and latency of
the pruned network (else the unpruned one) at batch size 8, and the seconds it all took. Needs fitted models (`make demo`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torchvision

from perf4sight import console
from perf4sight.device.definitions import LATENCY, MEMORY

SIZES = (64, 224)
BATCH = 8


def one(name: str, side: int, models: Path) -> None:
    """Trace, predict, prune and predict again one network at side x side inputs, printing
    the row found so far (a JSON line) after each step: a step stopped by the time limit
    leaves the ones before it."""
    import torch

    from perf4sight import Predictor, load_network, prune_network, trace_architecture
    from perf4sight.errors import NetworkError

    torch.set_num_threads(1)
    size = (3, side, side)
    predictor = Predictor.load(models)

    def predict(module: torch.nn.Module) -> dict[str, float]:
        table = predictor.predict(module, [BATCH], input_size=size, num_classes=10)
        return {name: round(float(table.iloc[0][name]), 1) for name in (MEMORY.name, LATENCY.name)}

    module = load_network(name, input_size=size, num_classes=10).module
    arch = trace_architecture(module, size, name=name)  # a NetworkError here: another size is tried
    row: dict[str, object] = {"layers": len(arch.layers),
                              "params_match": arch.params == sum(p.numel() for p in module.parameters()),
                              **predict(module)}
    print(json.dumps(row), flush=True)
    try:
        pruned = prune_network(module, 50, input_size=size, mode="random", seed=0, name=name)
    except NetworkError as exc:
        row["pruned"] = _why_not(str(exc))
    else:
        with torch.no_grad():
            runs = pruned.module.eval()(torch.zeros(1, *size)).shape[-1] == 10
        row.update(pruned=f"{pruned.level:.1f} %" + ("" if runs else ", does not run"), **predict(pruned.module))
    print(json.dumps(row), flush=True)


def _why_not(message: str) -> str:
    """A pruning error in a few words for the table."""
    if "is not called as a module" in message:
        return "no: weights used by a function"
    if "cannot build its dependency graph" in message:
        return "no: graph (" + message.rsplit("): ", 1)[-1].split(":")[0] + ")"
    return "no: " + message.split(": ", 1)[-1][:40]


def _run(name: str, models: Path, timeout: float) -> dict[str, object]:
    """`one` in a fresh process at the first input size the network runs at."""
    start = time.perf_counter()
    row: dict[str, object] = {}
    for side in SIZES:
        command = [sys.executable, __file__, "--one", name, "--side", str(side), "--models", str(models)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as stopped:
            found = (stopped.stdout or b"").decode().strip().splitlines()
            row = {"input": side, **(json.loads(found[-1]) if found else {}), "error": f"over {timeout:.0f} s"}
            break
        lines = done.stdout.strip().splitlines()
        row = {"input": side, **(json.loads(lines[-1]) if lines else {})}  # what the steps before found
        if done.returncode == 0:
            break
        error = (done.stderr.strip().splitlines() or ["no output"])[-1]
        row["error"] = error.split(": ", 1)[-1][:80]
        if "does not run on inputs" not in error:
            break
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=Path("out/demo/fitted"), help="fitted models (make demo)")
    parser.add_argument("--nets", type=lambda text: text.split(","), help="comma-separated torchvision names")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per network and input size")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--side", type=int, default=SIZES[0], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        one(args.one, args.side, args.models)
        return 0
    if not args.models.is_dir():
        print(f"no fitted models at {args.models}; run `make demo` first")
        return 0
    names = args.nets or torchvision.models.list_models(module=torchvision.models)
    columns = ("input", "layers", "params_match", "pruned", MEMORY.name, LATENCY.name, "error", "seconds")
    rows = []
    for name in names:
        row = _run(name, args.models, args.timeout)
        rows.append([name, *(row.get(c, "") for c in columns)])
        print(json.dumps({"network": name, **row}), file=sys.stderr)
    console.print_table(f"torchvision classification networks, batch size {BATCH}, models {args.models}",
                        ("network", *columns), rows)
    pruned = sum(1 for r in rows if str(r[4]).endswith("%"))
    predicted = sum(1 for r in rows if r[5] != "")
    print(f"{len(rows)} networks: {predicted} predicted, {pruned} pruned at 50 % and still running")
    return 0


if __name__ == "__main__":
    sys.exit(main())
