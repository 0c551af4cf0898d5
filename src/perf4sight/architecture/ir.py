"""The architecture description: a network as an ordered list of layers with shapes.

Features and predictors consume only this description, never an `nn.Module`, so a
network can come from a traced module, a spec file or a layer table alike. Shapes are
per sample (the batch dimension is dropped): features scale them by the batch size.
It is plain data: what it holds (`Detail`) is said by its fields, not by where it came from.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perf4sight.device.recipe import DEFAULT_RECIPE, Recipe

__all__ = ["CONV2D", "LINEAR", "Architecture", "Detail", "Layer", "Scaling", "Timeline"]

Shape = tuple[int, ...]
# The kinds of the layers a spec's table records (declared with the others in `kinds.py`).
CONV2D, LINEAR = "conv2d", "linear"


@dataclass(frozen=True)
class Layer:
    """One layer (a leaf module) or one functional op (an addition, a concatenation...).

    `kind` is a normalised name (`conv2d`, `linear`, `batch_norm`, `relu`, `add`, `cat`,
    `max_pool2d`, ...). `sources` gives, per input, the index of the layer that produced it
    (-1: the network's input), so that shapes can be propagated again for other channel
    counts. `saved_bytes` counts what autograd keeps for the backward pass, per sample, of
    which `saved_input_bytes` are tensors shaped like an input and `saved_output_bytes`
    shaped like the output; `saved_fixed_bytes` is kept regardless of the batch size
    (statistics; parameters are counted by `params`, their copies in autocast's dtype by
    `saved_param_bytes`); `saved_shared_bytes` are what it saves that an earlier layer saved
    too (counted there: the input of a layer whose producer saved its output);
    `saved_copy_bytes`, part of `saved_input_bytes`, is the copy of its input that autograd
    saves for an in-place op whose backward needs the input as it was, where that depends on
    the PyTorch version (`perf4sight.architecture.autograd`). What it saves
    is what it saves whenever its forward pass runs with gradients; a layer of a
    checkpointed segment keeps none of it from the forward pass.

    What the architecture's recipe (`Architecture.recipe`) changes, per layer: whether its
    parameters are `trained` (a frozen layer has no gradients, no optimizer state and no
    weight-gradient GEMM); whether the backward pass computes the gradient of one of its
    inputs (`grad_input`: not for the network's input, nor in a frozen prefix) and whether
    it runs at all for this layer (`backward`: its output needs a gradient; not in a frozen
    prefix); the checkpoint segment that recomputes its forward pass in the backward
    (`segment`, numbered from 1; 0: none); and the bytes per element of its output
    (`element_bytes`: 2 for what autocast casts to a 16-bit type).
    """

    name: str
    kind: str
    inputs: tuple[Shape, ...]
    output: Shape
    params: int = 0
    kernel: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    groups: int = 1
    bias: bool = False
    inplace: bool = False
    saved_bytes: int = 0
    saved_input_bytes: int = 0
    saved_output_bytes: int = 0
    saved_fixed_bytes: int = 0
    sources: tuple[int, ...] = ()
    trained: bool = True
    grad_input: bool = True
    backward: bool = True
    segment: int = 0
    element_bytes: int = 4
    saved_param_bytes: int = 0
    saved_shared_bytes: int = 0
    saved_copy_bytes: int = 0

    @property
    def recomputed(self) -> bool:
        """Whether its forward pass runs again in the backward (in a checkpointed segment)."""
        return self.segment > 0

    @property
    def in_shape(self) -> Shape:
        """Shape of the first input, the one most layers have."""
        return self.inputs[0] if self.inputs else ()

    @property
    def depthwise(self) -> bool:
        """A convolution with one group per input channel: its groups follow the channels."""
        return self.kind == CONV2D and self.groups > 1 and self.groups == self.in_shape[0]

    def replaced(self, **changes: Any) -> Layer:
        """A copy with `changes` (fields by name), as `dataclasses.replace` but without
        re-running `__init__`: propagating a pruned variant copies every layer, and
        `replace` would cost most of that."""
        unknown = changes.keys() - self.__dict__.keys()
        if unknown:
            raise TypeError(f"Layer has no field(s) {', '.join(sorted(unknown))}")
        copy = object.__new__(Layer)
        copy.__dict__.update(self.__dict__, **changes)
        return copy


@dataclass(frozen=True)
class Scaling:
    """How each event's size follows the channels of a traced architecture: the layer it
    belongs to (-1: none, the inputs and the loss) and the quantity of that layer its fixed
    and its per-sample bytes are a multiple of (columns of the quantity table in
    `perf4sight.architecture.lifetimes`)."""

    layer: np.ndarray
    fixed_quantity: np.ndarray
    per_sample_quantity: np.ndarray


@dataclass(frozen=True)
class Timeline:
    """Allocations and frees in program order.

    Event i allocates (`allocates[i]`) or frees storage `tensor[i]`; an allocation's size
    in bytes is `fixed_bytes[i] + per_sample_bytes[i] * batch_size`. `scaling` (when
    recorded against the network's traced architecture) says how the sizes follow its
    channels, for its pruned variants (`perf4sight.architecture.lifetimes.resized`).
    `copies` marks the allocations of the copies counted by `Layer.saved_copy_bytes` (None:
    none recorded).
    """

    tensor: np.ndarray
    allocates: np.ndarray
    fixed_bytes: np.ndarray
    per_sample_bytes: np.ndarray
    scaling: Scaling | None = field(default=None, compare=False)
    copies: np.ndarray | None = field(default=None, compare=False)
    # An allocator's peaks (live, held) replayed at a batch size, by (allocator, batch size),
    # kept for the next query of this timeline (`perf4sight.features.allocator_grid`).
    peaks: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)

    def sizes(self, batch_size: int) -> np.ndarray:
        """Each event's size in bytes at `batch_size` (0 for a free)."""
        return self.fixed_bytes + self.per_sample_bytes * batch_size

    def same_events(self, other: Timeline) -> bool:
        """Whether `other` holds the same events with the same sizes (and the same copies)."""
        return all(np.array_equal(getattr(self, f), getattr(other, f))
                   for f in ("tensor", "allocates", "fixed_bytes", "per_sample_bytes")) \
            and np.array_equal(self._copies(), other._copies())

    def _copies(self) -> np.ndarray:
        return np.zeros(len(self.tensor), dtype=bool) if self.copies is None else self.copies


class Detail(enum.IntEnum):
    """How much of a network an Architecture describes, each level all of the one before:
    what a feature set declares it needs (`perf4sight.features.FeatureFunction.needs`)."""

    LAYER_TABLE = 0  # the Conv2d and Linear layers (an architecture spec's `layers`)
    LAYERS = 1  # every layer and functional op, traced
    LIFETIMES = 2  # every layer, and the tensor lifetimes of an iteration (per stage)


@dataclass(frozen=True)
class Architecture:
    """A network: its layers in forward order plus what does not belong to one layer.

    `complete` is False when the layers list only Conv2d and Linear layers (as in an
    architecture spec's `layers`). `lifetimes` holds, per stage, the tensor lifetimes of an
    iteration (for the allocator replay) when they were recorded with the trace or scaled
    from the traced base this network was propagated from (`with_layer_shapes`).

    `recipe` is how the network is trained (`perf4sight.device.recipe.Recipe`): a traced
    description describes the network under it (which layers are trained, what autograd
    saves under its autocast, which layers its checkpoint segments recompute), and the
    features read the optimizer and the precision from it. `trainable_params` counts the
    parameters it trains; `dtype_bytes` is the parameters' (fp32 master weights under autocast).
    """

    name: str
    input_size: Shape
    num_classes: int
    layers: tuple[Layer, ...]
    params: int
    trainable_params: int
    buffer_bytes: int = 0
    dtype_bytes: int = 4
    complete: bool = True
    recipe: Recipe = DEFAULT_RECIPE
    lifetimes: Mapping[str, Timeline] = field(default_factory=dict, compare=False, repr=False)

    def holds(self, detail: Detail, stage: str = "training") -> bool:
        """Whether this description holds `detail` (for `stage`, the lifetimes)."""
        if detail is Detail.LIFETIMES:
            return self.complete and stage in self.lifetimes
        return self.complete or detail is Detail.LAYER_TABLE

    def of_kind(self, *kinds: str) -> list[Layer]:
        """The layers whose kind is one of `kinds`, in forward order."""
        return [layer for layer in self.layers if layer.kind in kinds]

    @property
    def convs(self) -> list[Layer]:
        return self.of_kind(CONV2D)
