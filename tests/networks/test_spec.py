"""Architecture specs: every spec in the repository (and the TX2's) rebuilds to its recorded
shapes; bad specs name the layer."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from perf4sight.cli import main
from perf4sight.config import load_config
from perf4sight.errors import NetworkError
from perf4sight.networks import (
    build_from_spec,
    load_architecture,
    load_network,
    read_spec,
    spec_from_module,
    spec_macs,
    write_spec,
)
from perf4sight.networks.trust import allow_model_files_anywhere


def _describe(module: nn.Module, spec: dict) -> dict:
    return spec_from_module(
        module, name=spec["name"], net=spec["net"], prune_level=spec["prune_level"],
        input_size=spec["input_size"], num_classes=spec["num_classes"], level_reached=spec.get("level_reached"),
        torchvision_name=spec["torchvision"], torchvision_kwargs=spec["torchvision_kwargs"],
        model_desc=spec.get("model_desc"),
    )


def _rebuild_each(paths: list[Path]) -> None:
    for path in paths:
        spec = read_spec(path)
        rebuilt = build_from_spec(spec, device="meta")
        # The description of the rebuilt module is the file itself: every Conv2d and Linear
        # with its shapes, kernel, stride, padding, groups and bias, the channels and params.
        assert _describe(rebuilt, spec) == spec, path.name
        assert sum(p.numel() for p in rebuilt.parameters()) == spec["params"], path.name


@pytest.mark.slow
def test_every_spec_in_the_repository_rebuilds_with_its_shapes_and_params(h200_dir):
    zoo = sorted((h200_dir.parent / "cpu_zoo" / "models").glob("*_45.json"))  # one level of each of 20 networks
    h200 = sorted((h200_dir / "models").glob("*.json"))
    assert (len(zoo), len(h200)) == (20, 8 * 4)
    _rebuild_each(zoo + h200)


@pytest.mark.slow
def test_every_tx2_spec_rebuilds_with_its_shapes_and_params(tx2_dir):
    paths = sorted((tx2_dir / "models").glob("*.json"))
    assert sorted({read_spec(p)["net"] for p in paths}) == ["googlenet", "mobilenetv2", "resnet18", "squeezenet"]
    assert len(paths) == 4 * 13
    _rebuild_each(paths)


def test_rebuild_on_cpu_runs_and_matches_meta(h200_dir):
    spec = read_spec(h200_dir / "models" / "squeezenet_60.json")
    cpu = build_from_spec(spec)
    meta = build_from_spec(spec, device="meta")
    assert [p.shape for p in cpu.parameters()] == [p.shape for p in meta.parameters()]
    assert cpu.eval()(torch.zeros(1, 3, 224, 224)).shape == (1, 1000)


def test_write_then_read_round_trips(tmp_path, h200_dir):
    spec = read_spec(h200_dir / "models" / "resnet18_60.json")
    path = write_spec(spec, tmp_path / "sub" / "resnet18_60.json")
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


def test_channels_that_cannot_apply_name_the_layer(h200_dir):
    spec = read_spec(h200_dir / "models" / "resnet18_60.json")
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
    with pytest.raises(NetworkError, match=r"'layer1\.1\.conv2' cannot have 51 .*it has 47"):
        build_from_spec(coupled, device="meta")


def test_read_spec_names_the_missing_key(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text(json.dumps({"name": "x", "net": "resnet18"}))
    with pytest.raises(NetworkError, match=r"broken\.json.*torchvision"):
        read_spec(path)



@pytest.fixture
def small_spec() -> dict:
    """The spec of an unpruned resnet18 for 10 classes at 3x32x32 (traced on meta, fast)."""
    with torch.device("meta"):
        model = torchvision.models.resnet18(num_classes=10)
    return spec_from_module(model, name="resnet18_0", net="resnet18", prune_level=0, input_size=(3, 32, 32),
                            num_classes=10, torchvision_name="resnet18")


def _layer(spec: dict, name: str) -> dict:
    return next(entry for entry in spec["layers"] if entry["name"] == name)


def _written(tmp_path: Path, spec: dict, change: Callable[[dict], object]) -> Path:
    """A copy of `spec` with `change` applied, written to `edited.json`."""
    spec = copy.deepcopy(spec)
    change(spec)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(spec))
    return path


# Each edit is refused by read_spec with a NetworkError naming the file and what is wrong,
# neither a traceback nor silently ignored (a prediction for the unedited spec).
BAD_SPECS = {
    "input_size text": (lambda s: s.update(input_size="abc"), r"input_size 'abc' is not three positive integers"),
    "input_size zero": (lambda s: s.update(input_size=[3, 0, 0]), r"input_size \[3, 0, 0\] is not three positive"),
    "num_classes text": (lambda s: s.update(num_classes="ten"), r"num_classes 'ten' is not a positive integer"),
    "layer without name": (lambda s: s["layers"][1].pop("name"), r"layers\[1\] is not an object with a 'name'"),
    "layer out text": (lambda s: _layer(s, "conv1").update(out="64"), r"layers entry 'conv1': out '64' is not a list"),
    "out_channels list": (lambda s: s.update(out_channels=[64]), r"out_channels is not an object of layer names"),
    "out_channels negative": (lambda s: s["out_channels"].update(conv1=-3), r"out_channels 'conv1': -3 is not a positive"),
    "out_channels unknown": (
        lambda s: s["out_channels"].update({"layer9.conv": 3}), r"out_channels 'layer9\.conv' is not in the spec's layers"
    ),
    "out_channels edited alone": (
        lambda s: s["out_channels"].update({"layer1.0.conv1": 32}),
        r"layers entry 'layer1\.0\.conv1' has 64 output channels, out_channels says 32",
    ),
    "layers edited alone": (
        lambda s: _layer(s, "layer1.0.conv1")["out"].__setitem__(0, 500000),
        r"layers entry 'layer1\.0\.conv1' has 500000 output channels, out_channels says 64",
    ),
    "classifier": (
        lambda s: _layer(s, "fc")["out"].__setitem__(0, 500000), r"layers entry 'fc' has 500000 .*num_classes says 10"
    ),
}


@pytest.mark.parametrize("case", list(BAD_SPECS))
def test_read_spec_names_the_file_and_what_is_wrong(tmp_path, small_spec, case):
    change, message = BAD_SPECS[case]
    with pytest.raises(NetworkError, match=rf"edited\.json: {message}"):
        read_spec(_written(tmp_path, small_spec, change))


def test_a_spec_is_a_json_object(tmp_path):
    path = tmp_path / "five.json"
    path.write_text("5")
    with pytest.raises(NetworkError, match=r"five\.json: a spec is a JSON object, not int"):
        read_spec(path)


@pytest.mark.parametrize(
    ("case", "message"),
    [("input_size zero", "input_size [3, 0, 0] is not three positive"), ("out_channels negative", "'conv1': -3")],
)
def test_cli_refuses_a_bad_spec_with_one_line(tmp_path, capsys, small_spec, case, message):
    path = _written(tmp_path, small_spec, BAD_SPECS[case][0])
    assert main(["prune", "--net", str(path), "--out", str(tmp_path / "models")]) == 2
    err = capsys.readouterr().err
    assert "edited.json" in err and message in err and "Traceback" not in err


def test_the_architecture_of_a_correct_spec_follows_its_tables(tmp_path, small_spec):
    def prune(spec: dict) -> None:
        spec["out_channels"]["layer1.0.conv1"] = 32
        _layer(spec, "layer1.0.conv1")["out"][0] = 32
        _layer(spec, "layer1.0.conv2")["in"][0] = 32

    arch = load_architecture(_written(tmp_path, small_spec, prune))
    conv2 = next(layer for layer in arch.layers if layer.name == "layer1.0.conv2")
    assert conv2.in_shape == (32, 8, 8) and arch.complete


def test_a_layer_the_base_lacks_is_refused(tmp_path, small_spec):
    def add_layer(spec: dict) -> None:
        spec["out_channels"]["layer9.conv"] = 8
        spec["layers"].append({**_layer(spec, "conv1"), "name": "layer9.conv", "out": [8, 16, 16]})

    with pytest.raises(NetworkError, match=r"layer 'layer9\.conv' is not a Conv2d or Linear of resnet18"):
        load_architecture(_written(tmp_path, small_spec, add_layer))


def test_a_layers_table_its_out_channels_do_not_build_is_refused(tmp_path, small_spec):
    # The input recorded for layer1.0.conv2 cannot follow from the base: the layers table
    # and the rebuild from out_channels disagree, and the spec is refused rather than
    # described by the rebuild whatever the table says.
    def disagree(spec: dict) -> None:
        _layer(spec, "layer1.0.conv2")["in"][0] = 63

    message = r"layer 'layer1\.0\.conv2' is recorded as \[63, 8, 8\] -> \[64, 8, 8\], .* has \[64, 8, 8\] -> \[64, 8, 8\]"
    with pytest.raises(NetworkError, match=message):
        load_architecture(_written(tmp_path, small_spec, disagree))


SUMMED = """
import torch
from torch import nn


