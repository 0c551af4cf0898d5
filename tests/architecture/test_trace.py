"""The IR: tracing on the meta device, and propagation to pruned channel counts."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torchvision
from torch import nn

from perf4sight.architecture import LayerShape, trace_architecture, with_layer_shapes
from perf4sight.errors import NetworkError
from perf4sight.networks.model_file import build_from_file
from perf4sight.networks.spec import build_from_spec, read_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "model_files"


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn(self.conv(x)))
        y = y + y  # a functional op outside any leaf module
        return self.fc(torch.flatten(self.pool(y), 1))


def test_small_network_layers_shapes_and_saved_tensors() -> None:
    arch = trace_architecture(Small(), (3, 16, 16), name="small")
    kinds = [layer.kind for layer in arch.layers]
    assert kinds == ["conv2d", "batch_norm", "relu", "add", "max_pool2d", "linear"]
    conv, bn, relu, add, pool, fc = arch.layers
    assert conv.output == (8, 16, 16) and conv.kernel == (3, 3) and conv.padding == (1, 1)
    assert conv.params == 8 * 3 * 9 and bn.params == 16 and fc.params == 512 * 10 + 10
    assert arch.params == conv.params + bn.params + fc.params
    assert arch.buffer_bytes == 2 * 8 * 4 + 8  # running mean, var, num_batches_tracked
    # What autograd keeps per sample, in bytes (float32): the conv's input, the BatchNorm's
    # input, the ReLU's output, the pool's input and its int64 indices, the fc's input.
    assert conv.saved_bytes == 3 * 16 * 16 * 4
    assert bn.saved_bytes == 8 * 16 * 16 * 4
    assert relu.saved_bytes == 8 * 16 * 16 * 4 and relu.inplace
    assert add.saved_bytes == 0 and add.inputs == ((8, 16, 16), (8, 16, 16))
    assert pool.saved_bytes == 8 * 16 * 16 * 4 + 8 * 8 * 8 * 8
    assert fc.saved_bytes == 512 * 4 and fc.in_shape == (512,)
    assert [layer.sources for layer in arch.layers] == [(-1,), (0,), (1,), (2, 2), (3,), (4,)]


def test_tracing_leaves_the_model_untouched() -> None:
    model = Small()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trace_architecture(model, (3, 16, 16))
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert next(model.parameters()).device.type == "cpu"
    model.eval()
    trace_architecture(model, (3, 16, 16))
    assert not any(m.training for m in model.modules()) and model.bn.track_running_stats
    model.bn.train()
    trace_architecture(model, (3, 16, 16))
    assert [m.training for m in model.modules()] == [False, False, True, False, False, False]


@pytest.mark.parametrize("builder", ["mobilenet_v2", "squeezenet1_1", "googlenet", "vgg11"])
def test_every_leaf_and_functional_op_is_described(builder: str) -> None:
    kwargs = {"aux_logits": False, "init_weights": False} if builder == "googlenet" else {}
    model = getattr(torchvision.models, builder)(num_classes=10, **kwargs)
    arch = trace_architecture(model, (3, 64, 64))
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(arch.convs) == len(convs)
    assert arch.params == sum(p.numel() for p in model.parameters())
    assert arch.num_classes == 10 and math.prod(arch.layers[-1].output) == 10
    assert all(src < i for i, layer in enumerate(arch.layers) for src in layer.sources)


def _template(spec: dict) -> object:
    """The unpruned base: a torchvision builder, or the model file a spec names (MobileNetV2's)."""
    if spec["torchvision"] is None:
        base = build_from_file(spec["model_desc"], num_classes=spec["num_classes"])
        return trace_architecture(base, spec["input_size"], name=spec["model_desc"])
    with torch.device("meta"):
        base = getattr(torchvision.models, spec["torchvision"])(
            num_classes=spec["num_classes"], **spec["torchvision_kwargs"]
        )
    return trace_architecture(base, spec["input_size"], name=spec["torchvision"])


def _shapes(spec: dict) -> dict[str, LayerShape]:
    return {
        entry["name"]: LayerShape(tuple(entry["in"]), tuple(entry["out"]), entry.get("groups", 1))
        for entry in spec["layers"]
    }


def _each_propagated_as_rebuilt(paths: list[Path]) -> None:
    templates: dict[str, object] = {}
    for path in paths:
        spec = read_spec(path)
        template = templates.setdefault(spec["torchvision"] or spec["model_desc"], _template(spec))
        propagated = with_layer_shapes(template, _shapes(spec), name=spec["name"])
        rebuilt = trace_architecture(build_from_spec(spec), spec["input_size"], name=spec["name"])
        assert propagated == rebuilt, path.name
        assert propagated.params == spec["params"]


@pytest.mark.slow
def test_propagation_equals_a_rebuild_for_a_pruned_spec_of_each_h200_network(h200_dir: Path) -> None:
    _each_propagated_as_rebuilt(sorted((h200_dir / "models").glob("*_60.json")))


@pytest.mark.slow
def test_propagation_equals_a_rebuild_for_every_tx2_spec(tx2_dir: Path) -> None:
    _each_propagated_as_rebuilt(sorted((tx2_dir / "models").glob("*.json")))


def test_shapes_that_do_not_fit_name_the_layer(h200_dir: Path) -> None:
    spec = read_spec(h200_dir / "models" / "resnet18_60.json")
    shapes = _shapes(spec)
    first = shapes["layer1.0.conv1"]
    shapes["layer1.0.conv1"] = LayerShape((first.inputs[0] + 1, *first.inputs[1:]), first.output)
    with pytest.raises(NetworkError, match="layer1.0.conv1"):
        with_layer_shapes(_template(spec), shapes)


class ViewsByBatch(Small):
    """The same network, flattened the old way: `view(x.size(0), -1)` is ambiguous for an
    empty batch; the trace infers the size from a sample's elements, as samples would."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn(self.conv(x)))
        y = y + y
        y = self.pool(y)
        return self.fc(y.view(y.size(0), -1))


class NormalisedByMax(Small):
    """The same network, its input scaled by its largest value: a reduction over every
    element, which has no value for an empty batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x / x.amax())


