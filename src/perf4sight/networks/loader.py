"""The one network loader every stage uses.

A source is a torchvision name or alias, an architecture spec (`.json`), a model
description file (`.py`, or `file.py:factory`), or an `nn.Module`; a bare name that is
not torchvision's is looked for as `<model_desc_dir>/<name>.py`, then `<name>.json`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from perf4sight.architecture import Architecture, Detail, check_classes, output_shape, trace_architecture, with_lifetimes
from perf4sight.architecture.lifetimes import forget_recordings
from perf4sight.cache import cached_architecture, file_digest
from perf4sight.device.recipe import DEFAULT_RECIPE, Recipe, check_recipe
from perf4sight.device.models import spec_shape
from perf4sight.errors import NetworkError
from perf4sight.networks.checks import check_input_size, check_num_classes
from perf4sight.networks.model_file import build_from_file, is_model_file, split_model_source
from perf4sight.networks.registry import (
    DEFAULT_INPUT_SIZE,
    build_torchvision,
    build_uninitialised,
    default_input_size,
    is_torchvision_network,
    known_networks,
    resolve_network,
)
from perf4sight.networks.spec import (
    architecture_from_spec,
    build_from_spec,
    forget_base_traces,
    read_spec,
    spec_architecture,
    torchvision_architecture,
)

__all__ = ["LoadedNetwork", "forget_traces", "load_network", "load_architecture", "torchvision_shape"]

Source = str | Path | nn.Module


@dataclass(frozen=True)
class LoadedNetwork:
    """A network ready to run: the module, the input size (C, H, W) it is meant for, and
    its spec when it came from one."""

    module: nn.Module
    input_size: tuple[int, int, int]
    num_classes: int
    name: str
    spec: dict[str, Any] | None = None


def load_network(
    source: Source,
    *,
    input_size: Sequence[int] | None = None,
    num_classes: int | None = None,
    model_desc_dir: str | Path | None = None,
) -> LoadedNetwork:
    """Load a network on the CPU; `input_size` and `num_classes` override the source's own."""
    return _load(source, input_size=input_size, num_classes=num_classes, model_desc_dir=model_desc_dir, device="cpu")


def load_architecture(
    source: Source,
    *,
    input_size: Sequence[int] | None = None,
    num_classes: int | None = None,
    model_desc_dir: str | Path | None = None,
    needs: Detail = Detail.LAYERS,
    stage: str = "training",
    recipe: Recipe = DEFAULT_RECIPE,
) -> Architecture:
    """The architecture of a network trained under `recipe` (`Architecture.recipe`; the
    default: the original's training), holding at least what `needs` says (with
    `Detail.LIFETIMES`, the tensor lifetimes of `stage`); torchvision networks and model
    files are built without initialising their weights, specs on the meta device.
    A recipe that cannot train the network (a layer name it lacks, more checkpoint
    segments than it has blocks) is an ArgumentError naming it.

    A spec at its own input size and class count is not rebuilt at all: its layer table
    suffices for `Detail.LAYER_TABLE`; else its base network is traced (and its lifetimes
    recorded) once per process and re-propagated to the spec's channel counts, in a
    millisecond. A torchvision network is traced once per process too (for each input
    size and class count), sharing its recording with the specs cut from it, and a model file
    once per process for its bytes. Those traces and recordings, and a model file's, are kept on
    disk (`perf4sight.cache`) for later processes; a model file whose layers differ from one
    recorded in this process in their widths alone (another pruning level of it) gets that
    recording scaled (`with_lifetimes`).
    """
    check_num_classes(num_classes)
    check_recipe(recipe)
    stages = (stage,) if needs is Detail.LIFETIMES else ()
    spec = read_spec(source) if not isinstance(source, nn.Module) and str(source).endswith(".json") else None
    if spec is not None and _at_own_size(spec, input_size, num_classes):
        if needs is Detail.LAYER_TABLE:  # a layer table describes no recipe's effects
            return dataclasses.replace(architecture_from_spec(spec), recipe=recipe)
        arch = spec_architecture(spec, lifetimes=stages, recipe=recipe)
        build = functools.partial(build_from_spec, spec, device="meta")
    elif spec is None and not isinstance(source, nn.Module) and is_torchvision_network(str(source)):
        name = str(source)
        network_builder, kwargs = resolve_network(name)
        size, classes = torchvision_shape(name, input_size, num_classes)
        try:
            arch = torchvision_architecture(network_builder, kwargs, num_classes=classes, input_size=size,
                                            lifetimes=stages, recipe=recipe)
        except NetworkError as exc:  # say the name the user gave, not the builder's
            text = str(exc)
            text = text[len(network_builder) + 1:].lstrip() if text.startswith(f"{network_builder}:") else text
            raise NetworkError(f"{name}: {text}") from exc
        return dataclasses.replace(arch, name=name)
    else:
        key = _model_file_key(source, input_size, num_classes, stages, recipe) if spec is None else None
        if key is not None:
            return _model_file_architecture(json.dumps(key, sort_keys=True), str(source),
                                            None if input_size is None else tuple(input_size), num_classes,
                                            None if model_desc_dir is None else str(model_desc_dir), stages, recipe)
        return _traced(source, spec, input_size, num_classes, model_desc_dir, stages, recipe)
    return with_lifetimes(arch, build, stages)


