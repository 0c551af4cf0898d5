"""Tensor lifetimes: what an iteration allocates and frees, in order.

How much memory a device's caching allocator holds depends on more than the largest
amount alive at once: on the order in which tensors of which sizes come and go, since a
freed block serves only requests that fit in it. That order is recorded by running the
profiler's own iterations (`perf4sight.device.workload.iteration`) on the meta device,
where nothing is allocated or computed, under a dispatch mode that notes each new storage
and the moment its last tensor dies. A saved-tensors hook keeps what autograd saves as
Python tensors, so that their lifetimes are seen too.

Two iterations are recorded: the first creates the optimizer's momentum buffers, the
second is what every later one repeats. Each allocation's size is an affine function of
the batch size (fixed bytes plus bytes per sample), so one recording serves every batch
size: it is made at a batch size of 2**32, where a size's quotient by the batch size is its
bytes per sample and the remainder its fixed bytes (the meta device allocates nothing, so
any batch size costs the same). Device-specific temporaries (cuDNN workspaces, cuBLAS
handles) are not seen: they are left to the fitted coefficients.

A recording also notes which layer of the network's trace each allocation belongs to and
which quantity of that layer (an output's or input's elements, channels, weights) its size
is a multiple of; a pruned variant, whose architecture is propagated from that trace, then
gets the same events with its own sizes (`resized`), without being built or run.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import hashlib
import math
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from perf4sight.architecture.autograd import COPIED_INPUT_OPS
from perf4sight.architecture.derived import derived_values
from perf4sight.architecture.ir import Architecture, Scaling, Timeline
from perf4sight.architecture.kinds import layer_kind, statistics_bytes
from perf4sight.architecture.trace import LayerWatch
from perf4sight.device.recipe import DEFAULT_RECIPE, PRECISIONS, Recipe
from perf4sight.device.workload import tensors_in
from perf4sight.errors import NetworkError

__all__ = ["ITERATIONS", "record_timeline", "recording_problem", "resized", "sibling_key", "with_lifetimes"]

# The first iteration creates the momentum buffers; the second is the steady state.
ITERATIONS = {"training": 2, "inference": 1}
# The batch size recorded: above any allocation's fixed bytes, so that a size splits into
# bytes per sample and fixed bytes; a size that does not split so is not affine in it.
_RECORDED_BS = 1 << 32
_MAX_BYTES_PER_SAMPLE = 1 << 30


# What an allocation's size can follow in a layer of the traced architecture (columns of
# `_quantities`): nothing, the output's elements per sample, its channels, the first
# input's channels, the weight's elements, and each input's elements per sample.
_ONE, _OUT, _OUT_CHANNELS, _IN_CHANNELS, _WEIGHT, _IN = range(6)
_MAX_INPUTS = 8
# Bytes per element an allocation may have (counts of a quantity that can be its size).
_ELEMENT_BYTES = (1, 2, 4, 8)
# Fixed allocations this small (scalars: a step count, a loss) follow nothing.
_SCALAR_BYTES = 8
# The order in which per-sample quantities are tried: a forward op makes its output, a
# backward one the gradients of its inputs (a 64 -> 64 convolution's are alike in the base,
# not in a variant).
_FORWARD_ORDER = (_OUT, *range(_IN, _IN + _MAX_INPUTS))
_BACKWARD_ORDER = (*range(_IN, _IN + _MAX_INPUTS), _OUT)
_FIXED_ORDER = (_WEIGHT, _OUT_CHANNELS, _IN_CHANNELS)


def _quantities(arch: Architecture) -> np.ndarray:
    """Per layer (and a last row for no layer), what an allocation's size may follow."""
    table = np.zeros((len(arch.layers) + 1, _IN + _MAX_INPUTS), dtype=np.int64)
    table[:, _ONE] = 1
    for row, layer in enumerate(arch.layers):
        out, first = layer.output, layer.in_shape
        table[row, _OUT] = math.prod(out)
        table[row, _OUT_CHANNELS] = out[0] if out else 1
        table[row, _IN_CHANNELS] = first[0] if first else 1
        kind = layer_kind(layer.kind)
        own = kind is not None and kind.weights is not None
        table[row, _WEIGHT] = kind.weights(first, out, layer.groups, layer.kernel) if own else layer.params
        for k, shape in enumerate(layer.inputs[:_MAX_INPUTS]):
            table[row, _IN + k] = math.prod(shape)
    return table


