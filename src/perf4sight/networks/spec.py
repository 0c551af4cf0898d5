"""Architecture specs: a pruned network as JSON, and the way back to a module.

A spec names a torchvision builder (or a user's model description file) and the output
channels of every Conv2d and hidden Linear; its `layers` record every Conv2d and Linear
with shapes, which is all the paper's features need, so a spec can be described without
building any module.

A spec is data from a file, so it is checked before anything uses it: its types, ranges
and convolution arithmetic when read (`read_spec`), and its layers against those of the
network it names when described (`spec_architecture`): no layer wider than in its base,
the base's kernels, strides, padding and grouping. A spec that could not be built is
refused before a prediction is made for it.
"""

from __future__ import annotations

import functools
import json
import os
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch_pruning as tp
from torch import nn

from perf4sight import console
from perf4sight.architecture import (
    Architecture,
    Layer,
    LayerShape,
    trace_architecture,
    with_layer_shapes,
    with_lifetimes,
)
from perf4sight.architecture.kinds import CONV2D, LINEAR, layer_kind, module_kind_name
from perf4sight.cache import cached_architecture, file_digest
from perf4sight.device.definitions import input_size_problem, is_positive_int, num_classes_problem
from perf4sight.device.recipe import DEFAULT_RECIPE, Recipe
from perf4sight.errors import NetworkError, clip
from perf4sight.files import read_json, write_text
from perf4sight.networks.model_file import build_from_file, split_model_source
from perf4sight.networks.trust import model_file_problem
from perf4sight.networks.registry import build_uninitialised, builder_arguments, call_builder, is_classification_builder

__all__ = [
    "read_spec",
    "write_spec",
    "build_from_spec",
    "architecture_from_spec",
    "spec_architecture",
    "torchvision_architecture",
    "spec_from_module",
    "spec_macs",
    "spec_text",
    "forget_base_traces",
]

SPEC_KEYS = ("name", "net", "torchvision", "num_classes", "input_size", "out_channels", "layers")


def read_spec(path: str | Path) -> dict[str, Any]:
    """Load and check a spec JSON; errors name the file and the key or layer that is wrong.

    Every reader indexes a spec without further checks, so its types are checked here,
    as is the agreement of `out_channels` (what a rebuild uses) with the `layers` table
    (what predictions use): a spec edited in one place only would otherwise predict for
    a network it does not describe.
    """
    spec = read_json(path, what="architecture spec", error=NetworkError)
    if not isinstance(spec, dict):
        raise NetworkError(f"{path}: a spec is a JSON object, not {type(spec).__name__}")
    missing = [k for k in SPEC_KEYS if k not in spec]
    if missing:
        raise NetworkError(f"{path}: spec lacks key '{missing[0]}'")
    problem = _spec_problem(spec)
    if problem is not None:
        raise NetworkError(f"{path}: {problem}")
    if spec.get("model_desc"):
        spec["model_desc"] = _resolve_model_desc(spec["model_desc"], Path(path).parent)
        problem = model_file_problem(split_model_source(spec["model_desc"])[0], Path(path).parent)
        if problem:
            raise NetworkError(f"{path}: {problem}")
    return spec


def _resolve_model_desc(model_desc: str, spec_dir: Path) -> str:
    """A relative `model_desc` is relative to the spec's folder, so that a folder of specs
    and their model files can be moved; a spec whose file is only found from the working
    directory (written before specs said so) keeps its path."""
    file, factory = split_model_source(model_desc)
    beside = Path(os.path.normpath(spec_dir / file))
    if file.is_absolute() or (not beside.exists() and file.exists()):
        return model_desc
    return str(beside) if factory is None else f"{beside}:{factory}"


def _relative_model_desc(model_desc: str, spec_dir: Path) -> str:
    """`model_desc` as written in a spec in `spec_dir`: relative to that folder."""
    file, factory = split_model_source(model_desc)
    relative = os.path.relpath(file.resolve(), spec_dir.resolve())
    return relative if factory is None else f"{relative}:{factory}"


