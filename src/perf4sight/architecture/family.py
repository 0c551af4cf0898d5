"""A network's family: what every pruning level of it shares (the key calibration groups by)."""

from __future__ import annotations

import hashlib
from typing import Any

from perf4sight.architecture.derived import derived_values
from perf4sight.architecture.kinds import CONV2D, LINEAR
from perf4sight.architecture.ir import Architecture
from perf4sight.device.recipe import DEFAULT_RECIPE

__all__ = ["family_key"]


def family_key(arch: Architecture) -> str:
    """What every pruning level of a network has in common: the input size, the class count
    and, in order, each Conv2d and Linear layer's kind, kernel, stride, padding, dilation
    and grouping (depthwise, grouped or dense), but not its width. The same for a spec's
    layer table and for a traced module. Found once per architecture object and kept with it
    (every model and refit that sees it asks).

    And the recipe, where it is not the default (so that the default's keys are those of
    descriptions without a recipe): a family's corrections were measured under one recipe,
    and what they correct (the allocator's fragmentation, the kernels' efficiency at these
    shapes) differs under another, which freezes, casts or recomputes other tensors. Not where
    the step clears the gradients: that moves an exact amount, and the same kernels run."""
    kept = derived_values(arch)
    if "family" not in kept:
        kept["family"] = _key(arch)
    return kept["family"]


def _key(arch: Architecture) -> str:
    parts: list[Any] = [tuple(arch.input_size), arch.num_classes]
    for layer in arch.of_kind(CONV2D, LINEAR):
        grouping = "depthwise" if layer.depthwise else "grouped" if layer.groups > 1 else "dense"
        parts.append((layer.kind, tuple(layer.kernel), tuple(layer.stride), tuple(layer.padding),
                      tuple(layer.dilation), grouping))
    recipe = arch.recipe._replace(zero_grad=DEFAULT_RECIPE.zero_grad)
    if not recipe.is_default:
        parts.append(tuple(recipe))
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]