def _quantity(nbytes: int, row: np.ndarray, order: tuple[int, ...]) -> int | None:
    """The first quantity of `order` that `nbytes` is a whole number of elements of."""
    for column in order:
        amount = int(row[column])
        if amount and nbytes % amount == 0 and nbytes // amount in _ELEMENT_BYTES:
            return column
    return None


def resized(timeline: Timeline, template: Architecture, variant: Architecture) -> Timeline | None:
    """The timeline of `variant`, a network propagated from `template` (whose recorded
    timeline this is) to other channel counts: the same events, each size scaled with the
    quantity of its layer it follows. None when the timeline has no scaling or `variant`
    is not a propagation of `template` (other layers)."""
    scaling = timeline.scaling
    if scaling is None or [(l.name, l.kind) for l in template.layers] != [(l.name, l.kind) for l in variant.layers]:
        return None
    old, new = _quantities(template), _quantities(variant)
    rows = scaling.layer
    fixed = timeline.fixed_bytes // old[rows, scaling.fixed_quantity] * new[rows, scaling.fixed_quantity]
    per_sample = (timeline.per_sample_bytes // old[rows, scaling.per_sample_quantity]
                  * new[rows, scaling.per_sample_quantity])
    return Timeline(timeline.tensor, timeline.allocates, fixed, per_sample, scaling, timeline.copies)


# Argument values an op's outputs on the meta device may depend on, besides tensors' metadata.
_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)
_UNKNOWN = object()


def _signature(value: Any) -> Any:
    """What of an argument the meta kernels read (a tensor's metadata, a plain value), hashable;
    None where something else might matter."""
    if isinstance(value, torch.Tensor):
        if value.device.type != "meta":
            return None
        return value.shape, value.stride(), value.dtype, value.storage_offset()
    if isinstance(value, (list, tuple)):
        items = tuple(_signature(item) for item in value)
        return None if any(item is None for item in items) else items
    return (type(value), value) if isinstance(value, _PLAIN) else None


def _template(out: Any) -> Any:
    """How to make `out` again on the meta device: each tensor's shape, strides and dtype;
    None when an empty tensor of those would differ (a storage shared, offset or larger)."""
    tensors = [out] if isinstance(out, torch.Tensor) else list(out) if isinstance(out, (tuple, list)) else []
    if not tensors:
        return None
    specs, storages = [], set()
    for tensor in tensors:
        if tensor is None:
            specs.append(None)
            continue
        if type(tensor) is not torch.Tensor or tensor.storage_offset():
            return None
        storage = tensor.untyped_storage()
        spec = (tuple(tensor.shape), tensor.stride(), tensor.dtype)
        if storage._cdata in storages or _made(spec).untyped_storage().nbytes() != storage.nbytes():
            return None
        storages.add(storage._cdata)
        specs.append(spec)
    return (type(out) if not isinstance(out, torch.Tensor) else None), specs


def _made(spec: tuple) -> torch.Tensor:
    shape, stride, dtype = spec
    return torch.empty_strided(shape, stride, dtype=dtype, device="meta")