@functools.lru_cache(maxsize=32)
def _model_file_architecture(key: str, source: str, input_size: tuple[int, ...] | None, num_classes: int | None,
                             model_desc_dir: str | None, stages: tuple[str, ...], recipe: Recipe) -> Architecture:
    """A model file traced (with the lifetimes of `stages`) once per process for each `key`
    (`_model_file_key`: its bytes and the options, as JSON), and kept on disk under it."""
    make = functools.partial(_traced, source, None, input_size, num_classes, model_desc_dir, stages, recipe)
    return cached_architecture(json.loads(key), make)


def forget_traces() -> None:
    """Forget the networks this process traced and recorded, as a new process starts (to
    measure or test a cold start); the disk cache stays."""
    forget_base_traces()
    _model_file_architecture.cache_clear()
    forget_recordings()


def _traced(source: Source, spec: dict[str, Any] | None, input_size: Sequence[int] | None,
            num_classes: int | None, model_desc_dir: str | Path | None, stages: tuple[str, ...],
            recipe: Recipe) -> Architecture:
    """The network of `source` (or of `spec` at another size) traced, with the lifetimes of `stages`."""
    # The trace finds the classes itself: no separate forward pass for them.
    load = functools.partial(_from_spec, spec, input_size, num_classes, "meta") if spec is not None else \
        functools.partial(_load, source, input_size=input_size, num_classes=num_classes,
                          model_desc_dir=model_desc_dir, device="cpu", initialise=False, find_classes=False)
    loaded = load()
    arch = trace_architecture(loaded.module, loaded.input_size, name=loaded.name, num_classes=loaded.num_classes,
                              recipe=recipe)
    # a module given as the source is copied, so that it keeps its weights when the
    # copy moves to the meta device
    build = (functools.partial(copy.deepcopy, source) if isinstance(source, nn.Module)
             else lambda: load().module)
    return with_lifetimes(arch, build, stages)


def torchvision_shape(name: str, input_size: Sequence[int] | None,
                      num_classes: int | None) -> tuple[tuple[int, int, int], int]:
    """The input size (checked) and classes a torchvision network `name` is loaded at: those
    given, else the size it is built for and 1000 classes."""
    size = check_input_size(input_size if input_size is not None else default_input_size(name))
    return size, num_classes if num_classes is not None else 1000


def _model_file_key(source: Source, input_size: Sequence[int] | None, num_classes: int | None,
                    stages: tuple[str, ...], recipe: Recipe) -> dict[str, Any] | None:
    """What determines a model file's traced architecture (`perf4sight.cache`): its bytes, its
    factory and name, the spec written beside it (which gives its size) and the options;
    None for any other source, or a file that is not there (its load says so)."""
    if isinstance(source, nn.Module) or not is_model_file(str(source)):
        return None
    path, factory = split_model_source(str(source))
    if not path.is_file():
        return None
    beside = path.with_suffix(".json")
    return {"model_file": file_digest(path), "factory": factory, "name": path.stem,
            "beside": file_digest(beside) if beside.is_file() else None,
            "input_size": None if input_size is None else list(input_size), "num_classes": num_classes,
            "lifetimes": list(stages), "recipe": list(recipe)}


