"""Standalone model files: they import only torch and rebuild the pruned network anywhere."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torchvision

from perf4sight.config import load_section
from perf4sight.errors import NetworkError
from perf4sight.networks import (
    CHECKED_STACKS,
    build_from_spec,
    create_network_dataset,
    load_network,
    prune_network,
    read_spec,
    write_model_file,
)
from perf4sight.networks.registry import build_torchvision

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

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


@pytest.mark.slow
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


def test_only_arguments_that_change_the_layer_are_written(tmp_path):
    """A default the host's PyTorch added (BatchNorm2d's bias) is not written: older releases refuse it."""
    pruned = prune_network(build_torchvision("resnet18", num_classes=10, device="meta"), 50, input_size=(3, 32, 32)).module
    path = write_model_file(pruned, tmp_path / "resnet18_50.py", net="resnet18", name="resnet18_50",
                            num_classes=10, input_size=(3, 32, 32))
    source = path.read_text()
    assert f"nn.BatchNorm2d({pruned.bn1.num_features}))" in source
    assert "bias=True" not in source and "device" not in source
    assert f"nn.Conv2d(3, {pruned.conv1.out_channels}, (7, 7), stride=(2, 2), padding=(3, 3), bias=False))" in source
    assert "nn.Linear(%d, num_classes))" % pruned.fc.in_features in source
    stacks = " and ".join(f"Python {py} + PyTorch {pt}" for py, pt in CHECKED_STACKS)
    assert f"checked to build and train on {stacks}" in source


_TRAIN_OLD = """
import importlib.util, json, sys
import torch
result = {}
for job in json.load(open(sys.argv[1])):
    spec = importlib.util.spec_from_file_location(job["name"], job["file"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    net = getattr(module, job["net"])(num_classes=job["num_classes"])
    net.load_state_dict(torch.load(job["state"]))  # strict: same names and shapes
    before = [p.detach().clone() for p in net.parameters()]
    optimiser = torch.optim.SGD(net.parameters(), lr=0.1)
    torch.manual_seed(0)
    x = torch.randn([2] + job["input_size"])
    loss = torch.nn.functional.cross_entropy(net.train()(x), torch.tensor([0, 1]))
    loss.backward()
    optimiser.step()
    result[job["name"]] = {
        "shapes": {k: list(v.shape) for k, v in net.state_dict().items()},
        "loss": loss.item(),
        # a parameter whose gradient is 0 for these two samples (a channel that no ReLU lets
        # through) keeps its value: every one has a gradient, most change
        "trained": sum(p.grad is not None for p in net.parameters()),
        "changed": sum(not torch.equal(a, b) for a, b in zip(before, net.parameters())),
        "params": len(before),
    }
result["imported"] = sorted({m.split(".")[0] for m in sys.modules} & {"perf4sight", "torchvision", "numpy", "torch_pruning"})
result["versions"] = [sys.version_info[0], sys.version_info[1], torch.__version__]
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def example_model_files(tmp_path_factory) -> list[dict]:
    """Model files of every network of the demo and of cpu_heldout.ini at the config's highest
    level, with the host's pruned module's state dict saved beside each."""
    jobs = []
    for config in ("cpu_demo.ini", "cpu_heldout.ini"):
        settings = load_section(EXAMPLES / config, "create_network_dataset")
        out = tmp_path_factory.mktemp(Path(config).stem)
        settings = replace(settings, pruning_perc=[max(settings.pruning_perc)], model_path=out, write_model_files=True)
        for row in create_network_dataset(settings).itertuples():
            torch.manual_seed(0)
            module = build_from_spec(read_spec(row.spec_file))
            torch.save(module.state_dict(), out / f"{row.name}.pt")
            jobs.append({"name": row.name, "net": row.network, "file": str(out / f"{row.name}.py"),
                         "state": str(out / f"{row.name}.pt"), "num_classes": settings.num_classes,
                         "input_size": list(settings.input_size),
                         "shapes": {k: list(v.shape) for k, v in module.state_dict().items()}})
    return jobs


@pytest.mark.slow
def test_example_model_files_build_train_and_load_the_pruned_state_on_old_stacks(old_stack, example_model_files, tmp_path):
    names = {job["name"] for job in example_model_files}
    assert {n.rsplit("_", 1)[0] for n in names} == {
        "resnet18", "mobilenetv2", "squeezenet", "alexnet", "mobilenet_v3_small", "regnet_x_400mf", "vgg11", "googlenet",
        "mnasnet", "resnet50"}
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps(example_model_files))
    run = old_stack.run(["-c", _TRAIN_OLD, jobs], timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.splitlines()[-1])
    assert result["versions"][:2] == [int(v) for v in old_stack.python_version.split(".")]
    assert result["versions"][2].split("+")[0] == old_stack.torch_version
    assert result["imported"] == []
    for job in example_model_files:
        got = result[job["name"]]
        assert got["shapes"] == job["shapes"], job["name"]
        assert math.isfinite(got["loss"]) and got["loss"] > 0
        assert got["trained"] == got["params"] > 0, job["name"]  # the step trained every parameter
        assert got["changed"] >= 0.9 * got["params"], job["name"]


@pytest.mark.parametrize("network", ["resnet18", "mobilenet_v2"])
def test_a_model_file_describes_the_network_it_was_written_from(network, tmp_path):
    """What the device runs is what the spec describes, layer for layer: torch.fx alone would
    write resnet18's residual `out += identity` as `out = out + identity`, a new tensor."""
    from perf4sight.architecture import trace_architecture

    pruned = prune_network(build_torchvision(network, num_classes=10, device="meta"), 50, input_size=(3, 32, 32)).module
    path = write_model_file(pruned, tmp_path / f"{network}_50.py", net=network, name=f"{network}_50",
                            num_classes=10, input_size=(3, 32, 32))
    written = load_network(path, input_size=(3, 32, 32), num_classes=10).module
    original, rebuilt = ([layer.replaced(name="") for layer in trace_architecture(m, (3, 32, 32)).layers]
                         for m in (pruned.to_empty(device="cpu"), written))
    assert rebuilt == original
    assert any(layer.kind == "add" and layer.inplace for layer in original) == (network == "resnet18")
