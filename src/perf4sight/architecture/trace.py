"""Trace an `nn.Module` into an `Architecture`: shapes without compute.

One forward pass in training mode runs on an empty batch (zero samples, on the CPU, with
uninitialised weights: C++ shape checks only, no arithmetic) under a dispatch mode; a model
that cannot take an empty batch is traced on the meta device instead (no memory either,
but an order of magnitude slower, as meta kernels are largely Python). Leaf modules become layers with their own input and output shapes; aten
ops run by a container itself (a residual addition, a concatenation, a functional ReLU)
become layers of their own; pure views are skipped. Autograd's saved tensors are
attributed to the layer that saved them, each tensor counted once.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from perf4sight.architecture.autograd import COPIED_INPUT_OPS
from perf4sight.architecture.ir import Architecture, Layer
from perf4sight.architecture.kinds import CONV2D, IDENTITY, LINEAR, does_work, module_kind_name, op_kind_name
from perf4sight.console import warn
from perf4sight.device.backends import DEVICE_TYPES
from perf4sight.device.recipe import DEFAULT_RECIPE, PRECISIONS, Recipe
from perf4sight.device.workload import autocast, prepare_model, tensors_in
from perf4sight.device.workload import check_classes as check_model_classes
from perf4sight.errors import ModelFileError, NetworkError

__all__ = ["LayerWatch", "check_classes", "module_kind", "output_shape", "trace_architecture"]

# Batch sizes of the two tracing routes: zero samples on the CPU, else two on meta.
_EMPTY_BATCH = 0
_META_BATCH = 2

# Ops that neither compute nor allocate anything worth a layer.
_SKIP_OPS = {"detach", "empty", "zeros", "ones", "empty_like", "zeros_like", "ones_like",
             "copy", "clone", "_to_copy", "lift_fresh", "new_empty", "new_zeros", "fill"}


def module_kind(module: nn.Module) -> str:
    """The kind of a leaf module (`kinds.module_kind_name`); an empty `nn.Sequential` (a
    shortcut that passes its input on) is an identity, as `nn.Identity` is."""
    if isinstance(module, nn.Sequential) and not len(module):
        return IDENTITY
    return module_kind_name(type(module).__name__)


def _is_view(func: Any) -> bool:
    returns = func._schema.returns
    return bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write


def _per_sample(shape: Sequence[int], batch: int) -> tuple[int, ...]:
    shape = tuple(shape)  # a torch.Size holds ints already
    return shape[1:] if shape and shape[0] == batch else shape


@dataclass
class _Pending:
    """A layer being recorded: its module (or op) and what autograd saved inside it."""

    name: str
    kind: str
    module: nn.Module | None
    inputs: tuple[tuple[int, ...], ...] = ()
    output: tuple[int, ...] = ()
    inplace: bool = False
    sources: tuple[int, ...] = ()
    saved: list[tuple[tuple[int, ...], int]] = field(default_factory=list)
    saved_fixed_bytes: int = 0
    saved_param_bytes: int = 0
    saved_shared_bytes: int = 0
    saved_copy_bytes: int = 0
    grad_input: bool = False
    backward: bool = False
    element_bytes: int = 0
    first_op: int = 0  # the number of the first op it ran (`_Recorder.ops`)
    op: str | None = None  # a functional call's aten op


class _Recorder(TorchDispatchMode):
    """Records the layers of a forward pass: leaf modules by their hooks, functional ops
    outside them by their dispatch. Without `sources`, it notes no dataflow and holds no
    tensor (for a caller that watches tensors die)."""

    def __init__(self, modules: list[tuple[str, nn.Module]], batch: int, params: set[int], *,
                 sources: bool = True) -> None:
        super().__init__()
        self.batch = batch
        self.keep_sources = sources
        self.paused = False  # ops outside a watched forward pass are no layers
        self.names = {id(m): n for n, m in modules}
        self.leaves = {id(m) for _, m in modules if next(m.children(), None) is None}
        self.params = params
        self.ops = 0  # ops run that compute (not views, not copies), in order, where counted
        self.count_ops = False
        self.reset()

    def reset(self) -> None:
        """Forget the layers recorded: a new forward pass begins."""
        self.stack: list[nn.Module] = []
        self.layers: list[_Pending] = []
        # id -> (a saved tensor, the layer that saved it first)
        self.seen_saved: dict[int, tuple[torch.Tensor, _Pending | None]] = {}
        self.functional_counts: dict[str, int] = {}
        # id(tensor) -> index of the layer that produced it; the tensors are kept alive
        # so that ids stay unique while tracing.
        self.producer: dict[int, int] = {}
        self.alive: list[torch.Tensor] = []
        # autocast's copies of the parameters (id -> the copy, kept alive for the ids)
        self.param_casts: dict[int, torch.Tensor] = {}
        # the output of a clone just run, and autograd's copy of an in-place op's input
        # (the clone's output, saved before the op runs)
        self.cloned: torch.Tensor | None = None
        self.copy: torch.Tensor | None = None

    def _sources(self, tensors: list[torch.Tensor]) -> tuple[int, ...]:
        return tuple(self.producer.get(id(t), -1) for t in tensors)

    def _produce(self, tensors: list[torch.Tensor], index: int) -> None:
        if not self.keep_sources:
            return
        for t in tensors:
            self.producer[id(t)] = index
            self.alive.append(t)

    # module hooks -------------------------------------------------------------
    # They read tensors' properties outside any torch function mode: under the empty batch's
    # mode each read (requires_grad, element_size) would be dispatched through Python.
    def pre_hook(self, module: nn.Module, args: Any) -> None:
        with torch._C.DisableTorchFunction():
            self._enter(module, args)

    def post_hook(self, module: nn.Module, args: Any, output: Any) -> Any:
        with torch._C.DisableTorchFunction():
            return self._leave(module, args, output)

    def _enter(self, module: nn.Module, args: Any) -> None:
        self.stack.append(module)
        if id(module) in self.leaves:
            name = self.names.get(id(module), type(module).__name__)
            tensors = tensors_in(args)
            ins = tuple(_per_sample(t.shape, self.batch) for t in tensors)
            # an instance attribute (or a class one); getattr of a missing attribute is slow
            inplace = bool(module.__dict__.get("inplace", getattr(type(module), "inplace", False)))
            pending = _Pending(name, module_kind(module), module, ins, inplace=inplace, first_op=self.ops)
            pending.sources = self._sources(tensors)
            pending.grad_input = any(t.requires_grad for t in tensors)
            self.layers.append(pending)

    def _leave(self, module: nn.Module, args: Any, output: Any) -> Any:
        if self.stack and self.stack[-1] is module:
            self.stack.pop()
        if not self.layers or self.layers[-1].module is not module:
            return None
        pending = self.layers[-1]
        if self.batch == _EMPTY_BATCH:
            output = self._complete_empty_batch(pending, module, args, output)
        outs = tensors_in(output)
        if outs:
            pending.output = _per_sample(outs[0].shape, self.batch)
            pending.element_bytes = outs[0].element_size()
        pending.backward = any(t.requires_grad for t in outs)
        self._produce(outs, len(self.layers) - 1)
        return output

    def _complete_empty_batch(self, pending: _Pending, module: nn.Module, args: Any, output: Any) -> Any:
        """Two kernels skip their work for zero samples; record what they save otherwise.

        Dropout in training keeps a mask the size of its input where the input needs a
        gradient, and returns a new tensor (which the next layer may save); batch norm keeps each channel's mean and inverse
        standard deviation.
        """
        if isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0:
            inputs = tensors_in(args)
            if inputs and output is inputs[0]:
                if inputs[0].requires_grad:  # else autograd keeps nothing (a frozen prefix)
                    shape = _per_sample(inputs[0].shape, self.batch)
                    pending.saved.append((shape, math.prod(shape) * inputs[0].element_size()))
                return output.clone()
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and pending.inputs:
            pending.saved_fixed_bytes += 2 * pending.inputs[0][0] * torch.get_default_dtype().itemsize
        return output

    def _in_leaf(self) -> bool:
        return bool(self.stack) and id(self.stack[-1]) in self.leaves

    # saved tensors --------------------------------------------------------------
    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        base = tensor._base if tensor._base is not None else tensor
        if id(base) in self.params or id(tensor) in self.params:
            return tensor
        if base is self.cloned:  # autograd's copy of an in-place op's input: the op runs next
            self.cloned, self.copy = None, base
            return tensor
        self._save(base)
        return tensor

    def _save(self, base: torch.Tensor) -> None:
        if id(base) in self.seen_saved:
            if self.layers and self.seen_saved[id(base)][1] is not self.layers[-1] and base.dim() >= 2 \
                    and base.shape[0] == self.batch:
                self.layers[-1].saved_shared_bytes += math.prod(_per_sample(base.shape, self.batch)) * base.element_size()
            return
        self.seen_saved[id(base)] = (base, self.layers[-1] if self.layers else None)
        if id(base) in self.param_casts and self.layers:
            self.layers[-1].saved_param_bytes += base.numel() * base.element_size()
        elif self.layers:
            if base.dim() >= 2 and base.shape[0] == self.batch:
                shape = _per_sample(base.shape, self.batch)
                self.layers[-1].saved.append((shape, math.prod(shape) * base.element_size()))
            else:
                self.layers[-1].saved_fixed_bytes += base.numel() * base.element_size()

    def _save_copy(self, layer: _Pending, copy: torch.Tensor) -> None:
        """`copy`, of an input of `layer`'s in-place op, saved by it (`Layer.saved_copy_bytes`)."""
        if copy.dim() < 2 or copy.shape[0] != self.batch:
            self._save(copy)
            return
        self.seen_saved[id(copy)] = (copy, layer)
        shape = _per_sample(copy.shape, self.batch)
        layer.saved.append((shape, math.prod(shape) * copy.element_size()))
        layer.saved_copy_bytes += math.prod(shape) * copy.element_size()

    # aten ops ------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        copy, self.copy = self.copy, None
        self.cloned = out if func is _CLONE else None
        if copy is not None and (self.paused or func.overloadpacket.__name__ not in COPIED_INPUT_OPS):
            self._save(copy)  # a copy every PyTorch version makes
            copy = None
        if self.batch == _EMPTY_BATCH:
            _check_reshape(func, args, out)
        if func is _TO_COPY and args and id(args[0]) in self.params:
            self.param_casts[id(out)] = out
        if self._in_leaf() or self.paused:
            if copy is not None:
                self._save_copy(self.layers[-1], copy)
            self.ops += self.count_ops and _computes(func)
            return out
        op = func.overloadpacket.__name__
        tensors = tensors_in(args)
        outs = tensors_in(out)
        if not _computes(func):
            if tensors and id(tensors[0]) in self.producer:
                self._produce(outs, self.producer[id(tensors[0])])
            return out
        inplace = op.endswith("_")
        base = op.rstrip("_")
        kind = op_kind_name(base)
        parent = self.names.get(id(self.stack[-1]), "") if self.stack else ""
        count = self.functional_counts.get(parent + kind, 0)
        self.functional_counts[parent + kind] = count + 1
        name = f"{parent}.{kind}{count}" if parent else f"{kind}{count}"
        ins = tuple(_per_sample(t.shape, self.batch) for t in tensors)
        pending = _Pending(name, kind, None, ins, inplace=inplace, first_op=self.ops, op=base)
        self.ops += 1
        pending.sources = self._sources(tensors)
        pending.output = _per_sample(outs[0].shape, self.batch) if outs else ()
        pending.element_bytes = outs[0].element_size() if outs else 0
        # below autograd: an op's output needs a gradient where one of its inputs does
        pending.grad_input = pending.backward = any(t.requires_grad for t in tensors)
        self.layers.append(pending)
        if copy is not None:
            self._save_copy(pending, copy)
        self._produce(outs, len(self.layers) - 1)
        return out