@pytest.fixture
def devices(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The devices the trace runs on, in order."""
    from perf4sight.architecture import trace

    seen: list[str] = []
    run = trace._run

    def spy(*args, device: str, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen.append(device)
        return run(*args, device=device, **kwargs)

    monkeypatch.setattr(trace, "_run", spy)
    return seen


def test_a_view_that_keeps_the_batch_is_traced_on_an_empty_batch(devices: list[str]) -> None:
    reference = trace_architecture(Small(), (3, 16, 16), name="n")
    assert devices == ["cpu"]  # an empty batch on the CPU is enough
    devices.clear()
    assert trace_architecture(ViewsByBatch(), (3, 16, 16), name="n") == reference
    assert devices == ["cpu"]
    with pytest.raises(NetworkError, match=r"does not run on inputs of size \[3, 18, 18\]"):
        trace_architecture(ViewsByBatch(), (3, 18, 18))  # 9x9 per channel after pooling: not fc's 64


def test_meta_fallback_describes_the_same_network(devices: list[str]) -> None:
    reference = trace_architecture(Small(), (3, 16, 16), name="n")
    devices.clear()
    fallback = trace_architecture(NormalisedByMax(), (3, 16, 16), name="n")
    assert devices == ["cpu", "meta"]  # the empty batch failed: traced again on the meta device
    # the same layers, and the two ops of the scaling before them
    assert [layer.kind for layer in fallback.layers[:2]] == ["amax", "div"]
    assert fallback.layers[2:] == tuple(
        layer.replaced(sources=tuple(s + 2 if s >= 0 else 1 for s in layer.sources)) for layer in reference.layers
    )


@pytest.mark.parametrize("model_file", ["resnet_like", "mobilenet_like"])
def test_hand_written_model_files_are_traced_on_an_empty_batch(model_file: str, devices: list[str]) -> None:
    """The examples flatten with `x.view(x.size(0), -1)`: traced as fast as a torchvision
    network, and as the meta device (which runs real sizes) describes them."""
    from perf4sight.architecture import trace
    from perf4sight.networks import load_network

    network = load_network(EXAMPLES / f"{model_file}.py")
    assert devices == ["cpu"]  # its class count, found by a forward pass
    devices.clear()
    arch = trace_architecture(network.module, network.input_size, name=model_file)
    assert devices == ["cpu"]
    named = list(network.module.named_modules())
    on_meta, _ = trace._run(network.module, named, network.input_size, device="meta", batch=2)
    assert [(p.name, p.kind, p.inputs, p.output) for p in on_meta.layers if p.kind != "identity"] == [
        (layer.name, layer.kind, layer.inputs, layer.output) for layer in arch.layers
    ]
    assert arch.layers[-1].kind == "linear" and arch.layers[-1].in_shape == (network.module.linear.in_features,)


def test_an_empty_sequential_shortcut_is_an_identity() -> None:
    """resnet_like's identity shortcuts are empty `nn.Sequential`s: no layer of their own
    (no kind without a cost), and the residual addition reads the block's input."""
    from perf4sight.networks import load_network

    network = load_network(EXAMPLES / "resnet_like.py")
    arch = trace_architecture(network.module, network.input_size, name="resnet_like")
    assert "sequential" not in {layer.kind for layer in arch.layers}
    names = [layer.name for layer in arch.layers]
    first_add = arch.layers[names.index("layer1.0.add0")]
    assert first_add.sources == (names.index("layer1.0.bn2"), names.index("maxpool"))


def test_dropout_and_batch_norm_keep_what_they_save_in_training() -> None:
    model = nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.Dropout(0.5), nn.Linear(64, 10))
    arch = trace_architecture(model, (32,))
    linear, norm, dropout, classifier = arch.layers
    assert norm.saved_fixed_bytes == 2 * 64 * 4  # per-channel mean and inverse std
    assert dropout.saved_bytes == 64 * 4  # the mask
    assert classifier.saved_bytes == 64 * 4  # its input, a new tensor after dropout
    assert model.training  # the caller's mode is restored
    model.eval()
    trace_architecture(model, (32,))
    assert not model.training


