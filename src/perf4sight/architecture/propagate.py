"""Re-propagate a traced architecture for other channel counts, without any module.

A pruned network has the layers, spatial sizes and dataflow of its base; only channel
counts differ. Given the base's trace and the new shapes of its Conv2d and Linear layers
(an architecture spec records exactly these), every other layer's shapes, parameters and
saved tensors follow by walking the dataflow once, and the base's recorded tensor lifetimes
are scaled to the new channels. This is what makes a prediction for a pruned variant cost a
millisecond rather than a model build, a trace and a recording.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from perf4sight.architecture.ir import Architecture, Layer, Shape
from perf4sight.architecture.kinds import CONCAT, OWN, layer_kind, statistics_bytes
from perf4sight.architecture.lifetimes import resized
from perf4sight.errors import NetworkError

__all__ = ["LayerShape", "with_layer_shapes"]


@dataclasses.dataclass(frozen=True)
class LayerShape:
    """The new shapes of one Conv2d or Linear layer (per sample), and its groups."""

    inputs: Shape
    output: Shape
    groups: int = 1


def _reshaped(template_in: Shape, old: Shape, new: Shape) -> Shape:
    """The consumer's input when a view sits between producer and consumer (a flatten)."""
    if template_in == old:
        return new
    if math.prod(template_in) != math.prod(old) or not template_in:
        raise ValueError("view changes the number of elements")
    return (template_in[0] * math.prod(new) // math.prod(old), *template_in[1:])


def _rescaled(value: int, new_numel: int, old_numel: int) -> int:
    """`value` in proportion to a tensor's new element count (unchanged for an empty one)."""
    return value * new_numel // old_numel if old_numel else value


def _output_for(layer: Layer, inputs: list[Shape]) -> Shape:
    """The output of a layer whose channels follow its inputs' (its kind's channel rule; a
    kind no declaration holds, by its shapes)."""
    old_out, old_ins = layer.output, layer.inputs
    kind = layer_kind(layer.kind)
    if kind is not None and kind.channels == CONCAT and old_out and old_out[0] == sum(s[0] for s in old_ins if s):
        return (sum(s[0] for s in inputs), *old_out[1:])
    if old_out and old_ins and old_ins[0] and old_out[0] == old_ins[0][0]:
        return (inputs[0][0], *old_out[1:])
    if old_out and old_ins and old_ins[0] and old_ins[0] == inputs[0]:
        return old_out
    raise ValueError(f"no channel rule for a '{layer.kind}' layer")


def with_layer_shapes(
    template: Architecture, shapes: Mapping[str, LayerShape], *, name: str | None = None
) -> Architecture:
    """`template` with the given Conv2d/Linear shapes, every other layer following, and
    the tensor lifetimes `template` holds scaled to them (a stage whose lifetimes cannot
    be scaled, `resized`, is left out: the variant must be recorded for it).

    Raises NetworkError naming the layer when the shapes do not fit the template (a spec
    whose channels cannot be applied to its base) or a layer's channels cannot be derived,
    and when the template holds parameters outside its layers (a module's own
    `nn.Parameter` used in its forward): where they enter the dataflow is not traced, so
    their pruned shapes cannot follow.
    """
    unowned = template.params - sum(layer.params for layer in template.layers)
    if unowned:
        raise NetworkError(f"{template.name}: {unowned} parameters outside its layers; their channels cannot follow")
    new_outputs: list[Shape] = []
    layers: list[Layer] = []
    for layer in template.layers:
        try:
            inputs = [
                layer.inputs[k]
                if src < 0
                else _reshaped(layer.inputs[k], template.layers[src].output, new_outputs[src])
                for k, src in enumerate(layer.sources)
            ] or list(layer.inputs)
            given = shapes.get(layer.name)
            if _own_channels(layer) and given is not None:
                if tuple(given.inputs) != tuple(inputs[0]):
                    raise ValueError(
                        f"its input would be {tuple(inputs[0])}, the spec records {tuple(given.inputs)}"
                    )
                output, groups = tuple(given.output), given.groups
            else:
                output, groups = _output_for(layer, inputs), layer.groups
                if layer.depthwise:
                    groups = inputs[0][0]  # depthwise: groups follow the channels
        except (ValueError, IndexError) as exc:
            raise NetworkError(f"layer '{layer.name}' of {template.name}: {exc}") from None
        new_outputs.append(output)
        inputs_tuple = tuple(inputs)
        unchanged = inputs_tuple == layer.inputs and output == layer.output and groups == layer.groups
        layers.append(layer if unchanged else _resized(layer, inputs_tuple, output, groups))
    params = sum(layer.params for layer in layers)
    buffers = (template.buffer_bytes + statistics_bytes(layers, template.dtype_bytes)
               - statistics_bytes(template.layers, template.dtype_bytes))
    variant = dataclasses.replace(
        template,
        name=name or template.name,
        layers=tuple(layers),
        params=params,
        trainable_params=sum(layer.params for layer in layers if layer.trained),
        buffer_bytes=buffers,
        lifetimes={},
    )
    scaled = {stage: resized(timeline, template, variant) for stage, timeline in template.lifetimes.items()}
    return dataclasses.replace(
        variant, lifetimes={stage: timeline for stage, timeline in scaled.items() if timeline is not None}
    )


def _per_channel(value: int, new_numel: int, old_numel: int, old_channels: int) -> int:
    """`value` rescaled when it is a per-channel amount (a multiple of the channel count:
    BatchNorm's weights, saved statistics); kept otherwise (a single PReLU weight,
    stochastic depth's per-sample noise)."""
    if not old_channels or value % old_channels:
        return value
    return _rescaled(value, new_numel, old_numel)


def _resized(layer: Layer, inputs: tuple[Shape, ...], output: Shape, groups: int) -> Layer:
    old_in = layer.in_shape
    new_in = inputs[0] if inputs else ()
    old_channels, new_channels = math.prod(layer.output[:1]), math.prod(output[:1])
    own = _own_channels(layer)
    if own:
        params = _weights(layer, new_in, output, groups) + (output[0] if layer.bias else 0)
    else:
        params = _per_channel(layer.params, new_channels, old_channels, old_channels)
    # autocast's copies of a GEMM layer's weights (its bias is not saved)
    saved_params = (_rescaled(layer.saved_param_bytes, _weights(layer, new_in, output, groups),
                              _weights(layer, old_in, layer.output, layer.groups))
                    if own else _rescaled(layer.saved_param_bytes, params, layer.params))
    in_new, in_old = math.prod(new_in), math.prod(old_in)
    out_new, out_old = math.prod(output), math.prod(layer.output)
    other = layer.saved_bytes - layer.saved_input_bytes - layer.saved_output_bytes
    saved_in = _rescaled(layer.saved_input_bytes, in_new, in_old)
    saved_out = _rescaled(layer.saved_output_bytes, out_new, out_old)
    saved_other = _per_channel(other, out_new, out_old, old_channels)
    return layer.replaced(
        inputs=inputs,
        output=output,
        groups=groups,
        params=params,
        saved_bytes=saved_in + saved_out + saved_other,
        saved_input_bytes=saved_in,
        saved_output_bytes=saved_out,
        saved_fixed_bytes=_per_channel(layer.saved_fixed_bytes, new_channels, old_channels, old_channels),
        saved_param_bytes=saved_params,
        saved_shared_bytes=_rescaled(layer.saved_shared_bytes, in_new, in_old),
        saved_copy_bytes=_rescaled(layer.saved_copy_bytes, in_new, in_old),
    )


def _own_channels(layer: Layer) -> bool:
    """Whether the layer's output channels are its own (a spec gives them: Conv2d, Linear)."""
    kind = layer_kind(layer.kind)
    return kind is not None and kind.channels == OWN


def _weights(layer: Layer, inputs: Shape, output: Shape, groups: int) -> int:
    """The weight elements of `layer` (of a kind with channels of its own) at these shapes."""
    return layer_kind(layer.kind).weights(inputs, output, groups, layer.kernel)
