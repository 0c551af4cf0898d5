"""The TX2 benchmark's description of the networks as its runs trained them: SqueezeNet with each
Fire module's ReLU after the concatenation and no Dropout, as the authors' model files were."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import torch

from perf4sight.architecture import Detail
from perf4sight.networks import load_architecture
from perf4sight.networks.spec import build_from_spec, read_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import tx2_accuracy  # noqa: E402  (a script of benchmarks/, not a package)


def _per_sample_allocated(tx2_dir: Path, name: str) -> float:
    """MiB the TX2 allocated per sample from batch size 16 to 64."""
    log = pd.read_csv(tx2_dir / "memory" / f"{name}-gt.csv", sep="|")
    runs = log[log["passed"].astype(str) == "True"].drop_duplicates("bs").set_index("bs")["mem_alloc"]
    return float((runs[64] - runs[16]) / 48)


def test_the_squeezenet_specs_as_profiled_compute_what_torchvision_s_do(tx2_dir, tmp_path) -> None:
    models = tx2_accuracy.as_profiled(tx2_dir / "models", tmp_path)
    assert sorted(p.name for p in models.iterdir()) == sorted(
        [p.name for p in (tx2_dir / "models").iterdir()] + [tx2_accuracy.SQUEEZENET_AS_PROFILED.name])
    given, profiled = (read_spec(folder / "squeezenet_50.json") for folder in (tx2_dir / "models", models))
    assert profiled["out_channels"] == given["out_channels"] and profiled["torchvision"] is None
    torch.manual_seed(0)
    network, same = build_from_spec(given).eval(), build_from_spec(profiled).eval()
    assert sum(p.numel() for p in same.parameters()) == given["params"]
    same.load_state_dict(network.state_dict())  # the same layers, names and shapes
    image = torch.randn(2, 3, 224, 224)
    torch.testing.assert_close(same(image), network(image))


def test_as_profiled_squeezenet_saves_what_the_tx2_allocated(tx2_dir, tmp_path) -> None:
    """Its saved bytes per sample are what the TX2 allocated (as ResNet-18's are); torchvision's
    form saves a third more."""
    models = tx2_accuracy.as_profiled(tx2_dir / "models", tmp_path)
    ratios = {}
    for name, folder in (("squeezenet_0", models), ("squeezenet_0", tx2_dir / "models"), ("resnet18_0", models)):
        arch = load_architecture(folder / f"{name}.json", needs=Detail.LAYERS)
        saved = sum(layer.saved_bytes for layer in arch.layers) / 2**20
        ratios[(name, folder)] = _per_sample_allocated(tx2_dir, name) / saved
    profiled, torchvision, resnet = ratios.values()
    assert 1.0 < profiled < 1.1 and 1.0 < resnet < 1.1 and torchvision < 0.75
