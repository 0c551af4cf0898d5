"""Layer kinds, one declaration each: how the trace recognises a layer, what it costs, how its
channels follow when a pruned variant is propagated.

A kind is what the IR records as `Layer.kind`. The trace names a leaf module by the kind that
lists its class (`modules`), else by its class name in snake_case (`Dropout` -> `dropout`), and
a functional call by the kind that lists its aten op (`ops`), else by the op's name without
leading underscores. A kind's `group` is the cost group the features count it in: a GEMM group
for a kind that multiplies (`conv2d`, `linear`, `matmul`), whose arithmetic (`weights`,
`flops`) is declared with it, or the memory-bound group of the kernel it runs (`norm`, `act`,
`pool`, `elementwise`). Its `channels` rule gives a pruned variant's output channels: its own
(`OWN`, the spec's), the first input's (`FOLLOW`) or the sum of its inputs' (`CONCAT`).

A name no declaration holds is a kind without a cost group, counted as memory-bound with a
warning; one that does work (a module holding parameters, or a call of a multiplying op) is an
error naming it and `register_layer_kind`, with which a user declares their own kind from
outside the package (Torch-Pruning's op types and `register_customized_layer`, here).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from perf4sight.architecture.ir import CONV2D, LINEAR, Layer, Shape
from perf4sight.errors import NetworkError

__all__ = [
    "ACT", "BATCH_NORM", "CONCAT", "CONV2D", "CONV_DEPTHWISE", "CONV_GROUPED", "ELEMENTWISE", "FOLLOW", "GEMM_GROUPS",
    "IDENTITY", "LINEAR", "LINEAR_GROUP", "MEMORY_BOUND_GROUPS", "NORM", "OTHER", "OWN", "POOL", "LayerKind",
    "does_work", "gemm_flops", "layer_group", "layer_kind", "layer_kinds", "module_kind_name", "op_kind_name",
    "register_layer_kind", "statistics_bytes",
]

# Channel rules: a pruned variant's output channels are its own (the spec's), its first input's,
# or the sum of its inputs'.
OWN, FOLLOW, CONCAT = "own", "follow", "concat"
# Cost groups (each a column of the network features: `<group>_count`, `_flops`, `_bytes`).
GEMM_GROUPS = ("conv_kxk", "conv_1x1", "conv_depthwise", "conv_grouped", "linear")
CONV_KXK, CONV_1X1, CONV_DEPTHWISE, CONV_GROUPED, LINEAR_GROUP = GEMM_GROUPS
OTHER = "other"  # a kind without a declaration: memory-bound, like the groups before it
MEMORY_BOUND_GROUPS = ("norm", "act", "pool", "elementwise", OTHER)
NORM, ACT, POOL, ELEMENTWISE = MEMORY_BOUND_GROUPS[:-1]
# What the trace calls a layer that passes its input on (an empty nn.Sequential, nn.Identity):
# dropped from the architecture.
IDENTITY = "identity"
# aten ops that multiply (a GEMM, an attention): a call of one no kind declares does work.
_MULTIPLYING_OPS = re.compile(r"_*(mm|bmm|addbmm|baddbmm|addmv|mv|dot|matmul|einsum|tensordot|linear|bilinear|"
                              r"conv.*|.*convolution.*|.*scaled_dot_product.*|.*attention.*)")

Weights = Callable[[Shape, Shape, int, "tuple[int, ...]"], int]


@dataclass(frozen=True)
class LayerKind:
    """One kind of layer: its name in the IR, the module classes and aten ops recognised as it,
    its cost group (a group name, or for a GEMM kind a function of the layer giving one of
    `GEMM_GROUPS`), its channel rule, and for a GEMM kind its arithmetic: `weights(inputs,
    output, groups, kernel)` the weight elements of a layer of those shapes (what a pruned
    variant's parameters are), `flops(layer, tile)` its forward multiply-adds x 2 with the
    output channels padded to `tile`."""

    name: str
    group: str | Callable[[Layer], str]
    modules: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()
    channels: str = FOLLOW
    weights: Weights | None = None
    flops: Callable[[Layer, int], int] | None = None

    @property
    def gemm(self) -> bool:
        """Whether the kind multiplies (its cost is its operations, in a GEMM group)."""
        return self.flops is not None

    def group_of(self, layer: Layer) -> str:
        """The cost group of `layer`, a layer of this kind."""
        return self.group(layer) if callable(self.group) else self.group

    def check(self) -> None:
        """NetworkError when the declaration is not one the features can count."""
        where = f"layer kind {self.name!r}"
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.name) or self.name == IDENTITY:
            raise NetworkError(f"{where}: a kind's name is lower-case letters, digits and '_' (not {IDENTITY})")
        if self.channels not in (OWN, FOLLOW, CONCAT):
            raise NetworkError(f"{where}: channels {self.channels!r} is not one of {OWN}, {FOLLOW}, {CONCAT}")
        if self.gemm:
            if not callable(self.group) and self.group not in GEMM_GROUPS:
                raise NetworkError(f"{where}: it multiplies (flops), so its group is one of {', '.join(GEMM_GROUPS)}")
        elif callable(self.group) or self.group not in MEMORY_BOUND_GROUPS[:-1]:
            raise NetworkError(f"{where}: without flops, its group is one of {', '.join(MEMORY_BOUND_GROUPS[:-1])}")
        if self.channels == OWN and (self.weights is None or not self.gemm):
            raise NetworkError(f"{where}: a kind with channels of its own declares its weights and flops")


_KINDS: dict[str, LayerKind] = {}
_BY_MODULE: dict[str, str] = {}
_BY_OP: dict[str, str] = {}


def register_layer_kind(kind: LayerKind, *, replace: bool = False) -> LayerKind:
    """Declare `kind` (checked), so that the trace recognises its modules and ops and the
    features, propagation and recordings count it; `replace` to change a declared one.
    Returns it."""
    kind.check()
    if kind.name in _KINDS and not replace:
        raise NetworkError(f"layer kind {kind.name!r} is declared already (replace=True to change it)")
    _KINDS[kind.name] = kind
    _BY_MODULE.update(dict.fromkeys(kind.modules, kind.name))
    _BY_OP.update(dict.fromkeys(kind.ops, kind.name))
    return kind


def layer_kind(name: str) -> LayerKind | None:
    """The declaration of the kind `name`; None for a kind no declaration holds."""
    return _KINDS.get(name)


def layer_kinds() -> dict[str, LayerKind]:
    """Every declared kind, by name."""
    return dict(_KINDS)


def module_kind_name(class_name: str) -> str:
    """The kind of a leaf module of class `class_name`: the kind listing it, else the name in
    snake_case."""
    return _BY_MODULE.get(class_name) or re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", class_name).lower()


def op_kind_name(op: str) -> str:
    """The kind of a functional call of the aten op `op` (its overload packet's name, a
    trailing underscore dropped): the kind listing it, else the name without leading
    underscores."""
    return _BY_OP.get(op) or op.lstrip("_")


def layer_group(layer: Layer) -> str:
    """The cost group of a layer: its kind's (`OTHER` for a kind no declaration holds)."""
    kind = _KINDS.get(layer.kind)
    return OTHER if kind is None else kind.group_of(layer)


def gemm_flops(layer: Layer, tile: int = 1) -> int:
    """Forward multiply-adds x 2 of a layer of a GEMM kind, output channels padded to `tile`."""
    kind = _KINDS.get(layer.kind)
    if kind is None or kind.flops is None:
        raise ValueError(f"layer '{layer.name}' of kind '{layer.kind}' does no GEMM")
    return kind.flops(layer, tile)


def does_work(name: str, params: int, op: str | None) -> str | None:
    """Why a layer of the undeclared kind `name` does work the features would miss (it holds
    `params` parameters, or calls the multiplying aten op `op`); None when it does not (or its
    kind is declared)."""
    if name in _KINDS:
        return None
    if params:
        return f"it holds {params} parameters"
    if op is not None and _MULTIPLYING_OPS.fullmatch(op):
        return f"it calls the aten op {op}, which multiplies"
    return None


# ---------------------------------------------------------------- the GEMM kinds' arithmetic

def _conv_group(layer: Layer) -> str:
    if layer.groups > 1:
        return CONV_DEPTHWISE if layer.depthwise else CONV_GROUPED
    return CONV_1X1 if tuple(layer.kernel) == (1, 1) else CONV_KXK


def _conv_weights(inputs: Shape, output: Shape, groups: int, kernel: tuple[int, ...]) -> int:
    return output[0] * (inputs[0] // groups) * math.prod(kernel)


def _conv_flops(layer: Layer, tile: int) -> int:
    c_in = layer.in_shape[0] // layer.groups
    c_out = -(-layer.output[0] // tile) * tile
    if layer.depthwise:
        return 2 * c_out * c_in * _valid_taps(layer)
    return 2 * c_out * c_in * math.prod(layer.kernel) * math.prod(layer.output[1:])


def _valid_taps(layer: Layer) -> int:
    """Kernel taps over the output that fall inside the input, not on its zero padding: a
    depthwise kernel computes those only (a 7x7 one on a 4x4 map, 37 % of its k*k*outputs)."""
    taps = 1
    for axis, (size, kernel, stride) in enumerate(zip(layer.in_shape[1:], layer.kernel, layer.stride)):
        taps *= _axis_taps(size, layer.output[1 + axis], kernel, stride, layer.padding[axis] if layer.padding else 0,
                           layer.dilation[axis] if layer.dilation else 1)
    return taps


@functools.lru_cache(maxsize=4096)
def _axis_taps(size: int, out: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    """`_valid_taps` along one axis; counted once per shape, since every feature table of every
    network (and pruned variant) asks again."""
    return sum(sum(1 for k in range(kernel) if 0 <= o * stride - pad + k * dilation < size) for o in range(out))


def _linear_weights(inputs: Shape, output: Shape, groups: int, kernel: tuple[int, ...]) -> int:
    return output[-1] * inputs[-1]


def _linear_flops(layer: Layer, tile: int) -> int:
    """A linear layer works on the last dimension."""
    c_out = -(-layer.output[-1] // tile) * tile
    return 2 * c_out * layer.in_shape[-1] * math.prod(layer.output[:-1])


def _matmul_flops(layer: Layer, tile: int) -> int:
    """A product of two activations: each output element sums over the first operand's last
    dimension (a vector's own length)."""
    c_out = -(-layer.output[-1] // tile) * tile if layer.output else 1
    return 2 * c_out * math.prod(layer.output[:-1]) * (layer.in_shape[-1] if layer.in_shape else 1)


def _attention_flops(layer: Layer, tile: int) -> int:
    """Scaled dot-product attention of queries (..., L, E) over keys (..., S, E) and values
    (..., S, Ev): the scores and the weighted values."""
    query, key = layer.inputs[0], layer.inputs[1] if len(layer.inputs) > 1 else layer.inputs[0]
    value_width = layer.output[-1] if layer.output else query[-1]
    return 2 * math.prod(query[:-1]) * key[-2] * (query[-1] + value_width)


def _memory_bound(group: str, *names: str, **recognised: tuple[str, ...]) -> None:
    """Declare `names`, kinds of `group`; `recognised[name]` lists module classes and ops
    (an entry `op:<aten op>` is an op) recognised as one of them."""
    for name in names:
        listed = recognised.get(name, ())
        register_layer_kind(LayerKind(
            name, group, modules=tuple(m for m in listed if not m.startswith("op:")),
            ops=tuple(m[3:] for m in listed if m.startswith("op:")), channels=CONCAT if name in ("cat",) else FOLLOW))


register_layer_kind(LayerKind(
    CONV2D, _conv_group, modules=("Conv2d",), ops=("convolution",), channels=OWN, weights=_conv_weights,
    flops=_conv_flops))
register_layer_kind(LayerKind(
    LINEAR, LINEAR_GROUP, modules=("Linear",), ops=("addmm",), channels=OWN, weights=_linear_weights,
    flops=_linear_flops))
register_layer_kind(LayerKind("matmul", LINEAR_GROUP, ops=("mm", "bmm", "matmul", "baddbmm"), flops=_matmul_flops))
register_layer_kind(LayerKind(
    "attention", LINEAR_GROUP, ops=("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
                                "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention"),
    flops=_attention_flops))
BATCH_NORM = "batch_norm"


def statistics_bytes(layers: Iterable[Layer], dtype_bytes: int) -> int:
    """The bytes of the BatchNorm layers' running mean and variance: the buffers that follow
    the channels."""
    return 2 * dtype_bytes * sum(layer.output[0] for layer in layers if layer.kind == BATCH_NORM)


_memory_bound(
    NORM, BATCH_NORM, "layer_norm", "layer_norm2d", "group_norm", "instance_norm", "local_response_norm",
    batch_norm=("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "op:native_batch_norm", "op:_native_batch_norm_legit",
                "op:_native_batch_norm_legit_functional"),
    layer_norm=("op:native_layer_norm",), group_norm=("op:native_group_norm",),
    local_response_norm=("LocalResponseNorm",))
_memory_bound(
    ACT, "relu", "relu6", "silu", "gelu", "elu", "prelu", "leaky_relu", "sigmoid", "tanh", "hardswish",
    "hardsigmoid", "mish", "softplus", "clamp",
    relu=("ReLU",), prelu=("PReLU",), gelu=("GELU",), elu=("ELU",), silu=("SiLU",),
    relu6=("ReLU6", "Hardtanh", "op:hardtanh"))
_memory_bound(
    POOL, "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d",
    max_pool2d=("MaxPool2d", "op:max_pool2d_with_indices"), avg_pool2d=("AvgPool2d",),
    adaptive_avg_pool2d=("AdaptiveAvgPool2d", "op:_adaptive_avg_pool2d"), adaptive_max_pool2d=("AdaptiveMaxPool2d",))
_memory_bound(
    ELEMENTWISE, "add", "mul", "sub", "div", "cat", "stack", "dropout", "mean", "sum", "flatten", "softmax",
    "log_softmax", "pad", "constant_pad_nd", "channel_shuffle", "permute", "stochastic_depth", "upsample_nearest2d",
    "upsample_bilinear2d", "unsafe_view",
    # a dropout called as a function: its mask, as the CPU and meta devices make it
    dropout=("op:native_dropout", "op:bernoulli"), softmax=("op:_safe_softmax",))