_TO_COPY = torch.ops.aten._to_copy.default
_CLONE = torch.ops.aten.clone.default


def _computes(func: Any) -> bool:
    """Whether an op computes something worth a layer (not a view, a copy or a fill)."""
    return func.overloadpacket.__name__.rstrip("_") not in _SKIP_OPS and not _is_view(func)


# Reshapes: on an empty batch any shape is accepted, a wrong one included.
_RESHAPES = frozenset({"view", "_unsafe_view", "_reshape_alias", "reshape"})


class _EmptyBatchUnfaithful(Exception):
    """The empty batch ran what a real batch would not (or not the same way)."""


def _check_reshape(func: Any, args: Any, out: Any) -> None:
    """Stop an empty-batch pass at a reshape that keeps the batch dimension but not the
    elements of a sample: with samples it would fail (a window partition written for
    another image size), so the pass moves to the meta device, where it does."""
    if func.overloadpacket.__name__ not in _RESHAPES or not args:
        return
    source = args[0]
    if (isinstance(source, torch.Tensor) and isinstance(out, torch.Tensor) and source.dim() and out.dim()
            and source.shape[0] == out.shape[0] == 0 and math.prod(source.shape[1:]) != math.prod(out.shape[1:])):
        raise _EmptyBatchUnfaithful(f"reshape of {tuple(source.shape)} to {tuple(out.shape)}")


