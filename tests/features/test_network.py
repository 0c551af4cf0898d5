"""Whole-network features on real traced modules: amounts checked by hand, scaling with batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from perf4sight.architecture import trace_architecture
from perf4sight.device.recipe import Recipe
from perf4sight.errors import ConfigError, NetworkError
from perf4sight.features import FEATURE_SETS, feature_table
from perf4sight.features.network import (FRESH_PAGES, FRESH_PAGES_MS, PROCESS_MEMORY_COLUMNS, layer_group,
                                         network_features)
from perf4sight.networks import architecture_from_spec, build_from_spec, read_spec

INPUT = (3, 16, 16)


def _tiny() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(inplace=True),
        nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False),
        nn.Conv2d(8, 16, 1, bias=False),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


@pytest.fixture(scope="module")
def tiny_arch():
    return trace_architecture(_tiny(), INPUT)


def test_registered_as_network_feature_set():
    assert FEATURE_SETS["network"] is network_features


def test_parameter_state_counted_by_hand(tiny_arch):
    params = 3 * 8 * 9 + 2 * 8 + 8 * 9 + 8 * 16 + 16 * 10 + 10
    table = network_features(tiny_arch, [1, 4], "training")
    assert (table["param_bytes"] == 4 * params).all()
    # weights, their gradients and SGD momentum buffers
    assert (table["param_state_bytes"] == 3 * 4 * params).all()
    # the optimizer's temporary: the largest layer's parameters, the first conv (216)
    assert (table["optimizer_temp_bytes"] == 4 * 3 * 8 * 9).all()
    # the GEMM kernels' 3 passes and SGD's 11; the three convolutions' weights reordered by
    # each of their 3 kernels, not BatchNorm's or the Linear layer's
    conv_weights = 3 * 8 * 9 + 8 * 9 + 8 * 16
    assert (table["param_traffic_bytes"] == 4 * params * (3 + 11)).all()
    assert (table["conv_weight_traffic_bytes"] == 4 * conv_weights * 3).all()
    inference = network_features(tiny_arch, [1], "inference")
    assert inference["param_state_bytes"].iloc[0] == 4 * params
    # the forward pass reads each weight once, and each convolution reorders its weights once
    assert inference["param_traffic_bytes"].iloc[0] == 4 * params
    assert inference["conv_weight_traffic_bytes"].iloc[0] == 4 * conv_weights
    assert inference["saved_bytes"].iloc[0] == 0 and inference["optimizer_temp_bytes"].iloc[0] == 0


def test_gemm_flops_by_hand(tiny_arch):
    table = network_features(tiny_arch, [1, 3], "training").set_index("batch_size")
    spatial = 16 * 16
    first = 2 * 8 * 3 * 9 * spatial  # the first conv computes no gradient for the network input
    assert table.loc[1, "conv_kxk_flops"] == 2 * first
    assert table.loc[1, "conv_1x1_flops"] == 3 * 2 * 16 * 8 * spatial
    assert table.loc[1, "linear_flops"] == 3 * 2 * 16 * 10
    assert table.loc[3, "conv_1x1_flops"] == 3 * table.loc[1, "conv_1x1_flops"]
    assert table.loc[1, "conv_depthwise_count"] == 1
    # the depthwise conv's 8 planes in its three passes, per sample; the dense convs have none
    assert table.loc[1, "group_planes"] == 8 * 3 and table.loc[3, "group_planes"] == 3 * 8 * 3
    assert network_features(tiny_arch, [1], "inference")["group_planes"].iloc[0] == 8
    # a tile of 64 output channels rounds the 16-wide pointwise conv's work up; its 8 input
    # channels (the GEMM's reduction) are not padded
    assert table.loc[1, "conv_1x1_padded_flops"] == 3 * 2 * 64 * 8 * spatial
    assert table.loc[1, "linear_padded_flops"] == 3 * 2 * 64 * 16


def test_a_trained_weight_above_32_mib_has_its_gradient_and_step_temporaries_in_fresh_pages_at_the_measured_rate():
    """alexnet's first Linear layer (9216 x 4096: 144 MiB of weight) gets its gradient and the
    optimizer's temporaries of its size (SGD's decayed gradient; Adam's two) in fresh pages at
    every iteration, not its bias nor the 16 MiB second layer, and not in inference or where it
    is not trained; `feature_table` prices them at the device's measured rate."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(9216, 4096), nn.ReLU(), nn.Linear(4096, 1024), nn.Linear(1024, 10))
    arch = trace_architecture(model, (9216, 1, 1))
    weight = 9216 * 4096 * 4
    assert (network_features(arch, [1, 8], "training")[FRESH_PAGES] == 2 * weight).all()
    adam = trace_architecture(model, (9216, 1, 1), recipe=Recipe(optimizer="adam"))
    assert network_features(adam, [1], "training")[FRESH_PAGES].iloc[0] == 3 * weight
    assert network_features(arch, [1], "inference")[FRESH_PAGES].iloc[0] == 0
    frozen = trace_architecture(model, (9216, 1, 1), recipe=Recipe(trainable="3"))  # from layer '3' on: not the big one
    assert network_features(frozen, [1], "training")[FRESH_PAGES].iloc[0] == 0
    assert (feature_table(arch, [1, 8], "network", "training")[FRESH_PAGES_MS] == 0).all()  # nothing measured
    priced = feature_table(arch, [1, 8], "network", "training", fresh_pages_ms_per_mib=0.25)
    assert priced[FRESH_PAGES_MS].tolist() == [0.25 * 2 * 144] * 2