def test_a_replaced_layer_copies_every_other_field_and_refuses_unknown_ones() -> None:
    arch = trace_architecture(Small(), (3, 16, 16))
    conv = arch.layers[0]
    wider = conv.replaced(output=(16, 16, 16), params=432)
    assert (wider.output, wider.params) == ((16, 16, 16), 432)
    assert wider == dataclasses.replace(conv, output=(16, 16, 16), params=432)
    assert conv.output == (8, 16, 16)  # the original is unchanged
    with pytest.raises(TypeError, match="no field"):
        conv.replaced(channels=3)


class Unusual(nn.Module):
    """Amounts that do not follow the channels: one PReLU weight for all of them, and
    stochastic depth's noise (one value per sample); with `loose`, a parameter of the
    module's own, outside any layer."""

    def __init__(self, width: int = 16, loose: bool = False) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1)
        self.act = nn.PReLU()
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)
        self.drop = torchvision.ops.StochasticDepth(0.2, "row")
        self.fc = nn.Linear(width, 10)
        self.scale = nn.Parameter(torch.ones(width, 1, 1)) if loose else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.conv1(x))
        if self.scale is not None:
            y = y * self.scale
        y = y + self.drop(self.conv2(y))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


def _gemm_shapes(arch) -> dict[str, LayerShape]:
    return {layer.name: LayerShape(layer.in_shape, layer.output, layer.groups)
            for layer in arch.layers if layer.kind in ("conv2d", "linear")}


def test_propagation_keeps_amounts_that_do_not_follow_the_channels() -> None:
    template = trace_architecture(Unusual(16), (3, 8, 8), name="n")
    pruned = trace_architecture(Unusual(9), (3, 8, 8), name="n")
    assert [layer.params for layer in template.layers if layer.kind == "prelu"] == [1]
    assert with_layer_shapes(template, _gemm_shapes(pruned), name="n") == pruned


def test_parameters_outside_the_layers_are_not_propagated() -> None:
    template = trace_architecture(Unusual(16, loose=True), (3, 8, 8), name="n")
    pruned = trace_architecture(Unusual(9, loose=True), (3, 8, 8), name="n")
    with pytest.raises(NetworkError, match="16 parameters outside its layers"):
        with_layer_shapes(template, _gemm_shapes(pruned))