class _ReshapeCheck(TorchDispatchMode):
    """`_check_reshape` on every op of an empty-batch pass that is not recorded."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        _check_reshape(func, args, out)
        return out


# Dropout functions: given no samples they return their input untouched, saving no mask.
_DROPOUTS = frozenset({
    nn.functional.dropout, nn.functional.dropout1d, nn.functional.dropout2d, nn.functional.dropout3d,
    nn.functional.alpha_dropout, nn.functional.feature_alpha_dropout, torch.dropout, torch.feature_dropout,
    torch.alpha_dropout, torch.feature_alpha_dropout,
})
# Reshapes as the network's Python code calls them, with the sizes after the tensor.
_RESHAPE_CALLS = frozenset({torch.Tensor.view, torch.Tensor.reshape, torch.reshape})


def _inferring_reshape(func: Any, args: tuple, kwargs: dict) -> tuple[torch.Tensor, tuple] | None:
    """The tensor and the requested sizes of a reshape call on an empty batch that keeps the
    batch dimension and infers another (`x.view(x.size(0), -1)`), else None."""
    if func not in _RESHAPE_CALLS or not args or not isinstance(args[0], torch.Tensor):
        return None
    source = args[0]
    sizes = args[1:] or (kwargs.get("shape", kwargs.get("size", ())),)
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
        sizes = tuple(sizes[0])
    if (source.dim() and source.shape[0] == 0 and len(sizes) > 1 and sizes[0] == 0
            and all(isinstance(s, int) for s in sizes) and list(sizes).count(-1) == 1):
        return source, sizes
    return None


class _EmptyBatch(TorchFunctionMode):
    """What an empty batch cannot show as a real batch would.

    A reshape that keeps the batch dimension and infers another (`x.view(x.size(0), -1)`,
    common in hand-written models) is ambiguous for zero samples: the inferred size is
    given from a sample's elements, as samples would give it. A dropout called as a
    function (an `nn.Dropout` module is completed by the recorder) stops the trace, so
    that the network is traced on the meta device, where the mask is made and saved.
    """

    def __init__(self, recorder: _Recorder | None) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        request = _inferring_reshape(func, args, kwargs)
        if request is not None:
            source, sizes = request
            known = math.prod(s for s in sizes[1:] if s != -1)
            elements = math.prod(source.shape[1:])
            if known and elements % known == 0:
                return func(source, tuple(elements // known if s == -1 else s for s in sizes))
        if self.recorder is not None and func in _DROPOUTS and not self.recorder._in_leaf():
            tensors = tensors_in(args)
            if tensors and tensors[0].numel() == 0:
                raise _EmptyBatchUnfaithful(f"{func.__name__} called as a function")
        return func(*args, **kwargs)


def _conv_fields(module: nn.Module) -> dict[str, Any]:
    if isinstance(module, nn.modules.conv._ConvNd):
        return {
            "kernel": tuple(module.kernel_size),
            "stride": tuple(module.stride),
            "padding": tuple(module.padding) if not isinstance(module.padding, str) else (),
            "dilation": tuple(module.dilation),
            "groups": module.groups,
            "bias": module.bias is not None,
        }
    if isinstance(module, nn.Linear):
        return {"bias": module.bias is not None}
    if isinstance(module, (nn.MaxPool2d, nn.AvgPool2d)):
        pair = nn.modules.utils._pair
        return {"kernel": pair(module.kernel_size), "stride": pair(module.stride or module.kernel_size),
                "padding": pair(module.padding)}
    return {}


def check_classes(name: str, scores: int, num_classes: int) -> None:
    """The device's `check_classes`, refusing the network `name` as a NetworkError."""
    try:
        check_model_classes(scores, num_classes)
    except ModelFileError as exc:
        raise NetworkError(f"{name}: {exc} (a model file's factory is given num_classes only where it has that "
                           "parameter)") from None