def _at_own_size(spec: dict[str, Any], input_size: Sequence[int] | None, num_classes: int | None) -> bool:
    """Whether a spec is asked for at the input size and class count it records."""
    return ((input_size is None or tuple(input_size) == tuple(spec["input_size"]))
            and (num_classes is None or num_classes == int(spec["num_classes"])))


def _load(
    source: Source,
    *,
    input_size: Sequence[int] | None,
    num_classes: int | None,
    model_desc_dir: str | Path | None,
    device: str,
    initialise: bool = True,
    find_classes: bool = True,
) -> LoadedNetwork:
    """The network of `source`; without `find_classes`, a module's classes may stay None,
    and without `initialise` its weights may be anything (for the caller that traces the
    module anyway)."""
    check_num_classes(num_classes)
    if isinstance(source, nn.Module):
        return _finish(source, type(source).__name__.lower(), input_size, num_classes, find_classes)
    text = str(source)
    if text.endswith(".json"):
        return _from_spec(read_spec(text), input_size, num_classes, device if initialise else "meta")
    if is_model_file(text):
        path = split_model_source(text)[0]
        beside = spec_shape(path.with_suffix(".json"))  # a file written with its spec is for the spec's size
        if beside is not None:
            input_size = input_size if input_size is not None else beside[0]
            num_classes = num_classes if num_classes is not None else beside[1]
        factory = functools.partial(build_from_file, text, num_classes=num_classes)
        module = factory() if initialise else build_uninitialised(factory)
        name = path.stem
        # a factory may not take (or may ignore) the classes: found, they are checked
        loaded = _finish(module, name, input_size, None if find_classes else num_classes, find_classes)
        if num_classes is not None and find_classes:
            check_classes(name, loaded.num_classes, num_classes)
        return loaded
    if is_torchvision_network(text):
        size, classes = torchvision_shape(text, input_size, num_classes)
        module = build_torchvision(text, num_classes=classes, device=device)
        return _finish(module, text, size, classes, find_classes)
    if model_desc_dir is not None:
        for candidate in (Path(model_desc_dir) / f"{text}.py", Path(model_desc_dir) / f"{text}.json"):
            if candidate.is_file():
                return _load(
                    candidate, input_size=input_size, num_classes=num_classes, model_desc_dir=None,
                    device=device, initialise=initialise, find_classes=find_classes,
                )
    if re.search(r"[/\\]|\.[A-Za-z]\w*$", text):  # a path: no name's list helps
        raise NetworkError(f"network '{text}': neither a spec (.json) nor a model file (.py, .py:factory) that builds "
                           "it; saved modules (.pt, .pth) are pickles, which perf4sight does not load")
    where = f" (nor {text}.py or {text}.json in {model_desc_dir})" if model_desc_dir is not None else ""
    raise NetworkError(f"unknown network '{text}'{where}; known networks: {', '.join(known_networks())}")


def _from_spec(
    spec: dict[str, Any], input_size: Sequence[int] | None, num_classes: int | None, device: str
) -> LoadedNetwork:
    if num_classes is not None and num_classes != int(spec["num_classes"]):
        raise NetworkError(f"spec {spec['name']} is for {spec['num_classes']} classes, not {num_classes}")
    module = build_from_spec(spec, device=device)
    size = check_input_size(input_size if input_size is not None else spec["input_size"])
    return LoadedNetwork(module, size, int(spec["num_classes"]), spec["name"], spec)


def _finish(
    module: nn.Module, name: str, input_size: Sequence[int] | None, num_classes: int | None, find_classes: bool
) -> LoadedNetwork:
    """Fill in the input size (224x224 by default) and the classes the module outputs."""
    size = check_input_size(input_size if input_size is not None else DEFAULT_INPUT_SIZE)
    if num_classes is None and find_classes:
        num_classes = _output_classes(module, size, name)
    return LoadedNetwork(module, size, num_classes, name)  # type: ignore[arg-type]


def _output_classes(module: nn.Module, input_size: tuple[int, int, int], name: str) -> int:
    """The length of the module's output for one input, found without computing."""
    shape = output_shape(module, input_size, name=name)
    if not shape:
        raise NetworkError(f"{name}: returns one number per input, not a score per class")
    return shape[-1]