class _KnownOutputs(TorchDispatchMode):
    """An op's outputs on the meta device, made again where the same op ran on the same
    arguments before, without running its meta kernel (the bottom mode: the recorders
    above it see every op).

    A meta kernel computes only its outputs' shapes, strides and dtypes; many of PyTorch's
    are Python decompositions (batch norm's, forward and backward, took half of a
    recording), and an iteration repeats them: layers of the same shapes, and every op
    again in the second iteration. Ops that return new tensors are remembered (so that what
    they return is as new as it was), and pointwise in-place ops (the optimizer's updates, an
    in-place activation), which return their first argument as it was; not views.
    """

    def __init__(self) -> None:
        super().__init__()
        self._known: dict[Any, Any] = {}  # a fresh op's key -> how to make its outputs again
        self._ran_in_place: set[Any] = set()  # the keys of the in-place ops run once
        self._kinds: dict[Any, str | None] = {}

    def _kind(self, func: Any) -> str | None:
        """'fresh' (it returns new tensors), 'in_place' (pointwise, writing into and returning
        its first argument) or None (anything else: run every time)."""
        schema = func._schema
        returns = schema.returns
        if returns and all(r.alias_info is None for r in returns):
            return "fresh"
        first = schema.arguments[0].alias_info if schema.arguments else None
        if (torch.Tag.pointwise in func.tags and len(returns) == 1 and first is not None and first.is_write
                and returns[0].alias_info is not None and returns[0].alias_info.before_set == first.before_set):
            return "in_place"
        return None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        kind = self._kinds.get(func, _UNKNOWN)
        if kind is _UNKNOWN:
            kind = self._kinds[func] = self._kind(func)
        key = (func, _signature(args), _signature(tuple(sorted(kwargs.items())))) if kind else None
        if key is None or None in key:
            return func(*args, **kwargs)
        if kind == "in_place":
            if key in self._ran_in_place:
                return args[0]
            self._ran_in_place.add(key)
            return func(*args, **kwargs)
        template = self._known.get(key, _UNKNOWN)
        if template is _UNKNOWN:
            out = func(*args, **kwargs)
            template = self._known[key] = _template(out)
            return out
        if template is None:
            return func(*args, **kwargs)
        kind, specs = template
        made = [None if spec is None else _made(spec) for spec in specs]
        return made[0] if kind is None else kind(made)


class _Recorder(TorchDispatchMode):
    """Notes every new storage an op returns, and when the last tensor on it dies; with a
    `watch`, also the layer of the traced architecture each storage belongs to (-1: none)."""

    def __init__(self, watch: LayerWatch | None = None, owners: dict[int, int] | None = None) -> None:
        super().__init__()
        self.events: list[tuple[int, bool, int]] = []  # (storage number, allocates, bytes)
        self.layers: list[int] = []  # per event: the layer (-1 for a free)
        self.backward: list[bool] = []  # per event: allocated by a backward op
        self._live: dict[int, list[int]] = {}  # storage address -> [number, live tensors, layer]
        self._count = 0
        self.watch = watch
        self.owners = owners or {}  # id(parameter or buffer) -> layer
        self.phase = "state"  # state, forward, backward (layer: self.node_layer), optimizer
        self.node_layer = -1
        self._inherited = -1
        # autograd's copies of in-place ops' inputs that the device's PyTorch may not make
        # (`perf4sight.architecture.autograd`): storage numbers; the storage a clone just
        # made, and the number of the one saved right after it (the in-place op runs next)
        self.copies: set[int] = set()
        self._cloned: int | None = None
        self._copy: int | None = None

    def note(self, tensor: Any) -> None:
        if not isinstance(tensor, torch.Tensor):
            return
        storage = tensor.untyped_storage()
        key = storage._cdata
        entry = self._live.get(key)
        if entry is None:
            entry = self._live[key] = [self._count, 0, self._layer(tensor)]
            self.events.append((self._count, True, storage.nbytes()))
            self.layers.append(entry[2])
            self.backward.append(self.phase == "backward")
            self._count += 1
        entry[1] += 1
        weakref.finalize(tensor, self._dead, key)

    def _layer(self, tensor: torch.Tensor) -> int:
        if self.watch is None:
            return -1
        if self.phase == "state":
            return self.owners.get(id(tensor), -1)
        if self.watch.running:
            return self.watch.layer()
        if self.phase == "backward":
            return self.node_layer
        if self.phase == "optimizer":
            return self._inherited
        return -1

    def _dead(self, key: int) -> None:
        entry = self._live[key]
        entry[1] -= 1
        if entry[1] == 0:
            del self._live[key]
            self.events.append((entry[0], False, 0))
            self.layers.append(-1)
            self.backward.append(False)

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        """The saved-tensors hook: notes a clone's output saved before the next op runs."""
        if self._cloned is not None and tensor.untyped_storage()._cdata == self._cloned:
            self._copy = self._live[self._cloned][0]
        self._cloned = None
        return tensor

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if self.phase == "optimizer":
            # what the optimizer makes for a parameter belongs to that parameter's layer
            self._inherited = next((self._live[key][2] for key in _storages(args) if key in self._live), -1)
        out = func(*args, **(kwargs or {}))
        if self._copy is not None and func.overloadpacket.__name__ in COPIED_INPUT_OPS:
            self.copies.add(self._copy)
        self._copy = None
        seen: set[int] = set()
        for tensor in tensors_in(out):
            if id(tensor) not in seen:
                seen.add(id(tensor))
                self.note(tensor)
        self._cloned = out.untyped_storage()._cdata if func is _CLONE else None
        return out


