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
from perf4sight.architecture.kinds import (CONV2D, CONV_DEPTHWISE, CONV_GROUPED, GEMM_GROUPS, LINEAR_GROUP,
                                           MEMORY_BOUND_GROUPS, OTHER, POOL, gemm_flops, layer_group)
from perf4sight.console import warn
from perf4sight.device.definitions import FRESH_PAGES_BYTES
from perf4sight.device.recipe import DEFAULT_RECIPE, OPTIMIZERS, PRECISIONS, Precision
from perf4sight.errors import NetworkError
from perf4sight.features.inputs import needs
from perf4sight.features.terms import Role, Term, TermSet

__all__ = [
    "AUTOCAST_TERMS", "COPIES_TERMS", "EXACT_COLUMNS", "FLAT_TERMS", "FRESH_PAGES", "FRESH_PAGES_MS", "LAYER_GROUPS", "MEMORY_PARTS",
    "NETWORK_TERMS", "PLANES_TERMS", "PROCESS_MEMORY_COLUMNS", "STEP_TERMS", "STREAM_TERMS", "PARAMETER_STREAM_FACTOR", "gemm_flops",
    "network_features", "layer_group", "networks_per_group", "group_column",
]

# The layer kinds' cost groups (`perf4sight.architecture.kinds`): depthwise and grouped
# convolutions run kernels whose costs differ most between devices (their latency terms,
# below); a network with Linear layers loads cuBLAS.
_DEPTHWISE, _GROUPED, _LINEAR = CONV_DEPTHWISE, CONV_GROUPED, LINEAR_GROUP
# Every group a layer falls in (`layer_group`), each with a `<group>_count` column.
LAYER_GROUPS = (*GEMM_GROUPS, *MEMORY_BOUND_GROUPS)

# The CUDA caching allocator serves tensors over 1 MiB from segments rounded to 2 MiB.
_LARGE_ALLOC_BYTES = 1 << 20
_SEGMENT_BYTES = 2 << 20
# Passes of a GEMM layer over its parameters per training iteration: forward, gradient of
# the input, gradient of the weights (1 in inference).
_TRAINING_PASSES = 3.0
# The gradient scaler (fp16 autocast) unscales every gradient in place: read and written.
_SCALER_PASSES = 2
# GPU GEMM kernels cover a layer's output channels in tiles (64 wide in typical cuDNN and
# cuBLAS kernels); a pruned width just above a multiple costs the whole next tile. The input
# channels are the GEMM's reduction, split finer, and are not padded.
_CHANNEL_TILE = 64
# Columns the physical models' terms weigh (`NETWORK_TERMS`, below; the group columns are
# `group_column`'s).
_PARAM_TRAFFIC = "param_traffic_bytes"
_CONV_WEIGHT_TRAFFIC = "conv_weight_traffic_bytes"
_PARAM_STATE = "param_state_bytes"
# The parts of `_PARAM_STATE`, for a prediction's breakdown (`MEMORY_PARTS`).
_PARAMS = "param_bytes"
_WEIGHT_COPIES = "weight_copy_bytes"
_GRADIENTS = "gradient_bytes"
_OPTIMIZER_STATE = "optimizer_state_bytes"
_SAVED = "saved_bytes"
_OPTIMIZER_TEMP = "optimizer_temp_bytes"
# The GEMM work (`_GEMM_WORK`'s, padded) that autocast computes in its 16-bit dtype, and the
# Linear layers' share of it.
_AUTOCAST_GEMM = "autocast_padded_flops"
_AUTOCAST_LINEAR = "autocast_linear_padded_flops"
_OUTPUTS = "output_bytes"
_ACTIVATION_PEAK = "activation_peak_bytes"
_LAYERS = "layers"
# The planes grouped and depthwise convolutions compute, one kernel loop each per group, sample
# and pass (`_PLANES`, below).
_GROUP_PLANES = "group_planes"
# What is allocated at every iteration for each trained weight above `FRESH_PAGES_BYTES`, each
# in fresh pages on a CPU: its gradient, and the optimizer's temporaries of its size (SGD's
# decayed gradient, Adam's two for the denominator; one parameter at a time, each allocated
# anew); and their cost there, at the rate the device's profiler measured
# (`perf4sight.device.backends.fresh_pages_ms_per_mib`; added by `feature_table`, 0 where
# none was measured: a GPU's caching allocator keeps its blocks).
FRESH_PAGES = "fresh_page_bytes"
FRESH_PAGES_MS = "fresh_pages_ms"
# The kinds of layer the network holds: each kind's kernels keep tables and buffers of their own,
# whatever the batch size.
_LAYER_KINDS = "layer_kinds"
# The distinct configurations of the network's convolutions (shapes, kernel, stride, padding,
# dilation, groups): a CPU's convolution library builds and caches kernels and buffers for each.
_CONV_CONFIGS = "conv_configs"
# The trained weights' gradients at or below `FRESH_PAGES_BYTES`: on a CPU the C library's heap
# serves them, and its pages stay with the process once freed.
_HEAP_GRADIENTS = "heap_gradient_bytes"
# The largest layer's input and output at once (an in-place layer's one tensor once): a CPU's
# convolution library (oneDNN) reorders a layer's tensors and their gradients into its blocked
# layout and back, copies of that size beside the activations, whose holes the C library's heap
# keeps (`COPIES_TERMS`, below).
_LARGEST_LAYER = "largest_layer_bytes"
# The optimizer's temporaries (in `_OPTIMIZER_TEMP`), as a CPU's process holds them: beside
# the heap pages the activations freed before the step keep, not in them (a GPU's caching
# allocator serves them from those blocks; on the CPU zoo, each family left out, adding them
# took memory from 6.79 to 6.30 %, the plain networks' from 9.97 to 5.30).
_PROCESS_STEP_TEMP = "process_step_temp_bytes"
# Amounts of the process's own memory, which a CPU's measurement (its anonymous memory) holds:
# counted where the device's profiler measured the C library's fresh pages (the CPU backend;
# `perf4sight.features.transform.with_device_costs`), 0 elsewhere. A GPU's caching allocator and
# context dominate its measurement, and its few training networks cannot tell these amounts
# from the runtime (on the TX2's four, fitting them put 57 MiB on each kind of layer: cuBLAS's
# footprint, which only squeezenet lacks).
# The C library's heap holes (the `heap` feature set's, `perf4sight.features.replay`) are one too.
HEAP_HOLES = "heap_hole_bytes"
PROCESS_MEMORY_COLUMNS = (_HEAP_GRADIENTS, _LARGEST_LAYER, _PROCESS_STEP_TEMP, _LAYER_KINDS, _CONV_CONFIGS, HEAP_HOLES)


