"""The one network loader: every kind of source, and errors that name what was wrong."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

from perf4sight.architecture import Detail, record_timeline, trace_architecture
from perf4sight.errors import ConfigError, DataNotFoundError, ModelFileError, NetworkError
from perf4sight.networks import (
    architecture_from_spec,
    build_from_spec,
    load_architecture,
    load_network,
    read_spec,
    spec_from_module,
    write_spec,
)


def test_torchvision_name_and_alias():
    loaded = load_network("squeezenet", num_classes=10, input_size=(3, 32, 32))
    assert isinstance(loaded.module, torchvision.models.SqueezeNet)
    assert (loaded.name, loaded.input_size, loaded.num_classes, loaded.spec) == ("squeezenet", (3, 32, 32), 10, None)
    assert loaded.module.classifier[1].out_channels == 10
    assert load_network("mobilenetv2").module.classifier[1].out_features == 1000
    assert load_network("mnasnet").input_size == (3, 224, 224)


def test_googlenet_has_no_auxiliary_heads():
    module = load_network("googlenet", num_classes=10).module
    assert module.aux1 is None and module.aux2 is None


def test_spec_file(h200_dir):
    path = h200_dir / "models" / "resnet18_30.json"
    loaded = load_network(path)
    spec = read_spec(path)
    assert (loaded.name, loaded.num_classes, loaded.input_size, loaded.spec) == ("resnet18_30", 1000, (3, 224, 224), spec)
    assert sum(p.numel() for p in loaded.module.parameters()) == spec["params"]
    assert all(not p.is_meta for p in loaded.module.parameters())
    with pytest.raises(NetworkError, match="1000 classes, not 10"):
        load_network(path, num_classes=10)


def test_architecture_of_a_spec_is_built_on_meta_and_matches_the_cpu_build(h200_dir):
    path = h200_dir / "models" / "googlenet_60.json"
    arch = load_architecture(path)
    spec = read_spec(path)
    assert arch == trace_architecture(build_from_spec(spec), spec["input_size"], name="googlenet_60", num_classes=1000)
    assert arch.params == spec["params"] and arch.complete


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "googlenet"])
def test_a_name_is_traced_from_an_uninitialised_cpu_build_as_from_a_real_one(name):
    initialisers = {n: getattr(nn.init, n) for n in ("kaiming_normal_", "normal_", "ones_", "zeros_")}
    arch = load_architecture(name)
    assert {n: getattr(nn.init, n) for n in initialisers} == initialisers  # restored
    real = load_network(name).module
    assert arch == trace_architecture(real, (3, 224, 224), name=name, num_classes=1000)


def test_a_name_is_traced_once_per_input_size_and_classes():
    first, again = load_architecture("mobilenetv2"), load_architecture("mobilenet_v2")
    assert again.layers is first.layers  # the same trace, not a second one
    assert (first.name, again.name) == ("mobilenetv2", "mobilenet_v2")
    small = load_architecture("mobilenetv2", input_size=(3, 64, 64), num_classes=10)
    assert small.layers is not first.layers and small.num_classes == 10 and small.params < first.params
    with pytest.raises(NetworkError, match="inception_v3: does not run on inputs of size \\[3, 32, 32\\]"):
        load_architecture("inception_v3", input_size=(3, 32, 32))


def test_model_file_by_network_name_and_by_explicit_factory(tinynet_file, tmp_path, layer_shapes):
    loaded = load_network(tinynet_file, input_size=(3, 16, 16))
    assert (loaded.name, loaded.num_classes, loaded.input_size) == ("tinynet", 10, (3, 16, 16))
    # resnet18_50.py holds resnet18(): the level suffix is not part of the factory's name
    levelled = tmp_path / "tinynet_50.py"
    levelled.write_text(tinynet_file.read_text())
    assert layer_shapes(load_network(levelled, num_classes=4).module)["fc"] == (4, 32)
    explicit = load_network(f"{tinynet_file}:tinynet", num_classes=3)
    assert explicit.num_classes == 3 and explicit.module.fc.out_features == 3


_CLASSLESS = """
from torch import nn


