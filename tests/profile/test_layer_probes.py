"""Layer-level tests: the layer shapes of real networks, their probes as model files, and a real
probe campaign on the CPU read back as layer times."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torchvision

from perf4sight.architecture import trace_architecture
from perf4sight.cli import main
from perf4sight.config import ProfileSettings
from perf4sight.device.definitions import MAX_INPUT_EXTENT
from perf4sight.device.models import load_model_file
from perf4sight.device.test_config import ProfileTest, read_test_config
from perf4sight.errors import NetworkError
from perf4sight.features.network import gemm_flops
from perf4sight.networks import spec_from_module, write_spec
from perf4sight.networks.spec import read_spec, spec_architecture
from perf4sight.profile import profile_from_settings
from perf4sight.profile.test_config import create_test_config
from perf4sight.profile.layer_probes import PROBE_NET, LayerShape, layer_shapes, probe_module, read_layer_times, write_probes


@pytest.fixture(scope="module")
def mobilenet_shapes() -> list[LayerShape]:
    spec = spec_from_module(torchvision.models.mobilenet_v2(num_classes=10), name="mobilenet_v2_0", net="mobilenet_v2",
                            prune_level=0, input_size=(3, 64, 64), num_classes=10,
                            torchvision_name="mobilenet_v2")
    return layer_shapes([spec_architecture(spec)])


def test_layer_shapes_are_the_distinct_convolutions_and_linear_layers(mobilenet_shapes: list[LayerShape]) -> None:
    module = torchvision.models.mobilenet_v2(num_classes=10)
    convs = [m for m in module.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(mobilenet_shapes) == len(set(mobilenet_shapes)) < len(convs) + 1  # repeated blocks share shapes
    kinds = {s.kind for s in mobilenet_shapes}
    assert kinds == {"conv2d", "linear"}
    (classifier,) = [s for s in mobilenet_shapes if s.kind == "linear"]
    assert (classifier.in_shape, classifier.out_shape, classifier.bias) == ((1280, 1, 1), (10, 1, 1), True)
    depthwise = [s for s in mobilenet_shapes if s.kind == "conv2d" and s.groups > 1]
    assert depthwise and all(s.groups == s.in_shape[0] == s.out_shape[0] for s in depthwise)
    first = mobilenet_shapes[0]
    assert (first.in_shape, first.out_shape, first.stride) == ((3, 64, 64), (32, 32, 32), (2, 2))
    assert gemm_flops(first.layer()) == 2 * 32 * 32 * 32 * 3 * 9  # the features' own arithmetic


def test_a_probe_name_gives_back_its_shape(mobilenet_shapes: list[LayerShape]) -> None:
    for shape in mobilenet_shapes + [s.base for s in mobilenet_shapes]:
        assert "_" not in shape.name and LayerShape.from_name(shape.name) == shape
    with pytest.raises(NetworkError, match="'conv-3x3' is not a probe's name"):
        LayerShape.from_name("conv-3x3")


def test_a_probed_layer_computes_the_gradient_of_its_input() -> None:
    shape = LayerShape("conv2d", (8, 10, 10), (16, 5, 5), (3, 3), (2, 2), (1, 1), 1, False)
    probe = probe_module(shape)
    scores = probe(torch.randn(4, 8, 10, 10))
    assert scores.shape == (4, 16)
    scores.sum().backward()
    front, conv = probe[0], probe[1]
    assert front.weight.grad is not None and front.weight.grad.abs().sum() > 0  # through the layer's input
    assert conv.weight.grad is not None


@pytest.mark.slow
def test_a_probe_campaign_gives_each_layer_shape_its_time(tmp_path: Path) -> None:
    shapes = [LayerShape("conv2d", (16, 16, 16), (32, 16, 16), (3, 3), (1, 1), (1, 1), 1, False),
              LayerShape("conv2d", (16, 16, 16), (16, 16, 16), (3, 3), (1, 1), (1, 1), 16, False),
              LayerShape("linear", (64, 1, 1), (10, 1, 1), bias=True)]
    models = tmp_path / "probes"
    paths = write_probes(shapes, models)
    assert {p.name for p in paths} == {f"{PROBE_NET}_{s.name}.py" for s in shapes + [s.base for s in shapes]}
    spec = read_spec(models / f"{PROBE_NET}_{shapes[0].name}.json")
    assert spec["input_size"] == [16, 16, 16] and spec["num_classes"] == 32
    # the device's own loader builds the probe from its file alone
    (test,) = [t for t in _tests(models, tmp_path) if t.log_name == f"{PROBE_NET}_{shapes[0].name}"][:1]
    loaded = load_model_file(test)
    assert loaded.input_size == (16, 16, 16) and loaded.num_classes == 32
    assert [type(m) for m in loaded.module.children()] == [type(m) for m in probe_module(shapes[0]).children()]

    log_dir = tmp_path / "logs"
    settings = ProfileSettings(network=[PROBE_NET], bs=[2, 16], stage=["training"], profile_variables=["latency"],
                               local_model_loc=models, test_config=tmp_path / "t.ini", log_dir=log_dir, iterations=3)
    summary = profile_from_settings(settings)
    assert (summary.passed, summary.failed) == (10, 0)  # two shapes share their base
    times = read_layer_times(log_dir / "latency")
    assert sorted(map(tuple, times[["shape", "batch_size"]].to_numpy().tolist())) == sorted(
        (s, bs) for s in shapes for bs in (2, 16))
    assert (times["probe_ms"] > 0).all() and (times["base_ms"] > 0).all() and (times["layer_ms"] >= 0).all()
    assert times["layer_ms"].eq((times["probe_ms"] - times["base_ms"]).clip(lower=0)).all()
    assert set(times["stage"]) == {"training"}


def _tests(models: Path, tmp_path: Path) -> list[ProfileTest]:
    settings = ProfileSettings(network=[PROBE_NET], bs=[2], stage=["training"], profile_variables=["latency"],
                               local_model_loc=models, test_config=tmp_path / "only.ini", log_dir=tmp_path / "x")
    return read_test_config(create_test_config(settings))


def test_a_linear_layer_wider_than_an_input_may_be_is_probed_over_two_axes(tmp_path: Path) -> None:
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 1), torch.nn.Flatten(), torch.nn.Linear(5 * 63 * 63, 10))
    (_, linear) = layer_shapes([trace_architecture(module, (3, 63, 63), name="wide", num_classes=10)])
    assert linear.kind == "linear" and math.prod(linear.in_shape) == 5 * 63 * 63 > MAX_INPUT_EXTENT
    assert max(linear.in_shape) <= MAX_INPUT_EXTENT and linear.layer().in_shape == (5 * 63 * 63,)
    (path, _) = write_probes([linear], tmp_path)  # its base's input size passes the device's check
    probe = probe_module(linear)
    assert probe(torch.randn(2, *linear.in_shape)).shape == (2, 10)
    assert read_spec(path.with_suffix(".json"))["input_size"] == list(linear.base.in_shape)


def test_profile_probes_writes_the_probes_of_the_networks_models(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    models = tmp_path / "models"
    spec = spec_from_module(torchvision.models.squeezenet1_1(num_classes=10), name="squeezenet_0", net="squeezenet",
                            prune_level=0, input_size=(3, 32, 32), num_classes=10, torchvision_name="squeezenet1_1")
    write_spec(spec, models / "squeezenet_0.json")
    config = tmp_path / "c.ini"
    config.write_text(f"[profile]\nnetwork = ['squeezenet', 'missing']\nlocal_model_loc = {models}\n")
    assert main(["profile", "probes", "--config", str(config)]) == 0
    assert f"add '{PROBE_NET}' to [profile] network" in capsys.readouterr().out
    shapes = layer_shapes([spec_architecture(spec)])
    written = {p.stem for p in models.glob(f"{PROBE_NET}_*.py")}
    assert written == {f"{PROBE_NET}_{s.name}" for s in shapes + [s.base for s in shapes]}
    assert {p.stem for p in models.glob(f"{PROBE_NET}_*.json")} == written

    config.write_text(f"[profile]\nnetwork = ['missing']\nlocal_model_loc = {models}\n")
    assert main(["profile", "probes", "--config", str(config)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"error: {config}: [profile] network: no models of missing in {models}"
