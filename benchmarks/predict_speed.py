"""Prediction speed: memory and latency at 25 batch sizes for a set of pruned networks.

Each network is a spec written by the network-dataset stage (224x224, 1000 classes), with
its standalone model file for the original way. Both ways predict the same 25 batch sizes
with models fitted on the TX2 data (skipped when ../shared/datasets/tx2 is absent):

- perf4sight: `Predictor.predict(spec, batch_sizes)` with the default method (or `--method`),
  cold: once with the per-process trace of the base networks cleared before every network (each
  prediction describes its network from nothing), and over the whole set from a cleared
  state (each base traced once, inside the timed run, then shared by its pruned variants;
  the median of 3 such runs), and over the whole set with the bases already described
  (what each network costs once its base is: the median of 3 runs). These run with the disk
  cache off (`PERF4SIGHT_CACHE=0`); then the whole set with the in-process traces cleared and the
  bases read from a disk cache an earlier run filled (what a new process pays once its bases are
  recorded: the median of 3 runs).
- the original way: import the model file and build the network, run a forward pass at
  batch size 8 on a 224x224 input with hooks that read each Conv2d's shapes, then the
  paper's features one batch size at a time, then the paper's ExtraTrees models.

Where the memory model replays the allocator (`replay`, chosen or forced), each network's
replays are also timed alone (its timeline at hand, the replays a query of the 25 batch
sizes runs): the most any way of describing a network could leave to the replay method is
the original way's time over theirs.

With `--model-files`, both ways predict model description files instead of specs: the
hand-written examples (`examples/model_files`, which flatten with `x.view(x.size(0), -1)`)
pruned at each level and written as standalone model files by the network-dataset stage,
and the TX2 dataset's MobileNetV2 model files at those levels. A model file shares nothing
with another (no base to trace once), so each is predicted from nothing.

Setup (pruning, writing specs and model files, fitting) is not timed.

    .venv/bin/python benchmarks/predict_speed.py [--networks resnet18 ...] [--levels 0 50 90] [--method replay]
    .venv/bin/python benchmarks/predict_speed.py --model-files [--levels 0 25 50 75 90] [--method replay]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from perf4sight.architecture import Detail, as_saved_by
from perf4sight.config import FingerprintSettings, NetworkDatasetSettings
from perf4sight.device.definitions import QUANTITIES
from perf4sight.features import FEATURE_SETS
from perf4sight.features.caching_allocator import replay_peaks
from perf4sight.fit import fingerprint_device, load_model
from perf4sight.networks import architecture_from_spec, create_network_dataset, forget_traces, read_spec
from perf4sight.networks.model_file import build_from_file
from perf4sight.predict import Predictor

TX2 = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "tx2"
BATCH_SIZES = list(range(8, 8 * 25 + 1, 8))
# The whole set takes a tenth of a second: its median over a few cold runs, so that one
# pause of the shared machine does not decide the figure.
REPEATS = 3
NETWORKS = ["resnet18", "resnet50", "mobilenet_v2", "squeezenet1_0", "googlenet", "vgg11", "mnasnet1_0"]
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "model_files"


def fit(out: Path, method: str) -> Path:
    """Models of `method` fitted on every TX2 network and level, stored under `out`."""
    storedir = out / method
    fingerprint_device(
        FingerprintSettings(
            train_nets=["resnet18", "googlenet", "squeezenet", "mobilenetv2"],
            train_logs=[0, 10, 20, 25, 30, 35, 45, 50, 65, 70, 75, 85, 90],
            memory_logs=[TX2 / "memory"],
            latency_logs=[TX2 / "latency"],
            pruned_models_storedir=TX2 / "models",
            model_storedir=storedir,
            method=method,
        )
    )
    return storedir


def original_way(model_file: Path, net: str, models: list) -> np.ndarray:
    """The original tool's route: a real network and a forward pass to read the shapes."""
    module = build_from_file(f"{model_file}:{net}")
    layers = []

    def record(layer: nn.Conv2d, inputs: tuple, output: torch.Tensor) -> None:
        layers.append({
            "name": str(len(layers)), "type": "Conv2d", "in": list(inputs[0].shape[1:]),
            "out": list(output.shape[1:]), "kernel": list(layer.kernel_size), "stride": list(layer.stride),
            "padding": list(layer.padding), "groups": layer.groups, "bias": layer.bias is not None,
        })

    handles = [m.register_forward_hook(record) for m in module.modules() if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        module(torch.randn(8, 3, 224, 224))
    for handle in handles:
        handle.remove()
    arch = architecture_from_spec({"name": net, "input_size": [3, 224, 224], "num_classes": 1000,
                                   "layers": layers, "params": sum(p.numel() for p in module.parameters())})
    features = pd.concat([FEATURE_SETS["paper"](arch, [bs], "training") for bs in BATCH_SIZES], ignore_index=True)
    return np.stack([m.regressor_[1:].predict(features) for m in models])  # the trees after the features


def _time_set(predictor: Predictor, sources: list[str], *, cleared: bool = True) -> float:
    """Seconds to predict every network, from a cleared state (each base traced once, in the
    run), or with the bases already described (`cleared` False)."""
    if cleared:
        forget_traces()
    start = time.perf_counter()
    for source in sources:
        predictor.predict(source, BATCH_SIZES)
    return time.perf_counter() - start


def _replays(predictor: Predictor, source: str, torch_version: str | None) -> float:
    """Seconds of the allocator replays a memory prediction of `source` runs (its base
    described and its timeline at hand, as the device's PyTorch `torch_version` saves it;
    the median of 3, no replay kept between them)."""
    timeline = as_saved_by(predictor.describe(source), torch_version).lifetimes[predictor.stage]
    times = []
    for _ in range(3):
        fresh = dataclasses.replace(timeline, peaks={})
        start = time.perf_counter()
        replay_peaks(fresh, BATCH_SIZES)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _networks(out: Path, networks: list[str], levels: list[int], model_files: bool) -> list[tuple[str, Path, str]]:
    """(source perf4sight predicts, model file the original way builds, its factory) per network."""
    create_network_dataset(NetworkDatasetSettings(
        networks=[str(EXAMPLES / f"{n}.py") for n in ("resnet_like", "mobilenet_like")] if model_files else networks,
        pruning_perc=levels, model_path=out / "nets", write_model_files=True,
    ))
    specs = sorted((out / "nets").glob("*.json"))
    nets = [read_spec(path)["net"] for path in specs]
    if not model_files:
        return [(str(path), path.with_suffix(".py"), net) for path, net in zip(specs, nets)]
    files = [(path.with_suffix(".py"), net) for path, net in zip(specs, nets)]
    files += [(TX2 / "models" / f"mobilenetv2_{level}.py", "mobilenetv2") for level in levels
              if (TX2 / "models" / f"mobilenetv2_{level}.py").is_file()]
    return [(f"{path}:{net}", path, net) for path, net in files]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=NETWORKS)
    parser.add_argument("--levels", nargs="+", type=int, default=[0, 25, 50, 75, 90])
    parser.add_argument("--method", default="default", help="perf4sight's method (default: the default method)")
    parser.add_argument("--model-files", action="store_true", help="predict model files, not specs (see above)")
    args = parser.parse_args()
    if not (TX2 / "models").is_dir():
        print(f"TX2 dataset not found at {TX2}: nothing to fit the models on, skipping")
        return
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        os.environ["PERF4SIGHT_CACHE_DIR"] = str(out / "cache")
        os.environ["PERF4SIGHT_CACHE"] = "0"
        networks = _networks(out, args.networks, args.levels, args.model_files)
        predictor = Predictor.load(fit(out, args.method))
        chosen = ", ".join(f"{name}: {model.method}" for name, model in predictor.models.items())
        paper_dir = fit(out, "paper")
        paper = [load_model(paper_dir, stage="training", target=q.name) for q in QUANTITIES]
        # The setup's objects (torch, the fitted models) leave the collector's generations,
        # so that neither way is charged a full collection of them (a 0.3 s pause here).
        gc.collect()
        gc.freeze()
        cold, original = [], []
        for source, model_file, net in networks:
            forget_traces()
            start = time.perf_counter()
            predictor.predict(source, BATCH_SIZES)
            cold.append(time.perf_counter() - start)
            start = time.perf_counter()
            original_way(model_file, net, paper)
            original.append(time.perf_counter() - start)
        sources = [source for source, *_ in networks]
        whole_set = statistics.median(_time_set(predictor, sources) for _ in range(REPEATS))
        warm = statistics.median(_time_set(predictor, sources, cleared=False) for _ in range(REPEATS))
        del os.environ["PERF4SIGHT_CACHE"]
        _time_set(predictor, sources)  # records the bases into the disk cache
        on_disk = statistics.median(_time_set(predictor, sources) for _ in range(REPEATS))
        replaying = [model.torch_version for model in predictor.models.values()
                     if FEATURE_SETS[model.feature_set].needs is Detail.LIFETIMES]
        replays = [_replays(predictor, source, replaying[0]) for source in sources] if replaying else None
    what = "model files of resnet_like, mobilenet_like (examples) and the TX2's mobilenetv2" if args.model_files \
        else ", ".join(args.networks)
    print(f"{len(networks)} networks ({what} at levels {args.levels}), {len(BATCH_SIZES)} batch sizes each, "
          f"method {args.method} ({chosen}), torch threads {torch.get_num_threads()}")
    # With the allocator replay: what its replays alone cost, and the most they leave (the
    # original way's time over theirs: the ratio were nothing else to do).
    extra = f"{'replays ms':>12}{'at most':>9}" if replays else ""
    print(f"{'network':<24}{'perf4sight ms':>15}{'original ms':>13}{'ratio':>8}{extra}")
    for i, ((_, model_file, _), ours, theirs) in enumerate(zip(networks, cold, original)):
        extra = f"{replays[i] * 1e3:>12.1f}{theirs / replays[i]:>9.1f}" if replays else ""
        print(f"{model_file.stem:<24}{ours * 1e3:>15.1f}{theirs * 1e3:>13.1f}{theirs / ours:>8.1f}{extra}")
    n, total_original = len(networks), sum(original)
    print(f"original way: {n / total_original:.2f} networks/s")
    print(f"perf4sight, each network cold (its base traced anew): {n / sum(cold):.1f} networks/s, "
          f"{total_original / sum(cold):.1f}x the original")
    print(f"perf4sight, the whole set cold (each base traced once, in the timed run): {n / whole_set:.1f} "
          f"networks/s, {total_original / whole_set:.1f}x the original")
    print(f"perf4sight, the whole set with its bases already described (each network's own cost): {n / warm:.1f} "
          f"networks/s, {total_original / warm:.1f}x the original")
    print(f"perf4sight, the whole set with its bases read from the disk cache (traces cleared in the process): "
          f"{n / on_disk:.1f} networks/s, {total_original / on_disk:.1f}x the original")
    if replays:
        print(f"the allocator replays alone (each network's, its timeline at hand): {n / sum(replays):.1f} "
              f"networks/s, {total_original / sum(replays):.1f}x the original")


if __name__ == "__main__":
    main()