class Functional(nn.Module):
    """A convolution and a linear layer computed with F.conv2d and F.linear."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(8, 3, 3, 3))
        self.fc = nn.Parameter(torch.zeros(10, 8))
        self.bias = nn.Parameter(torch.zeros(10))
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(nn.functional.conv2d(x, self.weight, padding=1))
        return nn.functional.linear(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1), self.fc, self.bias)


def test_functional_convolutions_are_reported(capsys: pytest.CaptureFixture[str]) -> None:
    trace_architecture(Functional(), (3, 8, 8), name="f")
    err = " ".join(capsys.readouterr().err.split())
    assert "network 'f': 2 convolution or linear layer(s) computed by a functional call" in err
    trace_architecture(Small(), (3, 16, 16), name="s")
    assert "functional call" not in capsys.readouterr().err


class FunctionalDropout(nn.Module):
    """Dropout called as a function inside the container, as older model code does."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.dropout(torch.relu(self.conv(x)), 0.5, self.training)
        return self.fc(torch.flatten(y, 1))


def _saved_per_sample(model: nn.Module, batch: int = 4) -> float:
    """Bytes autograd really keeps for one training forward pass, per sample (parameters aside)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.train()(torch.randn(batch, 3, 8, 8))
    return sum(seen.values()) / batch


def test_a_functional_dropout_keeps_its_mask() -> None:
    model = FunctionalDropout()
    arch = trace_architecture(model, (3, 8, 8))
    assert "dropout" in {layer.kind for layer in arch.layers}  # its mask, a kind with a cost group
    assert sum(layer.saved_bytes for layer in arch.layers) == _saved_per_sample(model)


class Windows(nn.Module):
    """Splits its input into 4x4 windows of a 16x16 image: a reshape written for one size."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        return x.view(x.shape[0], 8, 4, 4, 4, 4).sum(dim=(2, 3, 4, 5))


def test_a_network_that_cannot_take_the_input_size_is_refused() -> None:
    """On an empty batch the reshape for 16x16 images also takes 20x20 ones (no elements to
    check); the trace must not describe a network that would fail with samples."""
    assert trace_architecture(Windows(), (3, 16, 16)).layers[0].output == (8, 16, 16)
    with pytest.raises(NetworkError, match=r"^windows: does not run on inputs of size \[3, 20, 20\]: RuntimeError"):
        trace_architecture(Windows(), (3, 20, 20))
    with pytest.raises(NetworkError, match=r"^vit_b_16: does not run on inputs of size \[3, 64, 64\]"):
        trace_architecture(torchvision.models.vit_b_16(num_classes=10), (3, 64, 64), name="vit_b_16")


def test_a_network_that_cannot_take_the_input_size_is_refused_when_loaded_or_pruned() -> None:
    from perf4sight.networks import load_architecture, load_network, prune_network

    with pytest.raises(NetworkError, match=r"^windows: does not run on inputs of size \[3, 20, 20\]"):
        load_network(Windows(), input_size=(3, 20, 20))  # its class count is found by the same kind of pass
    with pytest.raises(NetworkError, match=r"^squeezenet: does not run on inputs of size \[3, 8, 8\]"):
        load_architecture("squeezenet", input_size=(3, 8, 8))  # the name given, not torchvision's builder
    with pytest.raises(NetworkError, match=r"^windows: does not run on inputs of size \[3, 20, 20\]"):
        prune_network(Windows(), 50, input_size=(3, 20, 20), name="windows")  # not "cannot build its graph"


class NoScores(nn.Module):
    def __init__(self, kind: Any) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, x: torch.Tensor) -> Any:
        return self.kind(x)


@pytest.mark.parametrize(("kind", "message"), [
    (lambda x: None, "returns no tensor"),
    (lambda x: x.sum(), "returns one number per input, not a score per class"),
])
def test_a_network_without_class_scores_is_refused(kind: Any, message: str) -> None:
    from perf4sight.networks import load_network

    with pytest.raises(NetworkError, match=f"^noscores: {message}"):
        load_network(NoScores(kind), input_size=(3, 8, 8))