def classless():  # the original tool's convention: a factory called with no arguments
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))


def ignoring(num_classes=1000):  # takes the classes, builds its own
    return classless()
"""


def test_a_factory_without_num_classes_builds_its_own_and_they_are_checked(tmp_path):
    from perf4sight.device.models import takes_num_classes

    path = tmp_path / "classless.py"
    path.write_text(_CLASSLESS)
    assert load_network(path, input_size=(3, 16, 16), num_classes=10).module[-1].out_features == 10
    assert load_architecture(path, input_size=(3, 16, 16), num_classes=10).num_classes == 10
    for source in (path, f"{path}:ignoring"):
        for load in (load_network, load_architecture):
            with pytest.raises(NetworkError, match="outputs 10 class scores, not the 100 asked for"):
                load(source, input_size=(3, 16, 16), num_classes=100)
    assert not takes_num_classes(lambda: None) and not takes_num_classes(lambda num_classes, /: None)
    assert takes_num_classes(lambda num_classes: None) and takes_num_classes(lambda **options: None)
    assert takes_num_classes(torchvision.models.ResNet) and takes_num_classes(max)  # a signature not readable


def test_a_model_file_written_with_its_spec_is_for_the_specs_size(tmp_path, tinynet_file):
    """The network-dataset stage writes `<name>.py` beside `<name>.json`: the file is read at
    the spec's input size and classes unless others are asked for (not at 3x224x224)."""
    from perf4sight.networks import write_model_file

    module = load_network(tinynet_file, num_classes=7).module
    spec = spec_from_module(module, name="tinynet_0", net="tinynet", prune_level=0, input_size=(3, 16, 16),
                            num_classes=7, model_desc=str(tinynet_file))
    write_spec(spec, tmp_path / "tinynet_0.json")
    path = write_model_file(module, tmp_path / "tinynet_0.py", net="tinynet", name="tinynet_0", num_classes=7,
                            input_size=(3, 16, 16))
    loaded = load_network(path)
    assert (loaded.input_size, loaded.num_classes) == ((3, 16, 16), 7)
    assert load_architecture(path) == dataclasses.replace(load_architecture(tmp_path / "tinynet_0.json"),
                                                          name="tinynet_0")
    assert load_network(path, input_size=(3, 32, 32)).input_size == (3, 32, 32)
    (tmp_path / "tinynet_0.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"tinynet_0\.json: no input_size and num_classes to read"):
        load_network(path)


def test_a_model_file_is_traced_without_initialising_its_weights(tinynet_file, monkeypatch):
    real = load_network(tinynet_file, input_size=(3, 16, 16))
    expected = trace_architecture(real.module, (3, 16, 16), name="tinynet", num_classes=10)
    calls = []
    monkeypatch.setattr(nn.init, "kaiming_uniform_", lambda t, *a, **k: calls.append(t) or t)
    assert load_architecture(tinynet_file, input_size=(3, 16, 16)) == expected
    assert not calls  # no initialiser ran
    load_network(tinynet_file, input_size=(3, 16, 16))
    assert calls  # a network to run is initialised


# A new process recording a model file with the cache off: whether it imported torchvision.
_MODEL_FILE = """
import sys
from perf4sight.architecture import Detail
from perf4sight.networks import load_architecture
arch = load_architecture(sys.argv[1], needs=Detail.LIFETIMES, input_size=(3, 32, 32), num_classes=10)
print(len(arch.layers), "torchvision" in sys.modules)
"""


@pytest.mark.slow
def test_a_model_file_is_recorded_without_importing_torchvision():
    """A path is no torchvision name: telling so lists no builders, which with the cache off
    (or empty) would import torchvision, over a second, for a network that needs only torch."""
    example = Path(__file__).resolve().parents[2] / "examples" / "model_files" / "resnet_like.py"
    run = subprocess.run([sys.executable, "-c", _MODEL_FILE, f"{example}:resnet_like"], capture_output=True,
                         text=True, env={**os.environ, "PERF4SIGHT_CACHE": "0"}, timeout=300, check=True)
    layers, torchvision_imported = run.stdout.split()
    assert int(layers) > 10 and torchvision_imported == "False"


def test_a_model_file_is_traced_once_per_process_until_its_bytes_change(tinynet_file, monkeypatch):
    """With the disk cache off, a second load of the same file at the same options is this
    process's own; a file whose bytes changed is another network, traced again."""
    import perf4sight.networks.loader as loader

    monkeypatch.setenv("PERF4SIGHT_CACHE", "0")
    path = tinynet_file
    traced = []
    monkeypatch.setattr(loader, "trace_architecture", lambda *a, **k: traced.append(a) or trace_architecture(*a, **k))
    first = load_architecture(str(path), input_size=(3, 16, 16))
    assert load_architecture(str(path), input_size=(3, 16, 16)) is first and len(traced) == 1
    path.write_text(path.read_text() + "\n# another version\n")
    assert load_architecture(str(path), input_size=(3, 16, 16)) == first and len(traced) == 2


def test_the_loader_gives_each_source_what_is_needed(tmp_path, tinynet_file):
    """A spec at its own size: its layer table, or its base's trace and recording propagated;
    at another size, and for a model file, the network built and traced, its lifetimes
    recorded against that trace. Each holds what was asked and records only then."""
    spec = spec_from_module(torchvision.models.squeezenet1_1(num_classes=10), name="squeezenet_0", net="squeezenet",
                            prune_level=0, input_size=(3, 64, 64), num_classes=10, torchvision_name="squeezenet1_1")
    path = write_spec(spec, tmp_path / "squeezenet_0.json")
    table = load_architecture(path, needs=Detail.LAYER_TABLE)
    assert table == architecture_from_spec(spec) and not table.complete and not table.lifetimes
    traced = load_architecture(path)
    assert traced.complete and not traced.lifetimes and len(traced.layers) > len(table.layers)
    sources = ((path, {}), (path, {"input_size": (3, 32, 32)}), (tinynet_file, {"input_size": (3, 16, 16)}))
    for source, options in sources:
        arch = load_architecture(source, needs=Detail.LIFETIMES, stage="inference", **options)
        assert arch == load_architecture(source, **options) and list(arch.lifetimes) == ["inference"]
        assert arch.holds(Detail.LIFETIMES, "inference") and not arch.holds(Detail.LIFETIMES, "training")
        module = load_network(source, **options).module
        fresh = record_timeline(lambda: module, arch.input_size, arch.num_classes, "inference")
        assert arch.lifetimes["inference"].same_events(fresh), (source, options)
    # a layer table at another size is no spec's own table: the network is traced
    assert load_architecture(path, input_size=(3, 32, 32), needs=Detail.LAYER_TABLE).complete


def test_model_desc_dir_holds_the_users_own_networks(tinynet_file):
    loaded = load_network("tinynet", model_desc_dir=tinynet_file.parent)
    assert loaded.name == "tinynet" and loaded.module.conv1.out_channels == 16


def test_module_source():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3 * 8 * 8, 7)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x.flatten(1))

    net = Net()
    loaded = load_network(net, input_size=(3, 8, 8))
    assert loaded.module is net and (loaded.name, loaded.num_classes) == ("net", 7)
    arch = load_architecture(net, input_size=(3, 8, 8))
    assert arch.params == 3 * 64 * 7 + 7 and [layer.kind for layer in arch.layers] == ["linear"]