def test_the_process_s_own_memory_is_counted_where_the_device_measured_fresh_pages():
    """The trained weights' gradients the C library's heap serves (32 MiB or less), the largest
    layer's tensors and the kinds of layer, counted on a CPU (fresh pages measured) and 0 on a device that measured none."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(9216, 4096), nn.ReLU(), nn.Linear(4096, 1024), nn.ReLU6(),
                          nn.Linear(1024, 10))
    arch = trace_architecture(model, (9216, 1, 1))
    cpu = feature_table(arch, [1, 8], "network", "training", fresh_pages_ms_per_mib=0.25)
    small = (4096 * 1024 + 1024 * 10) * 4  # the 144 MiB weight's gradient is a fresh mapping instead
    assert cpu["heap_gradient_bytes"].tolist() == [small] * 2
    assert cpu["layer_kinds"].tolist() == [4.0] * 2  # flatten, linear, relu, relu6
    # the largest layer's input and output (flatten's 9216 in and 9216 out), per sample
    assert cpu["largest_layer_bytes"].tolist() == [2 * 9216 * 4 * bs for bs in (1, 8)]
    # an in-place layer's input is its output: the convolution's 9216 + 36864 elements are the
    # largest, not the ReLU's 36864 twice
    widened = trace_architecture(nn.Sequential(nn.Conv2d(64, 256, 1), nn.ReLU(inplace=True)), (64, 12, 12))
    largest = feature_table(widened, [2], "network", "training", fresh_pages_ms_per_mib=0.25)["largest_layer_bytes"]
    assert largest.tolist() == [(9216 + 36864) * 4 * 2]
    elsewhere = feature_table(arch, [1, 8], "network", "training")
    process = [column for column in PROCESS_MEMORY_COLUMNS if column in cpu.columns]  # the heap replay's holes not
    assert (elsewhere[process] == 0).all().all()
    assert elsewhere.drop(columns=[*process, FRESH_PAGES_MS]).equals(cpu.drop(columns=[*process, FRESH_PAGES_MS]))


@pytest.mark.parametrize(("kernel", "size", "stride"), [(3, 16, 1), (7, 4, 1), (5, 7, 2), (7, 2, 1)])
def test_a_depthwise_convolution_computes_the_taps_inside_its_input(kernel, size, stride):
    """A depthwise kernel skips the taps on the zero padding, which a GEMM convolution computes:
    a 3x3 on a 16x16 map computes 77 % of its k*k*outputs, a 7x7 on a 4x4 map 37 %."""
    layer = nn.Conv2d(8, 8, kernel, stride=stride, padding=kernel // 2, groups=8, bias=False)
    arch = trace_architecture(layer, (8, size, size))
    taps = nn.functional.conv2d(torch.ones(1, 1, size, size), torch.ones(1, 1, kernel, kernel), stride=stride,
                                padding=kernel // 2).sum().item()
    table = network_features(arch, [1], "inference")
    assert table["conv_depthwise_flops"].iloc[0] == 2 * 8 * taps
    out = -(-size // stride)
    assert taps < kernel * kernel * out * out or kernel == 1


def test_saved_bytes_grow_linearly_and_everything_is_monotone(tiny_arch):
    sizes = [1, 2, 4, 8, 64]
    table = network_features(tiny_arch, sizes, "training")
    per_sample = sum(layer.saved_bytes for layer in tiny_arch.layers)
    fixed = sum(layer.saved_fixed_bytes for layer in tiny_arch.layers)
    assert per_sample > 0
    np.testing.assert_array_equal(table["saved_bytes"], np.array(sizes) * per_sample + fixed)
    assert (table["saved_segment_bytes"] >= table["saved_bytes"]).all()
    assert (table["activation_peak_bytes"] >= table["saved_bytes"]).all()
    assert (table.diff().iloc[1:] >= 0).all().all()


def test_layer_groups(tiny_arch):
    groups = [layer_group(layer) for layer in tiny_arch.layers]
    assert groups[:5] == ["conv_kxk", "norm", "act", "conv_depthwise", "conv_1x1"]
    assert "linear" in groups and "pool" in groups


class _Functional(nn.Module):
    """Normalisations, an activation and an upsampling called as functions, as hand-written models do."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        x = nn.functional.group_norm(self.conv(x), 2)
        x = nn.functional.layer_norm(x.permute(0, 2, 3, 1), (8,)).permute(0, 3, 1, 2)
        x = nn.functional.interpolate(x.clamp(min=0.0), scale_factor=2.0, mode="nearest")
        return nn.functional.interpolate(x, scale_factor=0.5, mode="bilinear").mean((2, 3))


