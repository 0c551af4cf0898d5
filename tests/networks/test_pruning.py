"""Channel pruning: levels reached, seeds, the channels kept, and what is never pruned."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd
import pytest
import torchvision
import torch
import torch_pruning as tp
from torch import nn

from perf4sight.architecture import trace_architecture
from perf4sight.errors import NetworkError
from perf4sight.features import network_features
from perf4sight.networks import ChannelPruner, prune_network
from perf4sight.networks.param_count import ParamCounter, UnpredictableError
from perf4sight.networks.registry import build_torchvision

SIZE = (3, 32, 32)


@pytest.mark.parametrize("network", ["resnet18", "mobilenet_v2", "squeezenet"])
def test_levels_reached_within_one_point(network):
    base = build_torchvision(network, num_classes=10, device="meta")
    pruner = ChannelPruner(base, input_size=SIZE, mode="random", seed=0)
    params = pruner.base_params
    for level in (10, 35, 60, 90):
        pruned = pruner.prune(level, meta=True)
        counted = sum(p.numel() for p in pruned.module.parameters())
        assert pruned.params == counted
        assert pruned.level == pytest.approx(100 * (1 - counted / params), abs=0.01)
        assert abs(pruned.level - level) <= 1, (network, level, pruned.level)
    assert sum(p.numel() for p in base.parameters()) == params  # the base is left as it was


def test_level_zero_is_the_unpruned_network(layer_shapes):
    base = build_torchvision("resnet18", num_classes=10, device="meta")
    pruned = ChannelPruner(base, input_size=SIZE).prune(0, meta=True)
    assert pruned.level == 0 and layer_shapes(pruned.module) == layer_shapes(base)


def test_same_seed_same_architecture_other_seed_another(layer_shapes):
    base = build_torchvision("resnet18", num_classes=10, device="meta")
    first = prune_network(base, 50, input_size=SIZE, seed=1).module
    again = prune_network(base, 50, input_size=SIZE, seed=1).module
    other = prune_network(base, 50, input_size=SIZE, seed=2).module
    assert layer_shapes(first) == layer_shapes(again)
    assert layer_shapes(first) != layer_shapes(other)


@pytest.mark.parametrize("network", ["resnet18", "mobilenet_v2", "squeezenet"])
def test_every_layer_keeps_two_channels_and_classifier_and_input_are_whole(network):
    base = build_torchvision(network, num_classes=10, device="meta")
    pruned = prune_network(base, 95, input_size=SIZE, seed=0).module
    layers = [m for m in pruned.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    first, last = layers[0], layers[-1]
    assert first.in_channels == 3
    assert (last.out_channels if isinstance(last, nn.Conv2d) else last.out_features) == 10
    for layer in layers:
        outputs = layer.out_channels if isinstance(layer, nn.Conv2d) else layer.out_features
        inputs = layer.in_channels if isinstance(layer, nn.Conv2d) else layer.in_features
        assert outputs >= 2 and inputs >= 2


def test_pruned_module_with_weights_runs():
    torch.manual_seed(0)
    base = build_torchvision("mobilenet_v2", num_classes=10)
    pruned = prune_network(base, 40, input_size=SIZE, mode="l1-norm").module
    assert all(not p.is_meta for p in pruned.parameters())
    assert pruned.eval()(torch.zeros(2, *SIZE)).shape == (2, 10)


class _TwoConvs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.fc(x.mean((2, 3)))


def test_l1_norm_drops_the_smallest_filters():
    model = _TwoConvs()
    norms = torch.tensor([5.0, 0.1, 7.0, 0.3, 6.0, 0.2, 8.0, 0.4])
    with torch.no_grad():
        for conv in (model.conv1, model.conv2):
            conv.weight.copy_(torch.sign(torch.randn_like(conv.weight)))
            conv.weight.mul_((norms / conv.weight[0].numel()).view(-1, 1, 1, 1))
    pruned = prune_network(model, 40, input_size=(3, 8, 8), mode="l1-norm").module
    kept = pruned.conv1.out_channels
    assert 2 <= kept < 8 and pruned.conv2.out_channels == kept
    expected = norms.argsort(descending=True)[:kept].sort().values  # the largest filters, in order
    assert torch.equal(pruned.conv1.weight, model.conv1.weight[expected])
    assert torch.equal(pruned.conv2.weight, model.conv2.weight[expected][:, expected])
    assert torch.equal(pruned.fc.weight, model.fc.weight[:, expected])


@pytest.mark.parametrize("level", [-1, 95.5, 96, 200])
def test_levels_outside_0_95_are_refused(level):
    with pytest.raises(NetworkError, match=r"outside \[0, 95\]"):
        prune_network(nn.Linear(2, 2), level, input_size=(2,))


def test_unknown_mode_is_refused():
    base = build_torchvision("resnet18", num_classes=10, device="meta")
    with pytest.raises(NetworkError, match="unknown pruning mode 'magnitude'.*random, l1-norm"):
        ChannelPruner(base, input_size=SIZE, mode="magnitude")


def test_a_layer_that_runs_only_in_training_is_refused():
    """torch-pruning traces in eval mode: GoogLeNet's auxiliary classifiers would keep their
    input channels and break the training forward pass."""
    base = torchvision.models.googlenet(num_classes=10, init_weights=False)  # aux_logits=True
    with pytest.raises(NetworkError, match=r"layer 'aux1.conv.conv' \(6 in all\) is not called as a module in eval mode"):
        ChannelPruner(base, input_size=SIZE)


@pytest.mark.parametrize("seed", [-1, 1.5, True, 2**32])
def test_a_seed_outside_0_to_2_32_is_refused(seed):
    base = build_torchvision("resnet18", num_classes=10, device="meta")
    with pytest.raises(NetworkError, match=re.escape(f"pruning seed {seed!r} is not an integer in [0, 4294967295]")):
        ChannelPruner(base, input_size=SIZE, seed=seed)


@pytest.mark.parametrize("network", ["resnet18", "googlenet"])
def test_predicted_parameter_counts_equal_pruned_counts(network):
    model = build_torchvision(network, num_classes=10, device="meta")
    graph = tp.DependencyGraph().build_dependency(model, example_inputs=torch.zeros(1, *SIZE, device="meta"))
    fc = model.fc
    groups = list(graph.get_all_groups(ignored_layers=[fc], root_module_types=(nn.Conv2d,)))
    rng = np.random.default_rng(0)
    orders = [rng.permutation(len(g[0].idxs)) for g in groups]
    counter = ParamCounter(model, groups, orders)
    assert counter([0] * len(groups)) == sum(p.numel() for p in model.parameters())
    counts = [int(rng.integers(0, len(order) - 1)) for order in orders]
    predicted = counter(counts)
    roots = [(g[0].dep.target.module, g[0].dep.handler) for g in groups]
    for (root, handler), order, count in zip(roots, orders, counts):
        if count:
            graph.get_pruning_group(root, handler, sorted(int(i) for i in order[:count])).prune()
    assert predicted == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("network", ["resnet18", "mobilenet_v2", "googlenet"])
def test_predicted_widths_give_the_pruned_networks_architecture(network):
    """A level's widths, predicted from the groups, re-propagate the base's traced architecture
    into the pruned clone's, traced: every layer's shapes, groups and parameters, and its
    features, the same (residual sums, depthwise groups, inception concatenations)."""
    base = build_torchvision(network, num_classes=10, device="meta")
    pruner = ChannelPruner(base, input_size=SIZE, seed=3)
    template = trace_architecture(base, SIZE, name=network, num_classes=10)
    for level in (0, 40, 80):
        widths = pruner.prune_widths(level)
        pruned = pruner.prune(level, meta=True)
        assert (widths.params, widths.level) == (pruned.params, pruned.level)
        variant = widths.architecture(template, f"{network}_{level}")
        traced = trace_architecture(pruned.module, SIZE, name=f"{network}_{level}", num_classes=10)
        assert [(layer.name, layer.inputs, layer.output, layer.groups, layer.params) for layer in variant.layers] == \
            [(layer.name, layer.inputs, layer.output, layer.groups, layer.params) for layer in traced.layers]
        pd.testing.assert_frame_equal(network_features(variant, [1, 8]), network_features(traced, [1, 8]))
        if level:
            assert variant.params < template.params


def test_widths_that_are_not_the_pruned_networks_are_refused():
    """Widths that the base's dataflow cannot take, or whose parameters are not the count
    pruning predicted, give no architecture: the caller traces the pruned module instead."""
    base = build_torchvision("resnet18", num_classes=10, device="meta")
    widths = ChannelPruner(base, input_size=SIZE).prune_widths(50)
    template = trace_architecture(base, SIZE, name="resnet18", num_classes=10)
    assert widths.architecture(template, "resnet18_50") is not None
    broken = {name: dict(values) for name, values in widths.widths.items()}
    broken["layer1.0.conv2"]["in_channels"] -= 1  # its input is conv1's output
    assert dataclasses.replace(widths, widths=broken).architecture(template, "x") is None
    assert dataclasses.replace(widths, params=widths.params + 1).architecture(template, "x") is None


class _Scaled(nn.Module):
    """A free parameter in the forward: its count cannot be predicted, so clones are pruned."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, padding=1)
        self.scale = nn.Parameter(torch.ones(1, 64, 1, 1))
        self.conv2 = nn.Conv2d(64, 64, 3, padding=1)
        self.fc = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x) * self.scale)
        return self.fc(torch.relu(self.conv2(x)).mean((2, 3)))


@pytest.mark.filterwarnings("ignore:Unwrapped parameters detected")
def test_networks_whose_counts_cannot_be_predicted_are_pruned_exactly():
    model = _Scaled()
    graph = tp.DependencyGraph().build_dependency(model, example_inputs=torch.zeros(1, 3, 8, 8))
    groups = list(graph.get_all_groups(ignored_layers=[model.fc], root_module_types=(nn.Conv2d,)))
    with pytest.raises(UnpredictableError):
        ParamCounter(model, groups, [np.arange(len(g[0].idxs)) for g in groups])
    assert ChannelPruner(_Scaled(), input_size=(3, 8, 8)).prune_widths(50) is None
    pruned = prune_network(_Scaled(), 50, input_size=(3, 8, 8))
    assert abs(pruned.level - 50) <= 1
    assert pruned.module.scale.shape[1] == pruned.module.conv1.out_channels
