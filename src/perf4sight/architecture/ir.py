"""The architecture description: a network as an ordered list of layers with shapes.

Features and predictors consume only this description, never an `nn.Module`, so a
network can come from a traced module, a spec file or a layer table alike. Shapes are
per sample (the batch dimension is dropped): features scale them by the batch size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Layer", "Architecture"]

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Layer:
    """One layer (a leaf module) or one functional op (an addition, a concatenation...).

    `kind` is a normalised name (`conv2d`, `linear`, `batch_norm`, `relu`, `add`, `cat`,
    `max_pool2d`, ...). `sources` gives, per input, the index of the layer that produced it
    (-1: the network's input), so that shapes can be propagated again for other channel
    counts. `saved_bytes` counts what autograd keeps for the backward pass, per sample, of
    which `saved_input_bytes` are tensors shaped like an input and `saved_output_bytes`
    shaped like the output; `saved_fixed_bytes` is kept regardless of the batch size
    (statistics; parameters are counted by `params`).
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

    @property
    def in_shape(self) -> Shape:
        """Shape of the first input, the one most layers have."""
        return self.inputs[0] if self.inputs else ()

    @property
    def depthwise(self) -> bool:
        """A convolution with one group per input channel: its groups follow the channels."""
        return self.kind == "conv2d" and self.groups > 1 and self.groups == self.in_shape[0]

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
class Architecture:
    """A network: its layers in forward order plus what does not belong to one layer.

    `complete` is False when the layers list only Conv2d and Linear layers (as in an
    architecture spec's `layers`); whole-network features then need a rebuilt module.
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
    # Builds the network again (a `LoadedNetwork` on the meta device) for what only a run
    # shows, its tensor lifetimes; None for a description of no buildable network (a layer
    # table, or one propagated to other channel counts).
    builder: Callable[[], Any] | None = field(default=None, compare=False, repr=False)
    # The traced network this one was propagated from (`with_layer_shapes`), whose recorded
    # tensor lifetimes give this one's by scaling; None for a traced network.
    template: Architecture | None = field(default=None, compare=False, repr=False)

    def of_kind(self, *kinds: str) -> list[Layer]:
        """The layers whose kind is one of `kinds`, in forward order."""
        return [layer for layer in self.layers if layer.kind in kinds]

    @property
    def convs(self) -> list[Layer]:
        return self.of_kind("conv2d")