def trace_architecture(
    model: nn.Module,
    input_size: Sequence[int],
    *,
    name: str = "",
    num_classes: int | None = None,
    recipe: Recipe = DEFAULT_RECIPE,
) -> Architecture:
    """Describe `model` for inputs of shape `input_size` (C, H, W), without computing,
    trained under `recipe`.

    The recipe is applied as the profiler applies it (`perf4sight.device.workload`): the
    layers `prepare_model` freezes are frozen, and the forward pass runs under the recipe's
    autocast, so what autograd saves has the bytes it has under them; the checkpoint
    segments' recomputed layers are observed on the model as `prepare_model` checkpoints
    it (`_checkpoint_segments`). The model's weights are neither read nor changed: the
    forward pass runs with empty stand-ins; its training mode, which parameters require
    gradients and its modules' forward methods are restored afterwards.
    """
    with _restored(model):
        prepare_model(model, recipe._replace(checkpoint_segments=0))
        named = list(model.named_modules())
        recorder, out, batch = _forward(model, named, input_size, record=True, name=name, recipe=recipe)
        segments = (_checkpoint_segments(model, named, input_size, recipe, recorder, batch)
                    if recipe.checkpoint_segments else {})
        modules = [m for _, m in named]
        parameters = _unique(modules, "_parameters")
        params = sum(p.numel() for p in parameters)
        trainable = sum(p.numel() for p in parameters if p.requires_grad)
        frozen = {id(m) for m in modules if any(not p.requires_grad for p in m._parameters.values() if p is not None)}
    buffers = sum(b.numel() * b.element_size() for b in _unique(modules, "_buffers"))
    outs = tensors_in(out)
    layers = []
    renumber = _layer_numbers(recorder.layers)
    default_bytes = torch.get_default_dtype().itemsize
    for index, p in enumerate(recorder.layers):
        if p.kind == IDENTITY:
            continue
        module = p.module
        # A saved tensor the size of an input (or of the output) scales with it when the
        # architecture is propagated for other channel counts.
        in_sizes = {math.prod(shape) for shape in p.inputs}
        saved_in = sum(b for shape, b in p.saved if math.prod(shape) in in_sizes)
        saved_out = sum(
            b for shape, b in p.saved
            if math.prod(shape) not in in_sizes and math.prod(shape) == math.prod(p.output)
        )
        owned = sum(t.numel() for t in module._parameters.values() if t is not None) if module is not None else 0
        work = does_work(p.kind, owned, p.op)
        if work is not None:
            raise NetworkError(
                f"network '{name or type(model).__name__.lower()}': layer '{p.name}' is of kind '{p.kind}', which no "
                f"declaration holds, and {work}: its cost would be missed; declare the kind with "
                "perf4sight.register_layer_kind (docs/architecture.md, 'Layer kinds')")
        layers.append(
            Layer(
                name=p.name,
                kind=p.kind,
                inputs=p.inputs,
                output=p.output,
                params=owned,
                inplace=p.inplace,
                saved_bytes=sum(b for _, b in p.saved),
                saved_input_bytes=saved_in,
                saved_output_bytes=saved_out,
                saved_fixed_bytes=p.saved_fixed_bytes,
                sources=tuple(renumber.get(s, -1) for s in p.sources),
                trained=id(module) not in frozen,
                grad_input=p.grad_input,
                backward=p.backward,
                segment=segments.get(index, 0),
                element_bytes=p.element_bytes or default_bytes,
                saved_param_bytes=p.saved_param_bytes,
                saved_shared_bytes=p.saved_shared_bytes,
                saved_copy_bytes=p.saved_copy_bytes,
                **(_conv_fields(module) if module is not None else {}),
            )
        )
    functional = [layer.name for layer in layers if layer.kind in (CONV2D, LINEAR)
                  and not layer.params and not layer.kernel]
    if functional:
        warn(f"network '{name or type(model).__name__.lower()}': {len(functional)} convolution or linear layer(s) "
             f"computed by a functional call (F.conv2d, F.linear), first '{functional[0]}': their kernel and "
             "weights are not described, so their arithmetic is undercounted; use nn.Conv2d and nn.Linear modules")
    scores = int(outs[0].shape[-1]) if outs and outs[0].dim() > 1 else None
    if num_classes is not None and scores is not None:
        check_classes(name or type(model).__name__.lower(), scores, num_classes)
    classes = num_classes if num_classes is not None else (scores or 0)
    return Architecture(
        name=name or type(model).__name__.lower(),
        input_size=tuple(int(s) for s in input_size),
        num_classes=classes,
        layers=tuple(layers),
        params=params,
        trainable_params=trainable,
        buffer_bytes=buffers,
        recipe=recipe,
    )