def _ints(value: Any, length: int | None = None, *, low: int = 1) -> bool:
    """Whether `value` is a non-empty list of integers of at least `low` (of `length`, if given)."""
    if not isinstance(value, list) or not value or (length is not None and len(value) != length):
        return False
    return all(type(v) is int and v >= low for v in value)  # JSON's ints (a bool is no int here)


# A keyword argument's value in a spec: a plain number, flag or word of modest size (an
# architecture argument such as `aux_logits` or `width_mult`, never an object or a list).
_KWARG_LIMIT = 2**13


def _kwargs_problem(builder: str, kwargs: dict[str, Any]) -> str | None:
    """What is wrong with a spec's `torchvision_kwargs` for `builder`, or None."""
    allowed = builder_arguments(builder)
    for key, value in kwargs.items():
        if key not in allowed:
            return (f"torchvision_kwargs {clip(repr(key))} is not an architecture argument of {builder} "
                    f"(its arguments: {', '.join(sorted(allowed)) or 'none'})")
        plain = value is None or isinstance(value, (bool, str)) or (
            isinstance(value, (int, float)) and math.isfinite(value) and abs(value) <= _KWARG_LIMIT)
        if not plain or (isinstance(value, str) and len(value) > 64):
            return f"torchvision_kwargs '{key}': {clip(repr(value))} is not a plain number, flag or word"
    return None


