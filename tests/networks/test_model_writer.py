"""Standalone model files: they import only torch and rebuild the pruned network anywhere."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torchvision

from perf4sight.errors import NetworkError
from perf4sight.networks import load_network, prune_network, write_model_file
from perf4sight.networks.registry import build_torchvision

_CHECK = """
import importlib.util, json, sys
import torch
spec = importlib.util.spec_from_file_location("pruned", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
net = getattr(module, sys.argv[2])(num_classes=int(sys.argv[3]))
out = net.eval()(torch.zeros(1, 3, 32, 32))
print(json.dumps({
    "shapes": {k: list(v.shape) for k, v in net.state_dict().items()},
    "out": list(out.shape),
    "imported": sorted(m.split(".")[0] for m in sys.modules if m.split(".")[0] in ("perf4sight", "torchvision", "torch_pruning")),
}))
"""


@pytest.mark.parametrize("network", ["resnet18", "mobilenet_v2", "googlenet"])
def test_model_file_rebuilds_the_pruned_network_in_a_fresh_interpreter(network, tmp_path):
    pruned = prune_network(build_torchvision(network, num_classes=10, device="meta"), 40, input_size=(3, 32, 32), seed=3).module
    path = write_model_file(pruned, tmp_path / f"{network}_40.py", net=network, name=f"{network}_40",
                            num_classes=10, input_size=(3, 32, 32))
    run = subprocess.run([sys.executable, "-c", _CHECK, str(path), network, "10"], capture_output=True, text=True, check=True)
    result = json.loads(run.stdout)
    assert result["imported"] == []  # nothing but torch
    assert result["out"] == [1, 10]
    assert result["shapes"] == {k: list(v.shape) for k, v in pruned.state_dict().items()}
    # loaded back through the loader: the factory is named after the network
    loaded = load_network(path, num_classes=10)
    assert {k: v.shape for k, v in loaded.module.state_dict().items()} == {k: v.shape for k, v in pruned.state_dict().items()}


def test_classifier_follows_num_classes(tmp_path):
    pruned = prune_network(build_torchvision("squeezenet", num_classes=10, device="meta"), 50, input_size=(3, 32, 32)).module
    path = write_model_file(pruned, tmp_path / "squeezenet_50.py", net="squeezenet", name="squeezenet_50",
                            num_classes=10, input_size=(3, 32, 32))
    loaded = load_network(path, num_classes=1000)
    assert loaded.module.eval()(torch.zeros(1, 3, 32, 32)).shape == (1, 1000)
    assert loaded.module.get_submodule("features.0").out_channels == pruned.features[0].out_channels


def test_a_forward_outside_torch_is_refused(tmp_path):
    with torch.device("meta"):
        model = torchvision.models.efficientnet_b0(num_classes=10)
    with pytest.raises(NetworkError, match="efficientnet_b0_0: its forward uses .*stochastic_depth.*not torch"):
        write_model_file(model, tmp_path / "e.py", net="efficientnet_b0", name="efficientnet_b0_0",
                         num_classes=10, input_size=(3, 32, 32))
    assert not (tmp_path / "e.py").exists()
