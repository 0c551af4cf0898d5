"""Whole-network features: what every layer allocates, saves, computes and moves.

The paper's features look only at Conv2d layers, so a model trained on them cannot tell
a network with BatchNorm and residual additions from one without. These features sum
over every layer of a complete (traced) `Architecture`, grouped by what bounds the
layer's cost: arithmetic for convolutions and linear layers, bytes moved for the rest.
Memory features follow what a training iteration keeps alive: weights, gradients and
momentum buffers, and the temporary the optimizer step allocates; the tensors autograd
saves for the backward pass (per sample, so they scale with the batch size); the
activation gradients and convolution workspace alive at the worst moment of the backward
pass; the same saved tensors rounded up to the CUDA caching allocator's 2 MiB blocks; and
every freshly allocated layer output, the most the allocator can end up holding when it
reuses no freed block. Every column is a plain sum or maximum in bytes, floating-point
operations or counts, so a model can weigh it with a physical meaning.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from perf4sight.architecture import Architecture, Detail, Layer
from perf4sight.console import warn
from perf4sight.errors import NetworkError
from perf4sight.features.inputs import checked_batch_sizes, needs

__all__ = ["KIND_GROUPS", "LAYER_GROUPS", "network_features", "layer_group", "networks_per_group"]

# Non-GEMM layers grouped by the kind of memory-bound kernel they run.
KIND_GROUPS: dict[str, str] = {
    **dict.fromkeys(
        ("batch_norm", "layer_norm", "layer_norm2d", "group_norm", "instance_norm", "local_response_norm"), "norm"
    ),
    **dict.fromkeys(
        ("relu", "relu6", "silu", "gelu", "elu", "prelu", "leaky_relu", "sigmoid", "tanh",
         "hardswish", "hardsigmoid", "mish", "softplus"),
        "act",
    ),
    **dict.fromkeys(
        ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d"), "pool"
    ),
    **dict.fromkeys(
        ("add", "mul", "sub", "div", "cat", "stack", "dropout", "mean", "sum", "flatten",
         "softmax", "log_softmax", "pad", "constant_pad_nd", "channel_shuffle", "permute", "stochastic_depth"),
        "elementwise",
    ),
}
_GROUPS = tuple(dict.fromkeys(KIND_GROUPS.values()))  # norm, act, pool, elementwise
_GEMM_GROUPS = ("conv_kxk", "conv_1x1", "conv_depthwise", "conv_grouped", "linear")
# Every group a layer falls in (`layer_group`), each with a `<group>_count` column.
LAYER_GROUPS = (*_GEMM_GROUPS, *_GROUPS, "other")

# The CUDA caching allocator serves tensors over 1 MiB from segments rounded to 2 MiB.
_LARGE_ALLOC_BYTES = 1 << 20
_SEGMENT_BYTES = 2 << 20
# Parameter-sized tensors SGD with momentum and weight decay reads or writes per parameter,
# one parameter at a time: the decayed gradient (2 in, 1 out), the momentum buffer scaled
# (1 in, 1 out) and accumulated (2 in, 1 out), the weights updated (2 in, 1 out).
_OPTIMIZER_PASSES = 11
# GPU GEMM kernels cover a layer's output channels in tiles (64 wide in typical cuDNN and
# cuBLAS kernels); a pruned width just above a multiple costs the whole next tile. The input
# channels are the GEMM's reduction, split finer, and are not padded.
_CHANNEL_TILE = 64


def networks_per_group(features: pd.DataFrame, nets: pd.Series) -> dict[str, int]:
    """For each layer group with a `<group>_count` column in `features` (one row per run,
    `nets` naming each row's network): how many of the networks have layers of it."""
    present = {group: features[f"{group}_count"].to_numpy() > 0 for group in LAYER_GROUPS
               if f"{group}_count" in features.columns}
    return {group: int(nets[mask].nunique()) for group, mask in present.items()}


def layer_group(layer: Layer) -> str:
    """The cost group of a layer: a GEMM kind, a `KIND_GROUPS` group or `other`."""
    if layer.kind == "conv2d":
        if layer.groups > 1:
            return "conv_depthwise" if layer.depthwise else "conv_grouped"
        return "conv_1x1" if tuple(layer.kernel) == (1, 1) else "conv_kxk"
    if layer.kind == "linear":
        return "linear"
    return KIND_GROUPS.get(layer.kind, "other")


def _round_up(value: np.ndarray, step: float) -> np.ndarray:
    return np.ceil(value / step) * step


def _gemm_flops(layer: Layer, tile: int = 1) -> int:
    """Forward multiply-adds x 2 of a conv or linear layer, output channels padded to `tile`.

    A linear layer works on the last dimension, a convolution on the first (channels).
    """
    linear = layer.kind == "linear"
    c_in = layer.in_shape[-1] if linear else layer.in_shape[0] // layer.groups
    c_out = layer.output[-1] if linear else layer.output[0]
    spatial = math.prod(layer.output[:-1] if linear else layer.output[1:])
    c_out = -(-c_out // tile) * tile
    return 2 * c_out * c_in * (1 if linear else math.prod(layer.kernel)) * spatial


def _im2col_bytes(layer: Layer, dtype_bytes: int) -> int:
    """Per-sample bytes of the unfolded input an im2col GEMM needs (none for a plain 1x1)."""
    if layer.kind != "conv2d" or (tuple(layer.kernel) == (1, 1) and set(layer.stride) <= {1}):
        return 0
    return (layer.in_shape[0] // layer.groups) * math.prod(layer.kernel) * math.prod(layer.output[1:]) * dtype_bytes


@needs(Detail.LAYERS)
def network_features(arch: Architecture, batch_sizes: Sequence[int], stage: str = "training") -> pd.DataFrame:
    """One row per batch size of whole-network features of `arch` for `stage`.

    Needs a complete architecture (every layer traced), not a spec's Conv2d/Linear table.
    """
    bs = checked_batch_sizes(arch, batch_sizes, stage)
    if not arch.layers:
        raise NetworkError(f"network '{arch.name}': the architecture has no layers")
    training = stage == "training"
    dtype = arch.dtype_bytes
    layers = arch.layers
    groups = [layer_group(layer) for layer in layers]
    unknown = sorted({layer.kind for layer, group in zip(layers, groups) if group == "other"})
    if unknown:
        warn(f"network '{arch.name}': {len(unknown)} layer kind(s) without a cost group, counted as "
             f"memory-bound: {', '.join(unknown)}")

    passes = 3.0 if training else 1.0  # forward, gradient of the input, gradient of the weights
    # One pass over the layers, one row of per-sample amounts each; then sums per group.
    per_layer = np.array(
        [
            (
                sum(math.prod(s) for s in layer.inputs) * dtype,
                math.prod(layer.output) * dtype,
                layer.saved_bytes if training else 0,
                _im2col_bytes(layer, dtype),
                *(_gemm_amounts(layer, passes, dtype) if group in _GEMM_GROUPS else (0, 0, 0)),
            )
            for layer, group in zip(layers, groups)
        ],
        dtype=float,
    )
    in_bytes, out_bytes, saved, im2col, flops, padded, moved = per_layer.T
    saved_fixed = float(sum(layer.saved_fixed_bytes for layer in layers)) if training else 0.0
    param_bytes = float(arch.params * dtype)
    trainable_bytes = float(arch.trainable_params * dtype) if training else 0.0
    param_layers = sum(1 for layer in layers if layer.params)
    conv_param_bytes = float(sum(layer.params for layer in layers if layer.kind == "conv2d") * dtype)
    # Passes over the parameters that do not depend on the batch size: each GEMM kernel reads
    # its weights or writes their gradient (3 in training, 1 in inference), and the optimizer
    # step (SGD with momentum and weight decay, one parameter at a time) touches 11
    # parameter-sized tensors per trainable parameter.
    param_traffic = param_bytes * passes + _OPTIMIZER_PASSES * trainable_bytes

    # Backward of layer i: saved tensors of layers up to i, plus the gradients of its
    # output and input and its workspace, all at once (forward: its input and output).
    batch = bs[:, None]
    alive_saved = np.cumsum(saved)[None, :] * batch
    if training:
        transient = (in_bytes + out_bytes)[None, :] * batch + im2col[None, :] * batch
        peak = (alive_saved + transient).max(axis=1) + saved_fixed
    else:
        peak = ((in_bytes + out_bytes + im2col)[None, :] * batch).max(axis=1)
    fresh_outputs = float(out_bytes[[not layer.inplace for layer in layers]].sum())
    big = saved[None, :] * batch
    rounded = np.where(big > _LARGE_ALLOC_BYTES, _round_up(big, _SEGMENT_BYTES), big).sum(axis=1)

    columns: dict[str, np.ndarray | float] = {
        "batch_size": bs,
        "param_bytes": param_bytes,
        "param_traffic_bytes": param_traffic,
        # convolution kernels reorder (or transform) their weights, once per kernel
        "conv_weight_traffic_bytes": conv_param_bytes * passes,
        "param_state_bytes": param_bytes + 2 * trainable_bytes,  # weights, gradients, momentum
        # SGD's weight decay adds the weights to each gradient in turn: one layer's worth
        "optimizer_temp_bytes": float(max(layer.params for layer in layers) * dtype) if training else 0.0,
        "buffer_bytes": float(arch.buffer_bytes),
        "input_bytes": bs * math.prod(arch.input_size) * dtype,
        "saved_bytes": bs * saved.sum() + saved_fixed,
        "saved_segment_bytes": rounded + saved_fixed,
        "output_bytes": bs * fresh_outputs,
        "activation_peak_bytes": peak,
        "workspace_peak_bytes": bs * im2col.max(),
        "layers": float(len(layers)),
        "param_layers": float(param_layers),
    }
    group_of = np.array(groups)
    for group in _GEMM_GROUPS:
        mask = group_of == group
        columns[f"{group}_flops"] = bs * flops[mask].sum()
        columns[f"{group}_padded_flops"] = bs * padded[mask].sum()
        columns[f"{group}_bytes"] = bs * moved[mask].sum()
        columns[f"{group}_count"] = float(mask.sum())
    memory_passes = 2.0 if training else 1.0
    for group in (*_GROUPS, "other"):
        mask = group_of == group
        columns[f"{group}_bytes"] = bs * (in_bytes[mask].sum() + out_bytes[mask].sum()) * memory_passes
        columns[f"{group}_count"] = float(mask.sum())
    # One float block: a frame of 45 separate columns costs more to build and read than
    # the features themselves.
    table = np.empty((len(bs), len(columns)))
    for index, value in enumerate(columns.values()):
        table[:, index] = value
    return pd.DataFrame(table, columns=list(columns))


def _gemm_amounts(layer: Layer, passes: float, dtype: int) -> tuple[float, float, float]:
    """A GEMM layer's work per sample and iteration: flops, flops with output channels padded
    to tiles, and bytes of its input and output moved."""
    layer_passes = _passes(layer, passes)
    moved = (math.prod(layer.in_shape) + math.prod(layer.output)) * dtype * passes
    return _gemm_flops(layer) * layer_passes, _gemm_flops(layer, _CHANNEL_TILE) * layer_passes, moved


def _passes(layer: Layer, passes: float) -> float:
    """GEMM passes per iteration: a layer fed by the network's input computes no gradient for it."""
    if passes > 1 and layer.sources and all(source == -1 for source in layer.sources):
        return passes - 1
    return passes