def test_classes_of_a_module_are_found_without_touching_it():
    class Viewed(nn.Module):  # x.view(x.size(0), -1) cannot take an empty batch
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.bn = nn.BatchNorm2d(4)
            self.fc = nn.Linear(4 * 6 * 6, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.bn(self.conv(x)).view(x.size(0), -1))

    for net in (Viewed().eval(), nn.Sequential(nn.Conv2d(3, 2, 1), nn.Flatten(), nn.Linear(128, 9))):
        before = {k: v.clone() for k, v in net.state_dict().items()}
        modes = [m.training for m in net.modules()]
        classes = load_network(net, input_size=(3, 8, 8)).num_classes
        assert classes == (5 if isinstance(net, Viewed) else 9)
        assert [m.training for m in net.modules()] == modes
        assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
        assert next(net.parameters()).device.type == "cpu"


def test_unknown_name_lists_the_known_ones(tmp_path):
    with pytest.raises(NetworkError, match=r"unknown network 'resnet19'; known networks: .*mobilenetv2.*resnet18"):
        load_network("resnet19")
    with pytest.raises(NetworkError, match=r"nor resnet19\.py or resnet19\.json in"):
        load_network("resnet19", model_desc_dir=tmp_path)
    # a path is no name: what it would have to be, not the list of names
    saved = tmp_path / "net.pt"
    saved.write_bytes(b"not read")
    for source in (saved, "models/resnet19"):
        with pytest.raises(NetworkError, match=r"neither a spec \(\.json\) nor a model file .*\(\.pt, \.pth\) are"):
            load_network(source)