@contextlib.contextmanager
def _restored(model: nn.Module) -> Iterator[None]:
    """What applying a recipe changes in `model`, restored afterwards: which parameters
    require gradients, the modules' training modes and their forward methods (only what
    changed is set back: a module's __setattr__ costs more than its empty forward pass)."""
    modules = list(model.modules())
    grads = [(p, p.requires_grad) for m in modules for p in m._parameters.values() if p is not None]
    modes = [(m, m.training, m.__dict__.get("forward")) for m in modules]
    try:
        yield
    finally:
        for p, requires_grad in grads:
            if p.requires_grad != requires_grad:
                p.requires_grad_(requires_grad)
        for m, training, forward in modes:
            if m.training != training:
                m.training = training
            if m.__dict__.get("forward") is not forward:
                if forward is None:
                    del m.__dict__["forward"]
                else:
                    m.__dict__["forward"] = forward


def _traced_autocast(recipe: Recipe, device: str) -> contextlib.AbstractContextManager[Any]:
    """The recipe's autocast as the trace runs it on `device`: the CPU's (fp16, which the
    profiler runs on CUDA only, traced as the CPU's bf16: the same bytes, and both cast
    lists agree on a CNN's layers); none on the meta device, where autocast casts nothing."""
    if PRECISIONS[recipe.precision].autocast_dtype is None:
        return contextlib.nullcontext()
    if device != "cpu":
        warn(f"{recipe.precision}: a network that cannot take an empty batch is traced on the meta device, "
             "where autocast does not run; its activations are described in fp32")
        return contextlib.nullcontext()
    cpu = DEVICE_TYPES[device]
    if cpu.precision_problem(recipe.precision):
        width = PRECISIONS[recipe.precision].bytes_per_cast_value
        recipe = recipe._replace(precision=next(
            name for name, precision in PRECISIONS.items() if precision.autocast_dtype is not None
            and precision.bytes_per_cast_value == width and not cpu.precision_problem(name)))
    return autocast(recipe, device)