class Summed(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(1, 8, 3, padding=1)
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        x = torch.relu(self.conv1(x)).sum(1, keepdim=True)
        x = torch.relu(self.conv2(x)).mean((2, 3))
        return self.fc(x)


def summed(num_classes: int = 10) -> nn.Module:
    return Summed(num_classes)
"""


def test_a_base_without_channel_rules_is_rebuilt_when_the_tables_agree(tmp_path):
    # A channel sum has no channel rule: the spec is rebuilt, and its table checked, silently.
    model_file = tmp_path / "summed.py"
    model_file.write_text(SUMMED)
    module = load_network(model_file, input_size=(3, 8, 8)).module
    spec = spec_from_module(module, name="summed_50", net="summed", prune_level=50, input_size=(3, 8, 8),
                            num_classes=10, model_desc=str(model_file))
    spec["out_channels"]["conv1"] = 8
    _layer(spec, "conv1")["out"][0] = 8
    arch = load_architecture(write_spec(spec, tmp_path / "summed_50.json"))
    assert [layer.output for layer in arch.layers if layer.name in ("conv1", "conv2")] == [(8, 8, 8), (8, 8, 8)]


@pytest.fixture
def specs_from_elsewhere(tmp_path):
    """A spec folder whose specs name a model file beside them, and one outside it."""
    specs = tmp_path / "specs"
    specs.mkdir()
    outside = tmp_path / "elsewhere" / "summed.py"
    outside.parent.mkdir()
    for path in (specs / "summed.py", outside):
        path.write_text(SUMMED)
    module = load_network(outside, input_size=(3, 8, 8)).module
    for name, model_file in (("summed_0", "summed.py"), ("summed_10", "../elsewhere/summed.py")):
        spec = spec_from_module(module, name=name, net="summed", prune_level=0, input_size=(3, 8, 8),
                                num_classes=10, model_desc=str(specs / model_file))
        write_spec(spec, specs / f"{name}.json")
    yield specs, outside
    allow_model_files_anywhere(False)


def test_a_spec_runs_a_model_file_outside_its_folder_only_when_allowed(specs_from_elsewhere, capsys):
    specs, outside = specs_from_elsewhere
    build_from_spec(read_spec(specs / "summed_0.json"))  # beside the spec: run, and said so
    assert f"running model file {specs / 'summed.py'} (spec summed_0's model_desc)" in capsys.readouterr().out
    with pytest.raises(NetworkError, match=f"model_desc {outside} lies outside the spec's folder {specs}: "
                                           "building its network would run that file's code"):
        read_spec(specs / "summed_10.json")
    allow_model_files_anywhere(True)
    assert read_spec(specs / "summed_10.json")["model_desc"] == str(outside)


def test_the_user_s_model_desc_dir_is_trusted_by_the_config_that_names_it(specs_from_elsewhere, tmp_path):
    specs, outside = specs_from_elsewhere
    config = tmp_path / "config.ini"
    config.write_text(f"[create_network_dataset]\nnetworks = ['summed']\nmodel_desc_dir = {outside.parent}\n"
                      f"model_path = {specs}\n")
    with pytest.raises(NetworkError, match="outside the spec's folder"):
        read_spec(specs / "summed_10.json")
    load_config(config)
    assert read_spec(specs / "summed_10.json")["model_desc"] == str(outside)


def test_the_command_line_allows_model_files_anywhere_when_asked(specs_from_elsewhere, tmp_path, capsys):
    specs, outside = specs_from_elsewhere
    command = ["prune", "--net", str(specs / "summed_10.json"), "--levels", "0", "--input-size", "3,8,8",
               "--num-classes", "10", "--out", str(tmp_path / "pruned")]
    assert main(command) == 2
    assert "lies outside the spec's folder" in capsys.readouterr().err
    assert main(["--allow-model-files", *command]) == 0
    assert (tmp_path / "pruned" / "summed_0.json").is_file()
