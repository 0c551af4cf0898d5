"""The layer-kind registry: one declaration per kind, used by the trace, the features,
propagation and recordings; a user's own kind declared from outside the package; an
undeclared kind that does work refused."""

from __future__ import annotations

import math

import pytest
import torch
import torchvision
from torch import nn

import perf4sight
from perf4sight.architecture import LayerShape, trace_architecture, with_layer_shapes
from perf4sight.architecture import kinds
from perf4sight.architecture.kinds import (CONV2D, GEMM_GROUPS, LINEAR, MEMORY_BOUND_GROUPS, OWN, LayerKind,
                                           gemm_flops, layer_group, layer_kind, layer_kinds)
from perf4sight.errors import NetworkError
from perf4sight.features import network_features

INPUT = (3, 8, 8)


class ChannelMix(nn.Module):
    """A user's own layer that does work: a 1x1 convolution written as an einsum."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(c_out, c_in))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("oc,bchw->bohw", self.weight, x)


def _mixing_network() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), ChannelMix(6, 5), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(5, 10))


CHANNEL_MIX = LayerKind(
    "channel_mix", "conv_1x1", modules=("ChannelMix",), channels=OWN,
    weights=lambda inputs, output, groups, kernel: output[0] * inputs[0],
    flops=lambda layer, tile: 2 * -(-layer.output[0] // tile) * tile * layer.in_shape[0] * math.prod(layer.output[1:]),
)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry as declared, restored after the test (a test's declarations are its own)."""
    for table in ("_KINDS", "_BY_MODULE", "_BY_OP"):
        monkeypatch.setattr(kinds, table, dict(getattr(kinds, table)))


def test_an_undeclared_kind_that_does_work_is_refused_naming_it_and_how_to_declare_it(registry) -> None:
    with pytest.raises(NetworkError, match=r"layer '2' is of kind 'channel_mix', which no declaration holds, and it "
                                           r"holds 30 parameters: .*perf4sight.register_layer_kind"):
        trace_architecture(_mixing_network(), INPUT)


def test_a_users_own_kind_declared_from_outside_is_traced_counted_and_propagated(registry) -> None:
    assert perf4sight.register_layer_kind(CHANNEL_MIX) is CHANNEL_MIX
    arch = trace_architecture(_mixing_network(), INPUT, name="mixing")
    mix = arch.layers[2]
    assert (mix.kind, mix.params, layer_group(mix)) == ("channel_mix", 30, "conv_1x1")
    assert gemm_flops(mix) == 2 * 5 * 6 * 8 * 8
    table = network_features(arch, [2], "training")
    assert table["conv_1x1_count"].iloc[0] == 1 and table["other_count"].iloc[0] == 0
    assert table["conv_1x1_flops"].iloc[0] > 0
    # a pruned variant: the first convolution keeps 4 channels; the mixing layer's weights follow its declaration
    narrow = with_layer_shapes(arch, {"0": LayerShape((3, 8, 8), (4, 8, 8)), "2": LayerShape((4, 8, 8), (5, 8, 8))})
    assert narrow.layers[2].params == 20 and narrow.params == arch.params - (6 - 4) * (3 * 9 + 1) - 10


def test_declarations_the_features_cannot_count_are_refused(registry) -> None:
    with pytest.raises(NetworkError, match="declared already"):
        perf4sight.register_layer_kind(LayerKind("relu", "act"))
    with pytest.raises(NetworkError, match="without flops, its group is one of norm, act, pool, elementwise"):
        perf4sight.register_layer_kind(LayerKind("my_op", "conv_1x1"))
    with pytest.raises(NetworkError, match="it multiplies .flops., so its group is one of conv_kxk"):
        perf4sight.register_layer_kind(LayerKind("my_gemm", "act", flops=lambda layer, tile: 0))
    with pytest.raises(NetworkError, match="channels of its own declares its weights and flops"):
        perf4sight.register_layer_kind(LayerKind("my_conv", "elementwise", channels=OWN))
    with pytest.raises(NetworkError, match="lower-case letters"):
        perf4sight.register_layer_kind(LayerKind("My Op", "act"))
    assert layer_kind("my_op") is None


def test_every_declared_kind_is_in_a_group_the_features_have() -> None:
    declared = layer_kinds()
    assert {CONV2D, LINEAR, "batch_norm", "relu", "cat", "matmul"} <= set(declared)
    for kind in declared.values():
        assert kind.gemm == (kind.flops is not None)
        if not callable(kind.group):
            assert kind.group in (GEMM_GROUPS if kind.gemm else MEMORY_BOUND_GROUPS)


def test_attention_networks_trace_with_their_products_counted() -> None:
    arch = trace_architecture(torchvision.models.vit_b_16(image_size=32, num_classes=10), (3, 32, 32))
    products = [layer for layer in arch.layers if layer.kind in ("matmul", "attention")]
    assert products and all(layer_group(layer) == "linear" and gemm_flops(layer) > 0 for layer in products)
    assert network_features(arch, [1], "training")["other_count"].iloc[0] == 0