class _GradModes(TorchDispatchMode):
    """Per op that computes (`_computes`), whether gradients were on when it ran; and where
    a checkpoint segment ended: where autograd saved a tensor right after ops that ran
    without gradients (a reentrant checkpoint saves its input once its segment has run)."""

    def __init__(self) -> None:
        super().__init__()
        self.grad: list[bool] = []
        self.ends: set[int] = set()

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.grad and not self.grad[-1]:
            self.ends.add(len(self.grad))
        return tensor

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        if _computes(func):
            self.grad.append(torch.is_grad_enabled())
        return out


def _checkpoint_segments(model: nn.Module, named: list[tuple[str, nn.Module]], input_size: Sequence[int],
                         recipe: Recipe, recorder: _Recorder, batch: int) -> dict[int, int]:
    """The checkpoint segment (numbered from 1) of each recorded layer that `recipe`'s
    checkpointing recomputes: the model is checkpointed by `prepare_model` and its forward
    pass run again, as traced; a layer whose ops run without gradients runs in a segment."""
    modules = [m for _, m in named]
    device = "cpu" if batch == _EMPTY_BATCH else "meta"
    x = torch.empty((batch, *input_size), device=device)
    observer = _GradModes()
    empty = _EmptyBatch(None) if batch == _EMPTY_BATCH else contextlib.nullcontext()
    with _stand_ins(modules, device), _training_without_running_stats(modules), empty:
        prepare_model(model, recipe, x)
        with torch.autograd.graph.saved_tensors_hooks(observer.pack, lambda t: t), observer, \
                _traced_autocast(recipe, device):
            model(x)
    if len(observer.grad) != recorder.ops:
        raise NetworkError(f"{type(model).__name__.lower()}: its checkpointed forward pass runs other ops than "
                           "its forward pass; the recomputed layers cannot be told")
    # A run of ops without gradients that ends where the checkpoint saves its input is a
    # segment the backward recomputes (one whose input and parameters need no gradient
    # saves nothing and is not recomputed).
    segment_of_op = [0] * len(observer.grad)
    segment, start = 0, 0
    for op, grad in enumerate([*observer.grad, True]):
        if op in observer.ends:
            segment += 1
            segment_of_op[start:op] = [segment] * (op - start)
        if grad or op in observer.ends:
            start = op + grad
    found = {}
    for index, pending in enumerate(recorder.layers):
        op = pending.first_op
        following = recorder.layers[index + 1].first_op if index + 1 < len(recorder.layers) else recorder.ops
        op = op if following > op else op - 1  # a layer that ran no op of its own: the op before it
        if 0 <= op < len(segment_of_op) and segment_of_op[op]:
            found[index] = segment_of_op[op]
    return found


