"""Architecture specs: every TX2 spec rebuilds to its recorded shapes; bad specs name the layer."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import torchvision
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from perf4sight.errors import NetworkError
from perf4sight.networks import build_from_spec, read_spec, spec_from_module, spec_macs, write_spec


def _describe(module: nn.Module, spec: dict) -> dict:
    return spec_from_module(
        module, name=spec["name"], net=spec["net"], prune_level=spec["prune_level"],
        input_size=spec["input_size"], num_classes=spec["num_classes"],
        torchvision_name=spec["torchvision"], torchvision_kwargs=spec["torchvision_kwargs"],
    )


def test_every_tx2_spec_rebuilds_with_its_shapes_and_params(tx2_dir):
    paths = sorted((tx2_dir / "models").glob("*.json"))
    assert len(paths) == 39
    for path in paths:
        spec = read_spec(path)
        rebuilt = build_from_spec(spec, device="meta")
        # The description of the rebuilt module is the file itself: every Conv2d and Linear
        # with its shapes, kernel, stride, padding, groups and bias, the channels and params.
        assert _describe(rebuilt, spec) == spec, path.name
        assert sum(p.numel() for p in rebuilt.parameters()) == spec["params"], path.name


def test_rebuild_on_cpu_runs_and_matches_meta(tx2_dir):
    spec = read_spec(tx2_dir / "models" / "squeezenet_50.json")
    cpu = build_from_spec(spec)
    meta = build_from_spec(spec, device="meta")
    assert [p.shape for p in cpu.parameters()] == [p.shape for p in meta.parameters()]
    assert cpu.eval()(torch.zeros(1, 3, 224, 224)).shape == (1, 1000)


def test_write_then_read_round_trips(tmp_path, tx2_dir):
    spec = read_spec(tx2_dir / "models" / "resnet18_70.json")
    path = write_spec(spec, tmp_path / "sub" / "resnet18_70.json")
    assert read_spec(path) == spec
    assert list(json.loads(path.read_text())) == list(spec)  # key order kept


def test_hidden_linear_layers_are_in_out_channels_and_rebuild():
    with torch.device("meta"):
        model = torchvision.models.alexnet(num_classes=10)
    spec = spec_from_module(model, name="alexnet_0", net="alexnet", prune_level=0, input_size=(3, 64, 64),
                            num_classes=10, torchvision_name="alexnet")
    assert spec["out_channels"]["classifier.1"] == 4096
    assert "classifier.6" not in spec["out_channels"]  # the classifier
    spec["out_channels"]["classifier.1"] = 100
    rebuilt = build_from_spec(spec, device="meta")
    assert rebuilt.classifier[1].out_features == 100 and rebuilt.classifier[4].in_features == 100


def test_spec_macs_match_torch_flop_counter():
    model = torchvision.models.resnet18(num_classes=10).eval()
    spec = spec_from_module(model, name="r", net="resnet18", prune_level=0, input_size=(3, 32, 32),
                            num_classes=10, torchvision_name="resnet18")
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.zeros(1, 3, 32, 32))
    assert spec_macs(spec) == counter.get_total_flops() // 2


def test_channels_that_cannot_apply_name_the_layer(tx2_dir):
    spec = read_spec(tx2_dir / "models" / "resnet18_50.json")
    too_many = copy.deepcopy(spec)
    too_many["out_channels"]["layer2.0.conv1"] = 999
    with pytest.raises(NetworkError, match=r"layer2\.0\.conv1.*999"):
        build_from_spec(too_many, device="meta")
    unknown = copy.deepcopy(spec)
    unknown["out_channels"]["layer9.conv"] = 3
    with pytest.raises(NetworkError, match=r"layer9\.conv"):
        build_from_spec(unknown, device="meta")
    # layer1.0.conv2 shares its channels with conv1 (a residual): the two must agree
    coupled = copy.deepcopy(spec)
    coupled["out_channels"]["layer1.0.conv2"] = spec["out_channels"]["conv1"] - 4
    with pytest.raises(NetworkError, match=r"'layer1\.1\.conv2' cannot have 32 .*it has 28"):
        build_from_spec(coupled, device="meta")


def test_read_spec_names_the_missing_key(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text(json.dumps({"name": "x", "net": "resnet18"}))
    with pytest.raises(NetworkError, match=r"broken\.json.*torchvision"):
        read_spec(path)