_CLONE = torch.ops.aten.clone.default


def _storages(args: Any) -> list[int]:
    return [t.untyped_storage()._cdata for t in tensors_in(args)]


_MARK = "perf4sight_layer"


class _BackwardNodes(TorchFunctionMode):
    """Marks the autograd node of every op in a forward pass with the layer running it, so
    that the backward pass's allocations are attributed to that layer (a parameter's
    gradient accumulator to the parameter's layer)."""

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        recorder = self.recorder
        for tensor in tensors_in(out):
            node = tensor.grad_fn
            if node is not None and _MARK not in node.metadata:
                self._mark(node, recorder.watch.layer())
                for child, _ in node.next_functions:
                    variable = getattr(child, "variable", None)
                    if variable is not None and _MARK not in child.metadata:
                        self._mark(child, recorder.owners.get(id(variable), -1))
        return out

    def _mark(self, node: Any, layer: int) -> None:
        # in the node's own metadata: a set of nodes here would keep their graphs (and
        # the tensors they saved) alive
        node.metadata[_MARK] = layer

        def running(*_: Any) -> None:
            self.recorder.phase, self.recorder.node_layer = "backward", layer

        node.register_prehook(running)


def _record(module: torch.nn.Module, input_size: tuple[int, ...], num_classes: int, stage: str,
            batch_size: int, arch: Architecture | None = None, recipe: Recipe = DEFAULT_RECIPE) -> _Recording:
    """The events of `ITERATIONS[stage]` iterations at `batch_size`, the model's own tensors
    first; attributed to the layers of `arch` (the module's traced architecture) when given."""
    # Tensors die when their last reference goes; a garbage collection in the middle would
    # free whatever cycles hold at a moment that depends on the process's history. (No
    # collection first: older garbage holds none of the tensors recorded here, and a full
    # collection costs more than the recording in a large process.)
    gc.disable()
    try:
        return _run(module, input_size, num_classes, stage, batch_size, arch, recipe)
    finally:
        gc.enable()


def _run(module: torch.nn.Module, input_size: tuple[int, ...], num_classes: int, stage: str,
         batch_size: int, arch: Architecture | None, recipe: Recipe) -> _Recording:
    from perf4sight.device.workload import iteration

    with contextlib.ExitStack() as modes:
        modes.enter_context(_KnownOutputs())  # the bottom mode: the recorders see every op
        if arch is None:
            recorder = _Recorder()
        else:
            by_name: dict[str, int] = {}
            for index, layer in enumerate(arch.layers):
                by_name.setdefault(layer.name, index)
            owners = {id(t): by_name.get(name, -1) for name, m in module.named_modules()
                      for t in (*m._parameters.values(), *m._buffers.values()) if t is not None}
            watch = LayerWatch(module)
            recorder = _Recorder(watch, owners)
            modes.enter_context(watch)
            modes.enter_context(_BackwardNodes(recorder))
            modes.enter_context(_optimizer_phase(recorder))
        modes.enter_context(torch.autograd.graph.saved_tensors_hooks(recorder.pack, lambda t: t))
        modes.enter_context(recorder)
        # Moving the model to the device allocates its parameters and buffers in this order.
        module._apply(lambda t: (recorder.note(t), t)[1])
        recorder.phase = "forward"
        inputs = torch.randn(batch_size, *input_size, device="meta")
        step = iteration(module, stage, inputs, num_classes, recipe=recipe)
        for _ in range(ITERATIONS[stage]):
            step()
        del step, inputs
    # Copies: the model's tensors die later, and their finalizers would go on appending.
    return _Recording(list(recorder.events), list(recorder.layers), list(recorder.backward), set(recorder.copies))