class LayerWatch:
    """Which layer of a module runs, numbered as `trace_architecture` numbers its layers, for
    a caller that attributes what happens in a forward pass to them (the tensor lifetimes).

    Enter it before the caller's own dispatch mode (so that an op outside the leaf modules
    is a layer by the time the caller sees its outputs); `layer()` is the index of the
    layer running, -1 outside the module's forward passes (every pass is numbered anew).
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.recorder = _Recorder(list(model.named_modules()), _META_BATCH, set(), sources=False)
        self.recorder.paused = True
        self.running = False
        self._counted = 0
        self._described = 0

    def layer(self) -> int:
        if not self.running:
            return -1
        layers = self.recorder.layers
        for p in layers[self._counted:]:
            self._described += p.kind != IDENTITY
        self._counted = len(layers)
        return self._described - 1 if layers and layers[-1].kind != IDENTITY else -1

    def _begin(self, module: nn.Module, args: Any) -> None:
        self.recorder.reset()
        self.running, self._counted, self._described = True, 0, 0
        self.recorder.paused = False

    def _end(self, module: nn.Module, args: Any, output: Any) -> None:
        self.running = False
        self.recorder.paused = True

    def _pre_hook(self, module: nn.Module, args: Any) -> None:
        if self.running and module is not self.model:
            self.recorder.pre_hook(module, args)

    def _post_hook(self, module: nn.Module, args: Any, output: Any) -> None:
        if self.running and module is not self.model:
            self.recorder.post_hook(module, args, output)

    def __enter__(self) -> LayerWatch:
        self._handles = [
            self.model.register_forward_pre_hook(self._begin),
            self.model.register_forward_hook(self._end),
            nn.modules.module.register_module_forward_pre_hook(self._pre_hook),
            nn.modules.module.register_module_forward_hook(self._post_hook),
        ]
        self.recorder.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.recorder.__exit__(*exc)
        for handle in self._handles:
            handle.remove()


def _layer_numbers(pending: list[_Pending]) -> dict[int, int]:
    """Each recorded layer's index among the described ones. Identity layers are dropped:
    they take their producer's number, so that their consumers take it as their source."""
    numbers: dict[int, int] = {-1: -1}
    described = 0
    for index, p in enumerate(pending):
        if p.kind == IDENTITY:
            numbers[index] = numbers.get(p.sources[0], -1) if p.sources else -1
        else:
            numbers[index] = described
            described += 1
    return numbers


def _unique(modules: list[nn.Module], table: str) -> list[torch.Tensor]:
    """The tensors in each module's `_parameters` or `_buffers`, a shared one once (as
    `parameters()` and `buffers()`, without walking the module tree again)."""
    return list({id(t): t for m in modules for t in getattr(m, table).values() if t is not None}.values())


def output_shape(model: nn.Module, input_size: Sequence[int], *, name: str = "") -> tuple[int, ...]:
    """The per-sample shape of `model`'s (first) output for inputs of `input_size`, found as
    a trace finds it: no copy of the model, no arithmetic, its weights untouched."""
    with torch.no_grad():
        _, out, batch = _forward(model, list(model.named_modules()), input_size, record=False, name=name)
    outs = tensors_in(out)
    if not outs:
        raise NetworkError(f"{name or type(model).__name__.lower()}: returns no tensor")
    return _per_sample(outs[0].shape, batch)