def _spec_problem(spec: dict[str, Any]) -> str | None:
    """The first thing wrong with a spec's structure, or None."""
    for key in ("name", "net"):
        if not isinstance(spec[key], str) or not spec[key]:
            return f"{key} {clip(repr(spec[key]))} is not a name"
    for key in ("torchvision", "model_desc"):
        if not isinstance(spec.get(key), (str, type(None))):
            return f"{key} {clip(repr(spec[key]))} is not a name"
    if spec.get("torchvision") and not is_classification_builder(spec["torchvision"]):
        return f"torchvision {clip(repr(spec['torchvision']))} is not a torchvision classification network"
    kwargs = spec.get("torchvision_kwargs")
    if not isinstance(kwargs, (dict, type(None))):
        return f"torchvision_kwargs {clip(repr(kwargs))} is not an object of keyword arguments"
    if kwargs and not spec.get("torchvision"):
        return "torchvision_kwargs given without a torchvision network to pass them to"
    if kwargs and (problem := _kwargs_problem(spec["torchvision"], kwargs)):
        return problem
    if "params" in spec and not is_positive_int(spec["params"]):
        return f"params {clip(repr(spec['params']))} is not a positive integer"
    problem = num_classes_problem(spec["num_classes"]) or input_size_problem(spec["input_size"])
    if problem is not None:
        return problem
    out_channels = spec["out_channels"]
    if not isinstance(out_channels, dict):
        return "out_channels is not an object of layer names and output channels"
    for name, channels in out_channels.items():
        if not is_positive_int(channels):
            return f"out_channels '{clip(name)}': {clip(repr(channels))} is not a positive integer"
    if not isinstance(spec["layers"], list):
        return "layers is not a list of layer entries"
    recorded: set[str] = set()
    for k, entry in enumerate(spec["layers"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            return f"layers[{k}] is not an object with a 'name'"
        name = entry["name"]
        if entry.get("type") not in ("Conv2d", "Linear"):
            return f"layers entry '{clip(name)}': type {clip(repr(entry.get('type')))} is not 'Conv2d' or 'Linear'"
        problem = _layer_problem(entry)
        if problem is not None:
            return f"layers entry '{clip(name)}': {problem}"
        # The classifier is the one layer out_channels leaves out: its outputs are the classes.
        source = "out_channels" if name in out_channels else "num_classes"
        expected = out_channels[name] if name in out_channels else spec["num_classes"]
        if entry["out"][0] != expected:
            return f"layers entry '{clip(name)}' has {entry['out'][0]} output channels, {source} says {expected}"
        recorded.add(name)
    unrecorded = [name for name in out_channels if name not in recorded]
    if unrecorded:
        return f"out_channels '{clip(unrecorded[0])}' is not in the spec's layers"
    return None


# Each layer-table field: its length for a Conv2d (None: any) and a Linear, and its lowest value.
_LAYER_FIELDS = {
    "in": ((3, 1), 1), "out": ((3, 1), 1), "kernel": ((2, None), 1), "stride": ((2, None), 1),
    "padding": ((2, None), 0), "dilation": ((2, None), 1),
}
# Fields a Conv2d entry may leave out, and their values then.
_CONV_DEFAULTS = {"dilation": [1, 1]}


def _layer_problem(entry: dict[str, Any]) -> str | None:
    """What is wrong with one layer entry: a field's type or range, a grouping that does
    not divide its channels, an output size its convolution cannot produce; or None."""
    conv = entry["type"] == "Conv2d"
    for key, ((conv_length, linear_length), low) in _LAYER_FIELDS.items():
        length = conv_length if conv else linear_length
        if length is None:
            continue
        value = entry.get(key, _CONV_DEFAULTS.get(key)) if conv else entry.get(key)
        if not _ints(value, length, low=low):
            kind = "positive" if low else "non-negative"
            return f"{key} {clip(repr(value))} is not a list of {length} {kind} integers"
    if not isinstance(entry.get("bias", False), bool):
        return f"bias {clip(repr(entry['bias']))} is not true or false"
    groups = entry.get("groups", 1)
    if not is_positive_int(groups):
        return f"groups {clip(repr(groups))} is not a positive integer"
    if not conv:
        return None if groups == 1 else f"groups {groups}: a Linear layer is not grouped"
    if entry["in"][0] % groups or entry["out"][0] % groups:
        return f"groups {groups} does not divide its {entry['in'][0]} input and {entry['out'][0]} output channels"
    dilation = entry.get("dilation", _CONV_DEFAULTS["dilation"])
    size = [
        (extent + 2 * pad - dil * (kernel - 1) - 1) // stride + 1
        for extent, pad, dil, kernel, stride in zip(
            entry["in"][1:], entry["padding"], dilation, entry["kernel"], entry["stride"])
    ]
    if size != entry["out"][1:]:
        return (f"a {entry['kernel']} kernel with stride {entry['stride']} and padding {entry['padding']} "
                f"makes {entry['in'][1:]} into {size}, not {entry['out'][1:]}")
    return None


def architecture_from_spec(spec: dict[str, Any]) -> Architecture:
    """The spec's Conv2d and Linear layers as an (incomplete) Architecture, no module built."""
    layers = []
    for entry in spec["layers"]:
        kind = module_kind_name(entry["type"])
        conv = kind == CONV2D
        c_out = entry["out"][0]
        groups = entry.get("groups", 1)
        kernel = tuple(entry.get("kernel", ()))
        weights = layer_kind(kind).weights(tuple(entry["in"]), tuple(entry["out"]), groups, kernel)
        layers.append(
            Layer(
                name=entry["name"],
                kind=kind,
                inputs=(tuple(entry["in"]),),
                output=tuple(entry["out"]),
                params=weights + (c_out if entry.get("bias") else 0),
                kernel=kernel,
                stride=tuple(entry.get("stride", ())),
                padding=tuple(entry.get("padding", ())),
                dilation=tuple(entry.get("dilation", (1, 1) if conv else ())),
                groups=groups,
                bias=bool(entry.get("bias", False)),
            )
        )
    params = int(spec.get("params", sum(layer.params for layer in layers)))
    return Architecture(
        name=spec["name"],
        input_size=tuple(spec["input_size"]),
        num_classes=int(spec["num_classes"]),
        layers=tuple(layers),
        params=params,
        trainable_params=params,
        complete=False,
    )


def build_from_spec(spec: dict[str, Any], *, device: str | torch.device = "cpu") -> nn.Module:
    """Rebuild the pruned module: the base network with each layer cut to its channels.

    The base is the torchvision builder the spec names (or, for a user's own network, its
    `model_desc` file). The first channels of each layer are kept; torch-pruning's
    dependency graph makes the layers that depend on a pruned Conv2d or Linear
    (BatchNorm, next inputs, residual partners, concatenations, depthwise groups) follow.
    The pruning itself runs on the meta device (shapes only, fast); the result is then
    given fresh weights on `device`, so that building never holds the unpruned weights:
    a profiler measuring the build's memory sees the pruned network's alone.
    """
    model = _prune_on_meta(spec)
    if torch.device(device).type == "meta":
        return model
    model = model.to_empty(device=device)
    with torch.no_grad():
        for parameter in model.parameters():
            nn.init.normal_(parameter, std=0.01)  # weights of modules with no initialiser
        for module in model.modules():
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
    return model


def _prune_on_meta(spec: dict[str, Any]) -> nn.Module:
    device = "meta"
    model = _base_module(spec, device).eval()
    example = torch.zeros(1, *spec["input_size"], device=device)
    try:
        graph = tp.DependencyGraph().build_dependency(model, example_inputs=example, verbose=False)
    except Exception as exc:
        raise NetworkError(f"spec {spec['name']}: the base network cannot be traced: {type(exc).__name__}: {exc}") from exc
    modules = dict(model.named_modules())
    base_channels = {name: _out_channels(m) for name, m in modules.items() if isinstance(m, (nn.Conv2d, nn.Linear))}
    for name, channels in spec["out_channels"].items():
        layer = modules.get(name)
        if not isinstance(layer, (nn.Conv2d, nn.Linear)):
            raise NetworkError(f"spec {spec['name']}: layer '{name}' is not a Conv2d or Linear of {_base_name(spec)}")
        current = _out_channels(layer)
        if not isinstance(channels, int) or channels < 1 or channels > current:
            raise NetworkError(
                f"spec {spec['name']}: layer '{name}' cannot have {channels!r} output channels "
                f"(it has {current} after its coupled layers were cut; its base has {base_channels[name]})"
            )
        if channels == current:
            continue
        fn = tp.prune_conv_out_channels if isinstance(layer, nn.Conv2d) else tp.prune_linear_out_channels
        graph.get_pruning_group(layer, fn, list(range(channels, current))).prune()
    for name, channels in spec["out_channels"].items():
        if _out_channels(modules[name]) != channels:
            raise NetworkError(
                f"spec {spec['name']}: layer '{name}' ends with {_out_channels(modules[name])} output channels, "
                f"not {channels}: layers coupled to it were given other channel counts"
            )
    return model


def _out_channels(layer: nn.Module) -> int:
    return layer.out_channels if isinstance(layer, nn.Conv2d) else layer.out_features


def _base_name(spec: dict[str, Any]) -> str:
    return spec.get("torchvision") or spec.get("model_desc") or "its base"


def _base_module(spec: dict[str, Any], device: str | torch.device, *, initialise: bool = True) -> nn.Module:
    """The unpruned network a spec was cut from, built on `device` (on the CPU without
    initialising its weights, when `initialise` is False)."""
    num_classes = int(spec["num_classes"])
    if spec.get("torchvision"):
        if not is_classification_builder(spec["torchvision"]):
            raise NetworkError(f"spec {spec['name']}: unknown torchvision builder {clip(repr(spec['torchvision']))}")
        kwargs = dict(spec.get("torchvision_kwargs") or {})
        try:
            return call_builder(
                spec["torchvision"], kwargs, num_classes=num_classes, device=device, initialise=initialise
            )
        except Exception as exc:  # the builder's own refusal of its arguments, whatever its type
            raise NetworkError(f"spec {spec['name']}: {spec['torchvision']} cannot be built with "
                               f"{clip(json.dumps(kwargs))}: {type(exc).__name__}: {clip(str(exc))}") from None
    if spec.get("model_desc"):
        _announce(spec["model_desc"], spec["name"])
        factory = functools.partial(build_from_file, spec["model_desc"], num_classes=num_classes)
        return (factory() if initialise else build_uninitialised(factory)).to(device)
    raise NetworkError(f"spec {spec['name']}: names neither a torchvision builder nor a model_desc file")


@functools.lru_cache(maxsize=None)
def _announce(model_desc: str, name: str) -> None:
    """Say, once per file and spec, that a spec's model file runs: its code runs in this process."""
    console.info(f"running model file {split_model_source(model_desc)[0]} (spec {name}'s model_desc)")


def spec_from_module(
    module: nn.Module,
    *,
    name: str,
    net: str,
    prune_level: float,
    input_size: Sequence[int],
    num_classes: int,
    level_reached: float | None = None,
    torchvision_name: str | None = None,
    torchvision_kwargs: dict[str, Any] | None = None,
    model_desc: str | None = None,
) -> dict[str, Any]:
    """Describe a (pruned) module as a spec: the format of the TX2 dataset's `models/*.json`
(with `level_reached`, the share of parameters pruning removed, when given).

    `out_channels` lists every Conv2d and every Linear but the last (the classifier, whose
    outputs are the classes); `layers` every Conv2d and Linear in forward order with the
    per-sample shapes of one input of `input_size`.
    """
    arch = trace_architecture(module, input_size, name=name, num_classes=num_classes)
    modules = dict(module.named_modules())
    layers: list[dict[str, Any]] = []
    seen = set()
    for layer in arch.layers:
        if layer.name in seen or not isinstance(modules.get(layer.name), (nn.Conv2d, nn.Linear)):
            continue
        seen.add(layer.name)
        if isinstance(modules[layer.name], nn.Conv2d):
            layers.append({
                "name": layer.name, "type": "Conv2d", "in": list(layer.in_shape), "out": list(layer.output),
                "kernel": list(layer.kernel), "stride": list(layer.stride), "padding": list(layer.padding),
                "groups": layer.groups, "bias": layer.bias,
            })
        else:
            layers.append({
                "name": layer.name, "type": "Linear", "in": [layer.in_shape[-1]], "out": [layer.output[-1]],
                "bias": layer.bias,
            })
    classifier = layers[-1]["name"] if layers and layers[-1]["type"] == "Linear" else None
    spec: dict[str, Any] = {
        "name": name,
        "net": net,
        "prune_level": prune_level,
        **({"level_reached": float(level_reached)} if level_reached is not None else {}),
        "torchvision": torchvision_name,
        "torchvision_kwargs": dict(torchvision_kwargs or {}),
    }
    if model_desc is not None:
        spec["model_desc"] = model_desc
    spec.update({
        "num_classes": int(num_classes),
        "input_size": [int(s) for s in input_size],
        "params": int(arch.params),
        "out_channels": {
            entry["name"]: entry["out"][0] for entry in layers if entry["name"] != classifier
        },
        "layers": layers,
    })
    return spec


def spec_text(spec: dict[str, Any], path: str | Path) -> str:
    """The JSON of `spec` as written at `path`, in the TX2 files' layout (`model_desc`
    relative to the spec's folder)."""
    path = Path(path)
    if spec.get("model_desc"):
        spec = {**spec, "model_desc": _relative_model_desc(spec["model_desc"], path.parent)}
    return json.dumps(spec, indent=1) + "\n"


def write_spec(spec: dict[str, Any], path: str | Path) -> Path:
    """Write a spec as JSON (creating the folder), `spec_text`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, spec_text(spec, path))
    return path


def spec_macs(spec: dict[str, Any]) -> int:
    """Multiply-accumulates of one input through the spec's Conv2d and Linear layers."""
    total = 0
    for entry in spec["layers"]:
        c_in, c_out = entry["in"][0], entry["out"][0]
        if entry["type"] == "Conv2d":
            kh, kw = entry["kernel"]
            total += math.prod(entry["out"]) * (c_in // entry.get("groups", 1)) * kh * kw
        else:
            total += c_in * c_out
    return total


def spec_architecture(spec: dict[str, Any], *, lifetimes: tuple[str, ...] = (),
                      recipe: Recipe = DEFAULT_RECIPE) -> Architecture:
    """The complete architecture of a spec trained under `recipe`, without rebuilding it;
    with the tensor lifetimes of the stages in `lifetimes` when they can be scaled from its base's.

    The spec's base is traced (and its lifetimes recorded) once per process (cached); its
    layers' shapes and lifetimes are then propagated to the channel counts that the spec's
    `layers` record. Should a layer of the base have no channel rule, the spec is rebuilt
    from its `out_channels` and traced instead (without lifetimes); the rebuilt layers must
    then have the shapes the `layers` table records, or the prediction would be for another
    network than the one the spec describes.
    """
    template = _base_architecture(
        spec.get("torchvision"),
        json.dumps(spec.get("torchvision_kwargs", {}), sort_keys=True),
        spec.get("model_desc"),
        int(spec["num_classes"]),
        tuple(spec["input_size"]),
        lifetimes,
        recipe,
    )
    shapes = {
        entry["name"]: LayerShape(tuple(entry["in"]), tuple(entry["out"]), entry.get("groups", 1))
        for entry in spec["layers"]
    }
    _check_against_base(spec, template)
    try:
        return with_layer_shapes(template, shapes, name=spec["name"])
    except NetworkError:
        module = build_from_spec(spec, device="meta")
        arch = trace_architecture(module, spec["input_size"], name=spec["name"], num_classes=int(spec["num_classes"]),
                                  recipe=recipe)
    rebuilt: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    for layer in arch.layers:
        if layer.kind == CONV2D:
            rebuilt.setdefault(layer.name, (layer.in_shape, layer.output))
        elif layer.kind == LINEAR:  # the table records a Linear's features only
            rebuilt.setdefault(layer.name, ((layer.in_shape[-1],), (layer.output[-1],)))
    for entry in spec["layers"]:
        built = rebuilt.get(entry["name"])
        if built != (tuple(entry["in"]), tuple(entry["out"])):
            got = f"{list(built[0])} -> {list(built[1])}" if built else "no such layer"
            raise NetworkError(
                f"spec {spec['name']}: layer '{entry['name']}' is recorded as {entry['in']} -> {entry['out']}, "
                f"but the network its out_channels build has {got}"
            )
    return arch


def _check_against_base(spec: dict[str, Any], template: Architecture) -> None:
    """Refuse a spec layer that its base network cannot become by pruning channels: one the
    base lacks, one wider than in the base (pruning only removes channels), or one with
    another kernel, stride, padding, dilation or grouping."""
    base = {layer.name: layer for layer in template.of_kind(CONV2D, LINEAR)}
    for entry in spec["layers"]:
        layer = base.get(entry["name"])
        where = f"spec {spec['name']}: layer '{clip(entry['name'])}'"
        if layer is None:
            raise NetworkError(f"{where} is not a Conv2d or Linear of {_base_name(spec)}")
        if layer.kind != module_kind_name(entry["type"]):
            raise NetworkError(f"{where} is a {entry['type']}, in {_base_name(spec)} a {layer.kind}")
        conv = layer.kind == CONV2D
        for side, recorded, widest in (("input", entry["in"][0], layer.in_shape[0] if conv else layer.in_shape[-1]),
                                       ("output", entry["out"][0], layer.output[0] if conv else layer.output[-1])):
            if recorded > widest:
                raise NetworkError(f"{where} has {recorded} {side} channels, its base {_base_name(spec)} "
                                   f"{widest}: pruning cannot add channels")
        if not conv:
            continue
        recorded = {"kernel": entry["kernel"], "stride": entry["stride"], "padding": entry["padding"],
                    "dilation": entry.get("dilation", _CONV_DEFAULTS["dilation"])}
        for key, value in recorded.items():
            if tuple(value) != tuple(getattr(layer, key)):
                raise NetworkError(f"{where} has {key} {value}, in its base {_base_name(spec)} {list(getattr(layer, key))}")
        groups = entry.get("groups", 1)
        expected = entry["in"][0] if layer.depthwise else layer.groups  # depthwise: groups follow the channels
        if groups != expected:
            raise NetworkError(f"{where} has groups {groups}; pruned from {_base_name(spec)} it has {expected}")


def torchvision_architecture(
    builder: str, kwargs: dict[str, Any], *, num_classes: int, input_size: Sequence[int],
    lifetimes: tuple[str, ...] = (), recipe: Recipe = DEFAULT_RECIPE,
) -> Architecture:
    """The architecture of an unpruned torchvision network trained under `recipe` (with the
    tensor lifetimes of the stages in `lifetimes`), traced once per process and recipe and
    shared with the specs cut from it."""
    return _base_architecture(builder, json.dumps(kwargs, sort_keys=True), None, num_classes, tuple(input_size),
                              lifetimes, recipe)


def forget_base_traces() -> None:
    """Forget the base networks this process traced and recorded (`loader.forget_traces`)."""
    _base_architecture.cache_clear()


@functools.lru_cache(maxsize=32)
def _base_architecture(
    torchvision_name: str | None, kwargs_json: str, model_desc: str | None, num_classes: int,
    input_size: tuple[int, ...], lifetimes: tuple[str, ...] = (), recipe: Recipe = DEFAULT_RECIPE,
) -> Architecture:
    """A base network traced under `recipe`; with the tensor lifetimes of the stages in
    `lifetimes` recorded against that trace (the base built again on the meta device for
    each recording). Kept on disk too (`perf4sight.cache`), keyed by these arguments and a
    model file's bytes: a later process reads it back instead."""
    key = {"base": torchvision_name, "kwargs": json.loads(kwargs_json), "model_desc": model_desc,
           "num_classes": num_classes, "input_size": list(input_size), "lifetimes": list(lifetimes),
           "recipe": list(recipe)}
    make = functools.partial(_traced_base, torchvision_name, kwargs_json, model_desc, num_classes, input_size,
                             lifetimes, recipe)
    if model_desc is not None:
        path = split_model_source(model_desc)[0]
        if not path.is_file():  # the build says so
            return make()
        key["model_desc_bytes"] = file_digest(path)
    return cached_architecture(key, make)


def _traced_base(
    torchvision_name: str | None, kwargs_json: str, model_desc: str | None, num_classes: int,
    input_size: tuple[int, ...], lifetimes: tuple[str, ...], recipe: Recipe,
) -> Architecture:
    spec = {
        "name": torchvision_name or model_desc,
        "torchvision": torchvision_name,
        "torchvision_kwargs": json.loads(kwargs_json),
        "model_desc": model_desc,
        "num_classes": num_classes,
    }
    if lifetimes:
        traced = _base_architecture(torchvision_name, kwargs_json, model_desc, num_classes, input_size, (), recipe)
        return with_lifetimes(traced, functools.partial(_base_module, spec, "meta", initialise=False), lifetimes)
    module = _base_module(spec, "cpu", initialise=False)
    return trace_architecture(module, input_size, name=str(spec["name"]), num_classes=num_classes, recipe=recipe)