def networks_per_group(features: pd.DataFrame, nets: pd.Series) -> dict[str, int]:
    """For each layer group with a `<group>_count` column in `features` (one row per run,
    `nets` naming each row's network): how many of the networks have layers of it."""
    present = {group: features[group_column(group, "count")].to_numpy() > 0 for group in LAYER_GROUPS
               if group_column(group, "count") in features.columns}
    return {group: int(nets[mask].nunique()) for group, mask in present.items()}


def group_column(group: str, amount: str) -> str:
    """The column of a layer group's amount (`flops`, `padded_flops`, `bytes`, `count`)."""
    return f"{group}_{amount}"


def _round_up(value: np.ndarray, step: float) -> np.ndarray:
    return np.ceil(value / step) * step


def _im2col_bytes(layer: Layer, dtype_bytes: int) -> int:
    """Per-sample bytes of the unfolded input an im2col GEMM needs (none for a plain 1x1)."""
    if layer.kind != CONV2D or (tuple(layer.kernel) == (1, 1) and set(layer.stride) <= {1}):
        return 0
    return (layer.in_shape[0] // layer.groups) * math.prod(layer.kernel) * math.prod(layer.output[1:]) * dtype_bytes


@needs(Detail.LAYERS)
def network_features(arch: Architecture, batch_sizes: Sequence[int], stage: str = "training") -> pd.DataFrame:
    """One row per batch size of whole-network features of `arch` for `stage`, under the
    architecture's recipe (`arch.recipe`: its optimizer's state, passes and temporaries,
    the parameters it trains, its precision's bytes, the forward passes its checkpoint
    segments recompute).

    Needs a complete architecture (every layer traced), not a spec's Conv2d/Linear table.
    """
    bs = np.asarray(batch_sizes, dtype=float)
    if not arch.layers:
        raise NetworkError(f"network '{arch.name}': the architecture has no layers")
    training = stage == "training"
    dtype = arch.dtype_bytes
    optimizer = OPTIMIZERS[arch.recipe.optimizer]
    precision = PRECISIONS[arch.recipe.precision]
    layers = arch.layers
    groups = [layer_group(layer) for layer in layers]
    unknown = sorted({layer.kind for layer, group in zip(layers, groups) if group == OTHER})
    if unknown:
        warn(f"network '{arch.name}': {len(unknown)} layer kind(s) without a cost group, counted as "
             f"memory-bound: {', '.join(unknown)}")

    passes = _TRAINING_PASSES if training else 1.0
    # One pass over the layers, one row of per-sample amounts each; then sums per group.
    per_layer = np.array([_layer_row(layer, group, training, dtype, precision) for layer, group in zip(layers, groups)],
                         dtype=float)
    (in_bytes, out_bytes, saved, im2col, layer_passes, weight_bytes, owned, flops, padded, moved,
     segment, conv, fresh, backward) = per_layer.T
    conv, fresh, backward = conv > 0, fresh > 0, backward > 0
    recomputed = segment > 0
    # What autograd keeps from the forward pass to the backward: a checkpointed segment's
    # layers keep nothing, the segment its input and its output (`_segment_boundaries`).
    checkpointed = bool(recomputed.any())
    kept = np.where(recomputed, 0.0, saved) + _segment_boundaries(layers, segment) if checkpointed else saved
    saved_fixed = float(sum(layer.saved_fixed_bytes for layer in layers)) if training else 0.0
    param_bytes = float(arch.params * dtype)
    trainable_bytes = float(arch.trainable_params * dtype) if training else 0.0
    param_layers = sum(1 for layer in layers if layer.params)
    # Passes over the parameters that do not depend on the batch size: the kernels of each
    # layer read its weights (in autocast's dtype where it casts them) or write their
    # gradient, once per pass (`_layer_passes`: 3 in training for a layer whose backward
    # runs, 1 in inference); parameters outside the layers at `passes`, as the
    # layers the backward runs through. Then the optimizer's passes over every trained
    # parameter, the gradient scaler's, and autocast's copies of the weights (made in each
    # forward pass and each recomputation; the gradients cast back, for trained ones).
    kernel_traffic = (weight_bytes * layer_passes).sum() - owned.sum() * passes
    param_traffic = (param_bytes * passes + kernel_traffic + optimizer.passes * trainable_bytes
                     + (_SCALER_PASSES * trainable_bytes if precision.grad_scaler else 0.0)
                     + _cast_traffic(layers, groups, dtype, precision, training))

    # Backward of layer i: what is kept up to i (and, in a checkpointed segment, what its
    # recomputed layers up to i saved again), plus the gradients of its output and input
    # and its workspace, all at once (forward: its input and output).
    # Every amount is per sample, so the layer of the peak is the same at every batch size.
    batch = bs[:, None]
    alive = np.cumsum(kept) + _recomputed_alive(layers, segment, saved) if checkpointed else np.cumsum(kept)
    held = np.full(len(bs), trainable_bytes)
    if training:
        at_layers = alive + in_bytes + out_bytes + im2col
        peak = bs * at_layers.max() + saved_fixed
        if arch.recipe.clears_gradients_first:
            held = _gradients_made_at_peak(layers, at_layers[None, :] * batch, dtype, trainable_bytes)
    else:
        peak = bs * (in_bytes + out_bytes + im2col).max()
    # every output a layer allocates that the graph holds to the backward pass (in inference,
    # every output): a frozen prefix frees its outputs as soon as the next layer has read them, and
    # so does a checkpointed segment's first forward pass; its recomputation keeps them
    graph = backward if training else np.ones(len(layers), dtype=bool)
    fresh_outputs = float(out_bytes[fresh & graph].sum())
    big = kept[None, :] * batch
    rounded = np.where(big > _LARGE_ALLOC_BYTES, _round_up(big, _SEGMENT_BYTES), big).sum(axis=1)
    trained_params = [layer.params for layer in layers if layer.trained and training]
    gradients = [_weight_elements(layer) * dtype for layer in layers if layer.trained and training]

    temporaries = float(optimizer.temporaries * max(trained_params, default=0) * dtype)
    # the copies of the weights autograd keeps in autocast's dtype
    weight_copies = float(sum(layer.saved_param_bytes for layer in layers)) if training else 0.0
    columns: dict[str, np.ndarray | float] = {
        "batch_size": bs,
        _PARAMS: param_bytes,
        _PARAM_TRAFFIC: param_traffic,
        # convolution kernels reorder (or transform) their weights, once per kernel
        _CONV_WEIGHT_TRAFFIC: float((weight_bytes * layer_passes)[conv].sum()),
        # weights (fp32 master weights under autocast), the trained ones' gradients and
        # optimizer state, and the copies of the weights autograd keeps in autocast's dtype
        _PARAM_STATE: param_bytes + held + optimizer.state_buffers * trainable_bytes + weight_copies,
        _WEIGHT_COPIES: weight_copies,
        _GRADIENTS: held,
        _OPTIMIZER_STATE: optimizer.state_buffers * trainable_bytes,
        # the optimizer's temporaries for one parameter at a time (the largest trained layer's),
        # with the gradients not held at the activations' peak
        _OPTIMIZER_TEMP: temporaries + trainable_bytes - held,
        _PROCESS_STEP_TEMP: temporaries,
        FRESH_PAGES: float((1 + optimizer.temporaries) * sum(size for size in gradients if size > FRESH_PAGES_BYTES)),
        _HEAP_GRADIENTS: float(sum(size for size in gradients if size <= FRESH_PAGES_BYTES)),
        "buffer_bytes": float(arch.buffer_bytes),
        "input_bytes": bs * math.prod(arch.input_size) * dtype,
        _SAVED: bs * kept.sum() + saved_fixed,
        "saved_segment_bytes": rounded + saved_fixed,
        _OUTPUTS: bs * fresh_outputs,
        _ACTIVATION_PEAK: peak,
        "workspace_peak_bytes": bs * im2col.max(),
        _LARGEST_LAYER: bs * np.where(fresh, in_bytes + out_bytes, out_bytes).max(),
        _LAYERS: float(len(layers)),
        _LAYER_KINDS: float(len({layer.kind for layer in layers})),
        _CONV_CONFIGS: float(len({(layer.inputs, layer.output, layer.kernel, layer.stride, layer.padding,
                                   layer.dilation, layer.groups) for layer in layers if layer.kind == CONV2D})),
        "param_layers": float(param_layers),
    }
    group_of = np.array(groups)
    planes = np.array([layer.groups for layer in layers], dtype=float) * layer_passes
    columns[_GROUP_PLANES] = bs * planes[np.isin(group_of, (_DEPTHWISE, _GROUPED))].sum()
    for group in GEMM_GROUPS:
        mask = group_of == group
        columns[group_column(group, "flops")] = bs * flops[mask].sum()
        columns[group_column(group, "padded_flops")] = bs * padded[mask].sum()
        columns[group_column(group, "bytes")] = bs * moved[mask].sum()
        columns[group_column(group, "count")] = float(mask.sum())
    half = precision.autocast_dtype is not None
    columns[_AUTOCAST_GEMM] = sum(columns[column] for column in _GEMM_WORK_COLUMNS) if half else bs * 0.0
    columns[_AUTOCAST_LINEAR] = columns[_LINEAR_WORK_COLUMN] if half else bs * 0.0
    # a memory-bound layer reads and writes in its forward pass (again where recomputed)
    # and in its backward pass, where that runs
    bound_passes = 1.0 + recomputed + backward
    for group in MEMORY_BOUND_GROUPS:
        mask = group_of == group
        columns[group_column(group, "bytes")] = bs * ((in_bytes[mask] + out_bytes[mask]) * bound_passes[mask]).sum()
        columns[group_column(group, "count")] = float(mask.sum())
    # One float block: a frame of 45 separate columns costs more to build and read than
    # the features themselves.
    table = np.empty((len(bs), len(columns)))
    for index, value in enumerate(columns.values()):
        table[:, index] = value
    return pd.DataFrame(table, columns=list(columns))


def _layer_row(layer: Layer, group: str, training: bool, dtype: int, precision: Precision) -> tuple[float, ...]:
    """A layer's per-sample amounts (`network_features` unpacks them): bytes of its inputs and
    output, what it saves, its im2col buffer, its kernels' passes, the bytes of its weights
    as its kernels read them and as stored, its GEMM work, its checkpoint segment, and
    whether it is a convolution, allocates its output and runs a backward pass."""
    passes = _layer_passes(layer, training)
    return (
        sum(math.prod(s) for s in layer.inputs) * layer.element_bytes,
        math.prod(layer.output) * layer.element_bytes,
        layer.saved_bytes if training else 0,
        _im2col_bytes(layer, layer.element_bytes),
        passes,
        layer.params * _weight_bytes(layer, group, dtype, precision),
        layer.params * dtype,
        *(_gemm_amounts(layer, training, passes) if group in GEMM_GROUPS else (0, 0, 0)),
        layer.segment if training else 0,
        layer.kind == CONV2D,
        not layer.inplace,
        training and layer.backward,
    )


def _gradients_made_at_peak(layers: Sequence[Layer], alive: np.ndarray, dtype: int,
                            trainable_bytes: float) -> np.ndarray:
    """Per batch size, the gradient bytes a step that clears them before the forward pass
    adds to the activations' peak (`alive`: per batch size and layer, the bytes alive at its
    backward): the backward pass makes layer i's gradients after the later layers', so
    at layer i those of layers i onwards are there; the peak with them, less the peak
    without. Trained parameters outside the layers are counted as there throughout."""
    made = np.array([layer.params * dtype if layer.trained else 0 for layer in layers], dtype=float)
    made_by = np.cumsum(made[::-1])[::-1]
    outside = max(trainable_bytes - float(made.sum()), 0.0)
    return (alive + made_by[None, :]).max(axis=1) - alive.max(axis=1) + outside


def _weight_elements(layer: Layer) -> int:
    """The elements of a layer's largest parameter, its weight: all but a bias of one value per
    output channel."""
    return layer.params - (layer.output[0] if layer.bias and layer.output else 0)


def _layer_passes(layer: Layer, training: bool) -> float:
    """Passes of a layer's kernels over its activations and weights per iteration: the
    forward pass, again where a checkpoint recomputes it, and in training two more where
    the backward runs through it (the gradients of its input and of its weights, counted
    whether or not it computes both, as for the network's first layer)."""
    if not training:
        return 1.0
    return 1.0 + layer.recomputed + (_TRAINING_PASSES - 1.0) * layer.backward


def _weight_bytes(layer: Layer, group: str, dtype: int, precision: Precision) -> int:
    """Bytes per parameter the layer's kernels read: autocast's copy for a GEMM layer."""
    if precision.autocast_dtype is not None and group in GEMM_GROUPS:
        return precision.bytes_per_cast_value
    return dtype


def _cast_traffic(layers: Sequence[Layer], groups: Sequence[str], dtype: int, precision: Precision,
                  training: bool) -> float:
    """Bytes autocast moves to copy the GEMM layers' weights into its dtype (read in fp32,
    written cast) in each forward pass and recomputation, and, in training, to cast the
    trained ones' gradients back."""
    if precision.autocast_dtype is None:
        return 0.0
    per_copy = dtype + precision.bytes_per_cast_value
    copies = sum(layer.params * ((1 + (layer.recomputed if training else 0)) + (training and layer.trained))
                 for layer, group in zip(layers, groups) if group in GEMM_GROUPS)
    return float(copies * per_copy)


def _segment_boundaries(layers: Sequence[Layer], segment: np.ndarray) -> np.ndarray:
    """Per layer, the per-sample bytes kept at a checkpointed segment's boundaries: at its
    first layer, the segment's input (which the segment keeps for its recomputation); at
    the first layer after it that is not recomputed, what it saves that a layer of the
    segment saved first (the segment's output, which it keeps now)."""
    kept = np.zeros(len(layers))
    for index, value in enumerate(segment):
        layer = layers[index]
        if value and (index == 0 or segment[index - 1] != value):
            kept[index] += math.prod(layer.in_shape) * layer.element_bytes
        if not value and index and segment[index - 1]:
            kept[index] += layer.saved_shared_bytes
    return kept


def _recomputed_alive(layers: Sequence[Layer], segment: np.ndarray, saved: np.ndarray) -> np.ndarray:
    """Per layer, what the layers of its checkpointed segment up to it save when the backward
    recomputes the segment (0 outside a segment); the input the segment's first layer saves
    is the one the segment keeps (`_segment_boundaries`), counted there."""
    alive = np.zeros(len(segment))
    total = 0.0
    for index, value in enumerate(segment):
        first = value and (index == 0 or segment[index - 1] != value)
        total = (saved[index] - layers[index].saved_input_bytes if first else total + saved[index]) if value else 0.0
        alive[index] = total
    return alive


def _gemm_amounts(layer: Layer, training: bool, passes: float) -> tuple[float, float, float]:
    """A GEMM layer's work per sample and iteration: flops, flops with output channels padded
    to tiles, and bytes of its input and output moved in its kernels' `passes`."""
    gemms = _gemm_passes(layer, training)
    moved = (math.prod(layer.in_shape) + math.prod(layer.output)) * layer.element_bytes * passes
    return gemm_flops(layer) * gemms, gemm_flops(layer, _CHANNEL_TILE) * gemms, moved


def _gemm_passes(layer: Layer, training: bool) -> float:
    """GEMMs per iteration: the forward pass (again where a checkpoint recomputes it), and in
    training the gradient of the input where it needs one (not the network's input's, nor in
    a frozen prefix) and of the weights where they are trained."""
    if not training:
        return 1.0
    return 1.0 + layer.recomputed + layer.grad_input + layer.trained


# The parameters' traffic, which does not depend on the batch size (`param_traffic_bytes`:
# the GEMM kernels' reads of their weights and writes of their gradients, and the optimizer
# step's passes in training), streams contiguous data, faster than the layers'
# activations. Fitted with a rate of its own on all the data of this machine's CPU (eight
# networks; alexnet and vgg11 hold 96 % of their parameters in Linear layers), a Linear
# weight costs as many of the layers' passes per training iteration as its kernels make
# (3.0), for its 3 + 11: as if the optimizer's passes streamed free. Tied to the memory rate
# at this factor, the parameters need no networks with large parameter counts in the
# training data. The reorders of convolution weights (`conv_weight_traffic_bytes`, once per
# kernel) go at the layers' rate: the same fit puts a convolution weight at 5.2 passes per
# training iteration (the TX2's and the CPU demo's data, nearly all convolutions: 5.4-5.8),
# against 3 + 3 here.
# The factor was measured under the default recipe's optimizer (SGD with momentum): it is a
# property of the device's kernels, kept for every recipe, whose optimizer passes the column counts.
PARAMETER_STREAM_FACTOR = _TRAINING_PASSES / (_TRAINING_PASSES + OPTIMIZERS[DEFAULT_RECIPE.optimizer].passes)

# Memory (MiB): the runtime's footprint (the model's intercept), plus the weights, gradients
# and momentum as they are (a fitted scale on them would explode for parameter-heavy
# networks), plus the larger of the activations the allocator holds (the midpoint of the two
# bounds on it, scaled, with a share of the gradients the allocator's heap keeps) and what the
# optimizer's step allocates (on a CPU its temporaries are added instead), plus cuBLAS's footprint where a
# network has Linear layers (fitted only when the training data hold networks with and
# without such layers; otherwise it cannot be told apart from the runtime and stays 0), plus a
# footprint per kind of layer (its kernels' code and buffers; fitted where the training
# networks hold different numbers of kinds) and one per distinct convolution (the kernels a CPU's
# convolution library builds for it and keeps).
_LIBRARY = Term("library", {group_column(_LINEAR, "count"): 1.0}, "count", Role.LIBRARY)
_MEMORY_TERMS = (
    Term("activations", {_ACTIVATION_PEAK: 0.5, _OUTPUTS: 0.5}, "bytes"),
    Term("param_state", {_PARAM_STATE: 1.0}, "bytes", Role.EXACT),
    Term("optimizer", {_OPTIMIZER_TEMP: 1.0, _PROCESS_STEP_TEMP: -1.0}, "bytes", Role.OPTIMIZER),
    Term("step_temp", {_PROCESS_STEP_TEMP: 1.0}, "bytes", Role.EXACT),
    Term("heap_gradients", {_HEAP_GRADIENTS: 1.0}, "bytes"),
    _LIBRARY,
    Term("kinds", {_LAYER_KINDS: 1.0}, "count", Role.FOOTPRINT),
    Term("conv_configs", {_CONV_CONFIGS: 1.0}, "count", Role.FOOTPRINT),
)
# Amounts of the parameters' state and the optimizer's temporaries, known exactly whatever
# the recipe: a query beyond the training runs' range in them (Adam's state and its two
# temporaries, say, after SGD's) extrapolates no fitted rate (a bigger network is still told
# by its `param_bytes`).
EXACT_COLUMNS = (_PARAM_STATE, _WEIGHT_COPIES, _GRADIENTS, _OPTIMIZER_STATE, _OPTIMIZER_TEMP, _PROCESS_STEP_TEMP,
                 FRESH_PAGES, FRESH_PAGES_MS)
# What a memory prediction is made of, for its breakdown: the exact amounts of the features
# (the weights, with autocast's copies of them; the gradients; the optimizer's state) and what
# autograd saves for the backward pass, the part of the fitted activations known exactly.
MEMORY_PARTS = {
    "weights": (_PARAMS, _WEIGHT_COPIES),
    "gradients": (_GRADIENTS,),
    "optimizer_state": (_OPTIMIZER_STATE,),
    "saved_activations": (_SAVED,),
}
# Latency (ms): GEMM work with the output channels padded to whole tiles (the steps pruned
# widths cause), bytes moved (every layer's, and the parameters' passes), kernel launches.
# Depthwise and grouped convolutions run kernels of their own, whose cost differs from one
# device and library to the next (the TX2's depthwise layers cost nothing beyond their
# neighbours' traffic; on the H200 a depthwise operation costs about a hundred GEMM
# operations). A grouped convolution is a GEMM per group: a rate per operation, where the
# training networks hold such layers, else the GEMM's. A depthwise kernel is bound by the
# bytes it moves, not its taps: with each family of the CPU zoo left out, a rate per byte
# predicts convnext's 7x7 kernels and the 3x3 and 5x5 families from each other's (mean 18 %),
# where a rate per operation put a 7x7 kernel at 49/9 of a 3x3's cost on the same bytes
# (convnext +35 to +83 %, mean 25 %). Where no training network holds depthwise layers the
# data cannot tell their rate, and it stays 0 (at the traffic rate, the TX2's mobilenetv2 left
# out of a fit on the other three is predicted 26 % too slow; at the GEMM's rate per
# operation, the tie before, within 11 %, about what 0 gives): such a prediction is marked
# extrapolated, naming `conv_depthwise`.
# A CPU's depthwise and grouped kernels loop over the groups' planes, each with a cost of its own
# beside the bytes and operations it computes (a tile set up, a thread's share scheduled): a
# rate per plane (`PLANES_TERMS`, below), for the grouped and depthwise families whose planes
# are small and many.
# The parameters' passes cost at least the layers' traffic at `PARAMETER_STREAM_FACTOR`, and
# the `parameters` term adds a rate of their own where the data show more: a network whose
# parameters do not stay in the device's caches streams them from memory at each of the
# optimizer's passes too (the CPU zoo's parameter-heavy families: plain networks, wide and
# bottleneck residual networks).
# Under autocast that work runs in a 16-bit dtype, at a rate of its own (a GPU's tensor cores,
# a CPU's bf16 instructions or their emulation): the GEMM term counts what runs in fp32 and
# `autocast_gemm` the rest, at the GEMM rate until a profiled recipe with autocast shows its own.
_GEMM_WORK_COLUMNS = tuple(group_column(group, "padded_flops") for group in GEMM_GROUPS
                           if group not in (_DEPTHWISE, _GROUPED))
_GEMM_WORK = Term("gemm", {**dict.fromkeys(_GEMM_WORK_COLUMNS, 1.0), _AUTOCAST_GEMM: -1.0}, "flops")
_LINEAR_WORK_COLUMN = group_column(_LINEAR, "padded_flops")
_AUTOCAST_GEMM_WORK = Term("autocast_gemm", {_AUTOCAST_GEMM: 1.0}, "flops", tie="gemm")
# The latency terms whose rates only runs under autocast show.
AUTOCAST_TERMS = (_AUTOCAST_GEMM_WORK.name,)
_PARAMETER_PASSES = {_PARAM_TRAFFIC: PARAMETER_STREAM_FACTOR, _CONV_WEIGHT_TRAFFIC: 1.0}
_PARAMETER_STREAMS = Term("parameters", {_PARAM_TRAFFIC: 1.0}, "bytes")
_LAUNCHES = Term("launches", {_LAYERS: 1.0}, "count")
_GROUPED_WORK = Term("grouped", {group_column(_GROUPED, "padded_flops"): 1.0}, "flops", tie="gemm")
_DEPTHWISE_WORK = Term("depthwise", {group_column(_DEPTHWISE, "bytes"): 1.0}, "bytes")
# Pooling layers' bytes cost more than the traffic rate where their kernels do not vectorise (a
# CPU's max and average pooling over channels-first maps loop per element, forward and
# backward): a rate added to the traffic's, fitted where the training networks pool (else 0,
# the traffic's rate alone). With each family of the CPU zoo left out, latency 12.48 -> 10.47 %
# (googlenet, whose inception branches pool at stride 1, 14.6 -> 8.2; squeezenet 13.1 -> 8.4;
# densenet 11.9 -> 8.6); fitted on the whole zoo at 12x the traffic's rate. Where a GPU's pooling
# costs the traffic rate, or few training networks pool, the rate fits other networks' noise
# (it trades with the GEMM rate): `FLAT_TERMS`, below, is the model without it.
_POOLING = Term("pooling", {group_column(POOL, "bytes"): 1.0}, "bytes")
# A trained weight above `FRESH_PAGES_BYTES` gets its gradient and the optimizer's temporaries
# in fresh pages at every iteration on a CPU: their cost at the device's measured rate, as it is
# (no network of the training data need hold such a weight; on the CPU zoo, alexnet, vgg11 and
# wide_resnet50_2).
_FRESH_PAGE_COST = Term("fresh_pages", {FRESH_PAGES_MS: 1.0}, "ms", Role.EXACT)
_LATENCY_TERMS = (
    _GEMM_WORK,
    Term("traffic", {
        **{group_column(group, "bytes"): 1.0 for group in LAYER_GROUPS if group != _DEPTHWISE},
        **_PARAMETER_PASSES,
    }, "bytes"),
    _LAUNCHES,
    _PARAMETER_STREAMS,
    _DEPTHWISE_WORK,
    _POOLING,
    _GROUPED_WORK,
    _AUTOCAST_GEMM_WORK,
    _FRESH_PAGE_COST,
)
NETWORK_TERMS = TermSet("network", memory=_MEMORY_TERMS, latency=_LATENCY_TERMS)
# The same latency model with the bytes moved split by the kernels that move them, each at a
# rate of its own: the GEMM layers' activations with the parameters' passes (what the GEMM
# and optimizer kernels stream), and the memory-bound layers' (normalisation, activation,
# pooling, elementwise), whose kernels reach another share of the device's bandwidth
# (depthwise and grouped convolutions as in `network`). Which of the two latency models a
# device's data support is measured per device (`perf4sight.fit.choice`): with one rate for
# all bytes, networks whose bytes are mostly the memory-bound layers' (the depthwise ones)
# are predicted at the GEMM layers' cost.
_STREAM_LATENCY_TERMS = (
    _GEMM_WORK,
    Term("gemm_traffic", {
        **{group_column(group, "bytes"): 1.0 for group in GEMM_GROUPS if group != _DEPTHWISE},
        **_PARAMETER_PASSES,
    }, "bytes"),
    Term("memory_bound_traffic", {group_column(group, "bytes"): 1.0 for group in MEMORY_BOUND_GROUPS}, "bytes"),
    _LAUNCHES,
    _PARAMETER_STREAMS,
    _DEPTHWISE_WORK,
    _POOLING,
    _GROUPED_WORK,
    _AUTOCAST_GEMM_WORK,
    _FRESH_PAGE_COST,
)
STREAM_TERMS = TermSet("streams", memory=_MEMORY_TERMS, latency=_STREAM_LATENCY_TERMS)
# The `network` latency model with pooling's bytes at the traffic rate alone (no `pooling` term),
# which a device's own data must clearly beat for the rate of its own to be kept (`method =
# default`, `perf4sight.fit.choice`).
FLAT_TERMS = TermSet("flat", memory=_MEMORY_TERMS,
                     latency=tuple(term for term in _LATENCY_TERMS if term is not _POOLING))
# The `network` latency model with a kernel loop's costs for the grouped and depthwise
# convolutions: a rate per plane (`_GROUP_PLANES`), and beside the depthwise bytes a rate per
# tap computed (the operations inside the input), which tells a 5x5 or 7x7 kernel from a 3x3 on
# the same bytes. Kept where a device's own data clearly show it (`method = default`). On the CPU
# zoo, each family left out, the taps took latency 9.78 -> 9.42 % (convnext 16.2 -> 12.6,
# mobilenet 9.3 -> 8.1); in the `physical` model, without the planes, they cost 0.5 points.
# Beside them, the Linear layers' GEMMs at a rate of their own (tied to the convolutions' where no
# training network holds such layers beyond a classifier's share, `perf4sight.fit.physical`): a CPU
# runs them in its matrix library, its convolutions in its convolution library, at other rates per
# operation (on the CPU zoo, fitted on every family, 1.4 times the convolutions'; convnext's
# pointwise layers are Linear layers). With each family left out, latency 7.81 -> 7.50 % (convnext
# 11.85 -> 6.6; the taps' rate then fits to 0). Where the training networks' Linear layers are
# only their classifiers (the TX2's four), the rate is tied (fitted on them, it fitted their noise:
# each network left out, 7.86 % tied against 10.9).
_PLANES = Term("planes", {_GROUP_PLANES: 1.0}, "count")
_DEPTHWISE_TAPS = Term("depthwise_taps", {group_column(_DEPTHWISE, "flops"): 1.0}, "flops")
_CONV_GEMM_WORK = Term("gemm", {**{column: 1.0 for column in _GEMM_WORK_COLUMNS if column != _LINEAR_WORK_COLUMN},
                                _AUTOCAST_LINEAR: 1.0, _AUTOCAST_GEMM: -1.0}, "flops")
_LINEAR_WORK = Term("linear", {_LINEAR_WORK_COLUMN: 1.0, _AUTOCAST_LINEAR: -1.0}, "flops", tie="gemm")
PLANES_TERMS = TermSet("planes", memory=_MEMORY_TERMS, latency=(
    *(_CONV_GEMM_WORK if term is _GEMM_WORK else term for term in _LATENCY_TERMS), _PLANES, _DEPTHWISE_TAPS,
    _LINEAR_WORK))
# The `network` memory model with copies of the largest layer's tensors at a rate of their own
# (`_LARGEST_LAYER`, a CPU's only), kept where a device's own data clearly show it (`method =
# default`). On the whole CPU zoo it comes out at 2.5 copies, the activations' scale falling from
# 1.44 to 1.09; each family left out, memory 6.30 -> 5.31 % (densenet 11.5 -> 5.3, resnet basic
# 7.5 -> 4.8, squeezenet 10.2 -> 8.0). A rate three networks cannot tell: the demo's fingerprint,
# each network left out, 9.83 % with `physical`, 12.66 with it (counted on a GPU too, the TX2's
# four each left out went 7.55 -> 8.66 %).
_LAYER_COPIES = Term("layer_copies", {_LARGEST_LAYER: 1.0}, "bytes")
COPIES_TERMS = TermSet("copies", memory=(*_MEMORY_TERMS, _LAYER_COPIES), latency=_LATENCY_TERMS)
# The latency terms whose rates price the optimizer's passes over the parameters, in either term set.
STEP_TERMS = tuple(dict.fromkeys(term.name for term in (*_LATENCY_TERMS, *_STREAM_LATENCY_TERMS)
                                 if _PARAM_TRAFFIC in term.columns))
