"""Tensor lifetimes as data of the IR: recorded against a trace, scaled by propagation."""

from __future__ import annotations

import dataclasses
import functools

from torch import nn

from perf4sight.architecture import (
    Detail,
    LayerShape,
    record_timeline,
    trace_architecture,
    with_layer_shapes,
    with_lifetimes,
)

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