def test_functional_layers_have_the_groups_of_their_modules(capsys):
    arch = trace_architecture(_Functional(), INPUT)
    assert [(layer.kind, layer_group(layer)) for layer in arch.layers] == [
        ("conv2d", "conv_kxk"), ("group_norm", "norm"), ("layer_norm", "norm"), ("clamp", "act"),
        ("upsample_nearest2d", "elementwise"), ("upsample_bilinear2d", "elementwise"), ("mean", "elementwise"),
    ]
    assert network_features(arch, [2], "training")["other_count"].iloc[0] == 0
    assert "warning" not in capsys.readouterr().err


def test_unknown_kind_is_counted_with_a_warning(capsys):
    arch = trace_architecture(nn.Sequential(nn.Conv2d(3, 4, 1), nn.Softmin(dim=1)), INPUT)
    table = network_features(arch, [2], "training")
    assert table["other_count"].iloc[0] == 1 and table["other_bytes"].iloc[0] > 0
    assert "softmin" in capsys.readouterr().err
    network_features(arch, [4], "training")  # the same network again (another recipe, batch size)
    assert capsys.readouterr().err == ""  # a warning is shown once


def test_bad_input_is_refused(tiny_arch):
    with pytest.raises(ConfigError, match="stage: 'validation' is not one of"):
        network_features(tiny_arch, [1], "validation")
    for sizes in ([0, 2], [1.5], []):
        with pytest.raises(NetworkError, match="batch sizes"):
            network_features(tiny_arch, sizes, "training")


def test_a_spec_layer_table_is_not_enough(h200_dir):
    spec = read_spec(h200_dir / "models" / "squeezenet_90.json")
    with pytest.raises(NetworkError, match="every layer"):
        network_features(architecture_from_spec(spec), [1], "training")


def test_a_spec_rebuilt_and_traced(h200_dir):
    spec = read_spec(h200_dir / "models" / "resnet18_90.json")
    arch = trace_architecture(build_from_spec(spec, device="meta"), spec["input_size"], name=spec["name"])
    table = network_features(arch, [2, 32], "training")
    assert (table["param_bytes"] == 4 * spec["params"]).all()
    assert table["norm_count"].iloc[0] == 20 and table["elementwise_count"].iloc[0] == 8  # BN, residual adds
    # the saved activations grow with the batch size; at 32 they are far more than the parameters
    per_sample = (table["saved_bytes"].iloc[1] - table["saved_bytes"].iloc[0]) / 30
    assert per_sample > 0 and 32 * per_sample > 4 * table["param_bytes"].iloc[0]


@pytest.mark.parametrize("builder", ["mobilenet_v2", "efficientnet_b0"])
def test_unprofiled_torchvision_networks_have_every_layer_grouped(builder, capsys):
    import torchvision

    arch = trace_architecture(getattr(torchvision.models, builder)(num_classes=10), (3, 32, 32))
    table = network_features(arch, [1, 2], "training")
    assert table["other_count"].iloc[0] == 0 and "warning" not in capsys.readouterr().err
    assert table["conv_depthwise_count"].iloc[0] >= 16
    assert table["conv_depthwise_flops"].iloc[1] == 2 * table["conv_depthwise_flops"].iloc[0] > 0