@dataclass(frozen=True)
class _Recording:
    """What a recorder noted: (storage number, allocates, bytes) per event, with the layer
    each event belongs to and whether a backward op made it."""

    events: list[tuple[int, bool, int]]
    layers: list[int]
    backward: list[bool]
    copies: set[int]  # the storage numbers of autograd's version-dependent copies


@contextlib.contextmanager
def _optimizer_phase(recorder: _Recorder) -> Iterator[None]:
    """The recorder's phase is `optimizer` while an optimizer steps."""

    def begin(*_: Any) -> None:
        recorder.phase = "optimizer"

    def end(*_: Any) -> None:
        recorder.phase = "forward"

    handles = [register_optimizer_step_pre_hook(begin), register_optimizer_step_post_hook(end)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def recording_problem(recipe: Recipe) -> str | None:
    """Why the tensor lifetimes of an iteration under `recipe` cannot be recorded, or None."""
    if PRECISIONS[recipe.precision].autocast_dtype is not None:
        return (f"the tensor lifetimes (the replay's) cannot be recorded under {recipe.precision}: "
                "they are recorded on the meta device, where autocast does not run")
    return None


def record_timeline(build: Callable[[], torch.nn.Module], input_size: tuple[int, ...], num_classes: int,
                    stage: str, arch: Architecture | None = None, recipe: Recipe = DEFAULT_RECIPE) -> Timeline:
    """The timeline for `stage`, any batch size, of the network `build` makes on the meta
    device trained under `recipe` (`arch.recipe` when `arch` is given). With `arch`, the
    network's traced architecture, the timeline also says how its sizes follow the channels
    (`Timeline.scaling`), when every allocation of a layer follows one of the layer's
    quantities. Not under a checkpointing recipe, whose recomputations run outside the
    network's forward pass, where no layer is watched: its variants are recorded afresh.

    NetworkError under autocast: the meta device, where the iteration is recorded, has none."""
    recipe = arch.recipe if arch is not None else recipe
    problem = recording_problem(recipe)
    if problem is not None:
        raise NetworkError(problem)
    attributed = arch if not recipe.checkpoint_segments else None
    not_affine = ("tensor sizes are not affine in the batch size (or one sample's tensor exceeds 1 GiB); "
                  "the allocator replay cannot scale them")
    try:
        recording = _record(build().to("meta"), input_size, num_classes, stage, _RECORDED_BS, attributed, recipe)
    except RuntimeError as exc:  # a size that grows faster than the batch size overflows
        if "overflow" not in str(exc):
            raise
        raise NetworkError(not_affine) from exc
    sizes = np.array([size for *_, size in recording.events], dtype=np.int64)
    per_sample, fixed = np.divmod(sizes, _RECORDED_BS)
    if (per_sample >= _MAX_BYTES_PER_SAMPLE).any():
        raise NetworkError(not_affine)
    tensor = np.array([number for number, _, _ in recording.events], dtype=np.int64)
    allocates = np.array([allocates for _, allocates, _ in recording.events], dtype=bool)
    copies = allocates & np.isin(tensor, list(recording.copies))
    timeline = Timeline(tensor, allocates, fixed, per_sample, copies=copies)
    if attributed is None:
        return timeline
    scaling = _scaling(timeline, recording.layers, recording.backward, attributed)
    return Timeline(tensor, allocates, fixed, per_sample, scaling, copies)


def _scaling(timeline: Timeline, layers: list[int], backward: list[bool], template: Architecture) -> Scaling | None:
    """Which quantity of its layer each allocation's sizes follow; None when one of a
    layer's allocations follows none (its variants cannot be derived)."""
    table = _quantities(template)
    count = len(layers)
    fixed_quantity = np.full(count, _ONE, dtype=np.int64)
    per_sample_quantity = np.full(count, _ONE, dtype=np.int64)
    for event, (layer, in_backward) in enumerate(zip(layers, backward)):
        fixed, per_sample = int(timeline.fixed_bytes[event]), int(timeline.per_sample_bytes[event])
        if layer < 0 or not timeline.allocates[event]:
            continue
        row = table[layer]
        if per_sample:
            found = _quantity(per_sample, row, _BACKWARD_ORDER if in_backward else _FORWARD_ORDER)
            if found is None:
                return None
            per_sample_quantity[event] = found
        if fixed > _SCALAR_BYTES:
            found = _quantity(fixed, row, _FIXED_ORDER)
            if found is None:
                return None
            fixed_quantity[event] = found
    rows = np.array(layers, dtype=np.int64)
    rows[rows < 0] = len(template.layers)  # the last row of `_quantities`: nothing to follow
    return Scaling(rows, fixed_quantity, per_sample_quantity)


def with_lifetimes(arch: Architecture, build: Callable[[], torch.nn.Module], stages: Iterable[str]) -> Architecture:
    """`arch` holding the tensor lifetimes of `stages` too: those it holds (scaled from its
    base's by `with_layer_shapes`) are kept; those it lacks are scaled from the recording of a
    network this process recorded whose layers differ from `arch`'s in their widths alone (a
    model file's other pruning levels: `sibling_key`), else recorded from the network `build`
    makes (whose traced architecture `arch` is), as plain data."""
    missing = [stage for stage in dict.fromkeys(stages) if stage not in arch.lifetimes]
    if not missing:
        return arch
    key = sibling_key(arch)
    sibling = _RECORDED.get(key) if key is not None else None
    scaled = {stage: resized(sibling.lifetimes[stage], sibling, arch)
              for stage in missing if sibling is not None and stage in sibling.lifetimes}
    scaled = {stage: timeline for stage, timeline in scaled.items() if timeline is not None}
    recorded = {stage: record_timeline(build, arch.input_size, arch.num_classes, stage, arch)
                for stage in missing if stage not in scaled}
    arch = dataclasses.replace(arch, lifetimes={**arch.lifetimes, **scaled, **recorded})
    if recorded and key is not None:
        _RECORDED[key] = arch
        _RECORDED.move_to_end(key)
        while len(_RECORDED) > _SIBLINGS_KEPT:
            _RECORDED.popitem(last=False)
    return arch


# The architectures recorded in this process (the latest few), by `sibling_key`.
_RECORDED: collections.OrderedDict[str, Architecture] = collections.OrderedDict()
_SIBLINGS_KEPT = 32


def forget_recordings() -> None:
    """Forget what this process recorded, as a new process starts (to measure a cold start)."""
    _RECORDED.clear()


def sibling_key(arch: Architecture) -> str | None:
    """What an iteration's events depend on besides the layers' widths: the input size, the
    class count, the element size, the recipe and the buffers beside the normalisations'
    statistics, and per layer its name, kind, dataflow, geometry (kernel, stride, padding,
    dilation, grouping), output's spatial size and what the recipe does to it. Two
    architectures with one key make the same allocations in the same order, each size
    following the same quantity of its layer, so `resized` derives either's timeline from the
    other's. None where parameters lie outside the layers (a module's own `nn.Parameter`):
    their sizes follow no layer's widths. Found once per architecture object and kept with it."""
    if arch.params != sum(layer.params for layer in arch.layers):
        return None
    kept = derived_values(arch)
    if "sibling" not in kept:
        parts: list[Any] = [tuple(arch.input_size), arch.num_classes, arch.dtype_bytes, tuple(arch.recipe),
                            arch.buffer_bytes - statistics_bytes(arch.layers, arch.dtype_bytes)]
        for layer in arch.layers:
            grouping = "depthwise" if layer.depthwise else layer.groups
            parts.append((layer.name, layer.kind, layer.sources, layer.kernel, layer.stride, layer.padding,
                          layer.dilation, grouping, layer.bias, layer.inplace, layer.output[1:], layer.trained,
                          layer.grad_input, layer.backward, layer.segment, layer.element_bytes))
        kept["sibling"] = hashlib.sha256(repr(parts).encode()).hexdigest()[:16]
    return kept["sibling"]
