"""Tensor lifetimes as data of the IR: recorded against a trace, scaled by propagation."""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from perf4sight.architecture import (
    Detail,
    LayerShape,
    record_timeline,
    trace_architecture,
    with_layer_shapes,
    with_lifetimes,
)
from perf4sight.architecture import lifetimes
from perf4sight.errors import NetworkError

INPUT = (3, 8, 8)
STAGES = ("training", "inference")


def _chain(width: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(1),
        nn.Linear(2 * width, 10),
    )


def _traced(width: int, stages=()):
    return with_lifetimes(trace_architecture(_chain(width), INPUT, name="chain"), functools.partial(_chain, width),
                          stages)


def _gemm_shapes(arch) -> dict[str, LayerShape]:
    return {layer.name: LayerShape(layer.in_shape, layer.output, layer.groups)
            for layer in arch.layers if layer.kind in ("conv2d", "linear")}


def test_recorded_lifetimes_are_held_per_stage_and_say_what_the_architecture_holds():
    traced = _traced(16)
    assert not traced.lifetimes and traced.holds(Detail.LAYERS) and not traced.holds(Detail.LIFETIMES)
    recorded = _traced(16, ["training"])
    assert list(recorded.lifetimes) == ["training"] and recorded == traced  # same layers, more data
    assert recorded.holds(Detail.LIFETIMES, "training") and not recorded.holds(Detail.LIFETIMES, "inference")
    both = with_lifetimes(recorded, functools.partial(_chain, 16), STAGES)
    assert both.lifetimes["training"] is recorded.lifetimes["training"]  # kept, not recorded again
    assert set(both.lifetimes) == set(STAGES)


def test_a_propagated_variant_scales_its_templates_lifetimes_to_a_fresh_recording():
    template = _traced(16, STAGES)
    variant = with_layer_shapes(template, _gemm_shapes(trace_architecture(_chain(9), INPUT)), name="chain")
    assert set(variant.lifetimes) == set(STAGES)
    for stage in STAGES:
        fresh = record_timeline(functools.partial(_chain, 9), INPUT, 10, stage)
        assert variant.lifetimes[stage].same_events(fresh), stage
        assert not variant.lifetimes[stage].same_events(template.lifetimes[stage])
    # a template without lifetimes propagates none
    assert not with_layer_shapes(_traced(16), _gemm_shapes(variant)).lifetimes


def test_a_stage_whose_lifetimes_cannot_be_scaled_is_left_to_be_recorded():
    template = _traced(16, STAGES)
    unscalable = dataclasses.replace(template.lifetimes["training"], scaling=None)
    template = dataclasses.replace(template, lifetimes={**template.lifetimes, "training": unscalable})
    variant = with_layer_shapes(template, _gemm_shapes(trace_architecture(_chain(9), INPUT)), name="chain")
    assert list(variant.lifetimes) == ["inference"]
    recorded = with_lifetimes(variant, functools.partial(_chain, 9), ["training"])
    fresh = record_timeline(functools.partial(_chain, 9), INPUT, 10, "training")
    assert recorded.lifetimes["training"].same_events(fresh)
    assert recorded.lifetimes["training"].scaling is not None  # recorded against the variant's own layers


class _Branches(nn.Module):
    """Layers of the same shapes, and ops outside them (a concatenation, a residual sum)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6(inplace=True))
        self.left = nn.Sequential(nn.Conv2d(8, 4, 1), nn.BatchNorm2d(4), nn.ReLU())
        self.right = nn.Sequential(nn.Conv2d(8, 4, 1), nn.BatchNorm2d(4), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(1), nn.Linear(8, 10))

    def forward(self, x):
        x = self.stem(x)
        return self.head(torch.cat([self.left(x), self.right(x)], 1) + x)


class _EveryKernel(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_outputs_made_again_instead_of_running_the_meta_kernels_change_no_event(monkeypatch):
    arch = trace_architecture(_Branches(), INPUT, name="branches")
    made, kinds = [], []
    original, kind = lifetimes._made, lifetimes._KnownOutputs._kind
    monkeypatch.setattr(lifetimes, "_made", lambda spec: made.append(spec) or original(spec))
    monkeypatch.setattr(lifetimes._KnownOutputs, "_kind", lambda self, func: kinds.append(kind(self, func)) or kinds[-1])
    known = lifetimes._record(_Branches().to("meta"), INPUT, 10, "training", 5, arch)
    assert made  # the second iteration's ops, the second branch's
    assert "in_place" in kinds  # the in-place ReLU6, the optimizer's updates
    monkeypatch.setattr(lifetimes, "_KnownOutputs", _EveryKernel)
    every = lifetimes._record(_Branches().to("meta"), INPUT, 10, "training", 5, arch)
    assert known == every  # the same allocations and frees, attributed to the same layers
    assert max(known.layers) == len(arch.layers) - 1


class _Pairwise(nn.Module):
    """A tensor of samples by samples: its size is not affine in the batch size."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(12, 10)

    def forward(self, x):
        flat = x.flatten(1)
        return self.linear(torch.mm(torch.mm(flat, flat.t()), flat)[:, :12])


@pytest.mark.parametrize("stage", STAGES)
def test_sizes_not_affine_in_the_batch_size_are_refused(stage):
    with pytest.raises(NetworkError, match="not affine in the batch size"):
        record_timeline(_Pairwise, (3, 2, 2), 10, stage)