def _forward(
    model: nn.Module, named: list[tuple[str, nn.Module]], input_size: Sequence[int], *, record: bool, name: str,
    recipe: Recipe = DEFAULT_RECIPE,
) -> tuple[_Recorder | None, Any, int]:
    """The forward pass of `_run` on an empty CPU batch, else on the meta device; also
    returns the batch size it ran with. A network that runs on neither is a NetworkError
    naming it (`name`, else its class) and the input size."""
    try:
        return (*_run(model, named, input_size, device="cpu", batch=_EMPTY_BATCH, record=record, recipe=recipe),
                _EMPTY_BATCH)
    except Exception:  # noqa: BLE001 - e.g. a reduction over every element of no samples
        pass
    try:
        return (*_run(model, named, input_size, device="meta", batch=_META_BATCH, record=record, recipe=recipe),
                _META_BATCH)
    except Exception as exc:  # noqa: BLE001 - the network's own code: it cannot take these inputs
        raise NetworkError(f"{name or type(model).__name__.lower()}: does not run on inputs of size "
                           f"{list(input_size)}: {type(exc).__name__}: {exc}") from exc


def _run(
    model: nn.Module, named: list[tuple[str, nn.Module]], input_size: Sequence[int], *, device: str, batch: int,
    record: bool = True, recipe: Recipe = DEFAULT_RECIPE,
) -> tuple[_Recorder | None, Any]:
    """One training-mode forward pass of `model` with uninitialised stand-ins for its
    parameters and buffers (no copy of the model or of its tensors), recorded if `record`."""
    modules = [m for _, m in named]
    x = torch.empty((batch, *input_size), device=device)
    with _stand_ins(modules, device) as stand_ins, _training_without_running_stats(modules):
        if not record:
            if batch != _EMPTY_BATCH:
                return None, model(x)
            with _ReshapeCheck(), _EmptyBatch(None):
                return None, model(x)
        recorder = _Recorder(named, batch, params=stand_ins)
        recorder.count_ops = recipe.checkpoint_segments > 0  # to find the checkpointed layers
        handles = [
            nn.modules.module.register_module_forward_pre_hook(recorder.pre_hook),
            nn.modules.module.register_module_forward_hook(recorder.post_hook),
        ]
        empty = _EmptyBatch(recorder) if batch == _EMPTY_BATCH else contextlib.nullcontext()
        try:
            with torch.autograd.graph.saved_tensors_hooks(recorder.pack, lambda t: t), recorder, empty, \
                    _traced_autocast(recipe, device):
                out = model(x)
        finally:
            for handle in handles:
                handle.remove()
    return recorder, out


@contextlib.contextmanager
def _stand_ins(modules: list[nn.Module], device: str) -> Iterator[set[int]]:
    """Swap every parameter and buffer for an uninitialised tensor on `device` (a shared
    tensor for a shared one), restored afterwards; yields the stand-ins' ids.

    torch.empty rather than empty_like, which goes through Python for meta tensors; the
    module dicts directly rather than functional_call, whose bookkeeping costs a third of
    a trace.
    """
    made: dict[int, torch.Tensor] = {}
    swapped: list[tuple[dict[str, Any], str, Any]] = []
    for module in modules:
        for table in (module._parameters, module._buffers):
            for name, tensor in table.items():
                if tensor is None:
                    continue
                if id(tensor) not in made:
                    made[id(tensor)] = torch.empty(
                        tensor.shape, dtype=tensor.dtype, device=device,
                        requires_grad=isinstance(tensor, nn.Parameter) and tensor.requires_grad,
                    )
                swapped.append((table, name, tensor))
                table[name] = made[id(tensor)]
    try:
        yield {id(t) for t in made.values()}
    finally:
        for table, name, tensor in swapped:
            table[name] = tensor


@contextlib.contextmanager
def _training_without_running_stats(modules: list[nn.Module]) -> Iterator[None]:
    """Training mode with BatchNorm's running-statistics updates off, restored afterwards.

    The updates save nothing for backward but cost most of a meta forward pass (and an
    empty batch has no statistics); without them the shapes and saved tensors are the same.
    """
    # Only what differs is set: a module's __setattr__ costs more than its empty forward.
    evaluating = [m for m in modules if not m.training]
    norms = [m for m in modules if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    for m in evaluating:
        m.training = True
    for m in norms:
        m.track_running_stats = False
    try:
        yield
    finally:
        for m in norms:
            m.track_running_stats = True
        for m in evaluating:
            m.training = False