def test_broken_model_file_names_the_file_and_the_error(tmp_path):
    broken = tmp_path / "broken_net.py"
    broken.write_text("import torch\nimport not_a_module_at_all\n")
    with pytest.raises(ModelFileError, match=r"broken_net\.py: import failed: ModuleNotFoundError: .*not_a_module_at_all"):
        load_network(broken)
    no_factory = tmp_path / "lonely.py"
    no_factory.write_text("def helper():\n    return 1\n")
    with pytest.raises(ModelFileError, match=r"lonely\.py: no factory function 'lonely'; callables in the file: helper"):
        load_network(no_factory)
    failing = tmp_path / "failing.py"
    failing.write_text("def failing(num_classes=10):\n    raise RuntimeError('no GPU here')\n")
    with pytest.raises(ModelFileError, match=r"failing\.py: factory failing\(\) failed: RuntimeError: no GPU here"):
        load_network(failing)
    with pytest.raises(DataNotFoundError, match=r"missing\.py"):
        load_network(tmp_path / "missing.py")


def test_a_model_file_imports_the_modules_beside_it(tmp_path):
    """As when Python runs a script: its folder is first on the import path while it loads."""
    import sys

    (tmp_path / "blocks_beside.py").write_text(
        "from torch import nn\n\n\ndef conv_bn(i, o):\n    return nn.Sequential(nn.Conv2d(i, o, 3), nn.BatchNorm2d(o))\n")
    (tmp_path / "stacked.py").write_text(
        "from torch import nn\nfrom blocks_beside import conv_bn\n\n\ndef stacked(num_classes=10):\n"
        "    return nn.Sequential(conv_bn(3, 8), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, num_classes))\n")
    path = list(sys.path)
    assert load_network(tmp_path / "stacked.py", input_size=(3, 16, 16)).num_classes == 10
    assert sys.path == path


def test_bad_input_size_and_classes_are_refused():
    with pytest.raises(NetworkError, match=r"input size \[3, 32\] is not three positive integers"):
        load_network("resnet18", input_size=(3, 32))
    with pytest.raises(NetworkError, match="num_classes 0 is not a positive integer"):
        load_network("resnet18", num_classes=0)


def test_a_module_that_cannot_take_the_input_size_is_named():
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 7))
    assert load_architecture(net, input_size=(3, 8, 8)).num_classes == 7
    for load in (load_network, load_architecture):
        with pytest.raises(NetworkError, match=r"sequential: does not run on inputs of size \[3, 9, 9\]"):
            load(net, input_size=(3, 9, 9))


def test_a_torchvision_network_that_cannot_be_described_is_named_as_asked_with_the_whole_reason():
    from perf4sight.device.recipe import Recipe

    with pytest.raises(NetworkError) as raised:
        load_architecture("mobilenetv2", input_size=(3, 32, 32), num_classes=10, needs=Detail.LIFETIMES,
                          recipe=Recipe(precision="amp-bf16"))
    assert str(raised.value) == ("mobilenetv2: the tensor lifetimes (the replay's) cannot be recorded under amp-bf16: "
                                 "they are recorded on the meta device, where autocast does not run")
