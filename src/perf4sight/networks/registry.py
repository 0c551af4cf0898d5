"""Torchvision classification networks by name, with the original tool's short names.

The builders are looked up in `torchvision.models` when asked for, never at import: importing
torchvision loads `torch._dynamo` too, more than a second, and a query of a network the disk
cache holds needs it for nothing (its builders' names and arguments are kept there too). A few
builders need arguments to be buildable without weights and prunable as one graph.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from perf4sight.cache import cached_value
from perf4sight.errors import NetworkError

__all__ = [
    "NETWORK_ALIASES",
    "BUILDER_KWARGS",
    "DEFAULT_INPUT_SIZE",
    "known_networks",
    "resolve_network",
    "is_torchvision_network",
    "is_classification_builder",
    "builder_arguments",
    "build_on_meta",
    "build_uninitialised",
    "call_builder",
    "build_torchvision",
    "default_input_size",
]

# The original perf4sight's short names.
NETWORK_ALIASES: dict[str, str] = {
    "mobilenetv2": "mobilenet_v2",
    "mnasnet": "mnasnet1_0",
    "squeezenet": "squeezenet1_0",
}
# Without auxiliary heads the network has one output (the one that is trained and pruned);
# without weight initialisation it builds fast, and the weights are not what is measured.
BUILDER_KWARGS: dict[str, dict[str, Any]] = {
    "googlenet": {"aux_logits": False, "init_weights": False},
    "inception_v3": {"aux_logits": False, "init_weights": False},
}
DEFAULT_INPUT_SIZE: tuple[int, int, int] = (3, 224, 224)
_INPUT_SIZES: dict[str, tuple[int, int, int]] = {"inception_v3": (3, 299, 299)}


def _models() -> types.ModuleType:
    """`torchvision.models`, imported on first use."""
    import torchvision.models

    return torchvision.models


@functools.cache
def _catalogue() -> dict[str, list[str]]:
    """Each torchvision classification builder with its architecture arguments
    (`builder_arguments`): kept in the disk cache, which keys it by torchvision's version, so
    that checking a name or a spec imports no torchvision once a process has listed them."""
    return cached_value({"catalogue": "torchvision classification builders"}, _list_builders)


def _list_builders() -> dict[str, list[str]]:
    models = _models()
    return {name: sorted(_plain_arguments(models.get_model_builder(name)))
            for name in models.list_models(module=models)}


def known_networks() -> list[str]:
    """Every accepted network name: torchvision classification builders plus aliases."""
    return sorted([*_catalogue(), *NETWORK_ALIASES])


def is_classification_builder(name: str) -> bool:
    """True when `name` (no alias) is a torchvision classification builder: not any other
    attribute of `torchvision.models` (`list_models`, a detection builder, `__loader__`)."""
    return name in _catalogue()


def is_torchvision_network(name: str) -> bool:
    """True when `name` (or its alias) names a torchvision classification builder. A builder's
    name is a Python identifier: a path (a spec, a model file) is told apart without listing
    the builders, which, with the cache off or empty, imports torchvision (over a second)."""
    return name.isidentifier() and is_classification_builder(NETWORK_ALIASES.get(name, name))


def resolve_network(name: str) -> tuple[str, dict[str, Any]]:
    """The torchvision builder name and keyword arguments for a network name or alias."""
    builder = NETWORK_ALIASES.get(name, name)
    if not is_torchvision_network(builder):
        raise NetworkError(f"unknown network '{name}'; known networks: {', '.join(known_networks())}")
    return builder, dict(BUILDER_KWARGS.get(builder, {}))


_PLAIN = (bool, int, float, str, type(None))


def _is_plain(parameter: inspect.Parameter, hints: dict[str, Any]) -> bool:
    """Whether an argument takes a plain number, flag or word (by its annotation, else its
    default): not a block class, a norm layer or a list of stage settings."""
    hint = hints.get(parameter.name)
    if hint is not None:
        options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, getattr(types, "UnionType", ())) \
            else (hint,)
        return all(option in _PLAIN for option in options)
    return parameter.default is not inspect.Parameter.empty and isinstance(parameter.default, _PLAIN[:-1])


def builder_arguments(builder: str) -> frozenset[str]:
    """The architecture arguments a classification builder passes to its network's class
    that take a plain value (`aux_logits`, `width_mult`, `dropout`, ...): those a spec's
    `torchvision_kwargs` may set; not `weights` (nothing is downloaded), `progress`, nor
    `num_classes` (the spec's own key)."""
    return frozenset(_catalogue().get(builder, ()))


def _plain_arguments(function: Callable[..., nn.Module]) -> set[str]:
    """`builder_arguments` of the builder `function`, read from its network class's signature."""
    network_class = typing.get_type_hints(function).get("return")
    names = set()
    if isinstance(network_class, type):
        hints = typing.get_type_hints(network_class.__init__)
        names = {name for name, parameter in inspect.signature(network_class.__init__).parameters.items()
                 if name != "self" and _is_plain(parameter, hints)}
    return names - {"num_classes"}


def default_input_size(name: str) -> tuple[int, int, int]:
    """The input size (C, H, W) a torchvision network is built for."""
    return _INPUT_SIZES.get(NETWORK_ALIASES.get(name, name), DEFAULT_INPUT_SIZE)


def build_on_meta(factory: Callable[[], nn.Module]) -> nn.Module:
    """Call `factory` with every tensor on the meta device and weight initialisation off.

    Shapes are all a meta module has; its initialisers, decomposed in Python on meta
    tensors, would cost three quarters of the build. A factory that computes its widths
    from tensor data is built on the CPU and moved.
    """
    with _initialisers_off():
        try:
            with torch.device("meta"):
                return factory()
        except NotImplementedError:
            pass
        return factory().to("meta")


def build_uninitialised(factory: Callable[[], nn.Module]) -> nn.Module:
    """Call `factory` on the CPU with weight initialisation off: for a module that is only
    traced. Its weights are reserved but never written, so they cost no memory (untouched
    pages), and the build skips the meta device's Python dispatch (a third faster)."""
    with _initialisers_off():
        return factory()


@contextlib.contextmanager
def _initialisers_off() -> Iterator[None]:
    saved = {name: getattr(nn.init, name) for name in _INITIALISERS}
    try:
        for name in _INITIALISERS:
            setattr(nn.init, name, _keep)
        yield
    finally:
        for name, function in saved.items():
            setattr(nn.init, name, function)


_INITIALISERS = tuple(
    name for name in dir(nn.init) if name.endswith("_") and not name.startswith("_") and callable(getattr(nn.init, name))
)


def _keep(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return tensor


def build_torchvision(
    name: str, *, num_classes: int, device: str | torch.device = "cpu", seed: int | None = None
) -> nn.Module:
    """Build an untrained torchvision network; `seed` makes its initial weights reproducible.

    On the meta device nothing is allocated or initialised, which is all shapes need.
    """
    builder, kwargs = resolve_network(name)
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        return call_builder(builder, kwargs, num_classes=num_classes, device=device)


def call_builder(
    builder: str, kwargs: dict[str, Any], *, num_classes: int, device: str | torch.device = "cpu",
    initialise: bool = True,
) -> nn.Module:
    """Call the torchvision builder named `builder` (no alias) on `device`; meta builds skip
    weight initialisation, as do CPU builds with `initialise=False`."""
    factory = functools.partial(getattr(_models(), builder), num_classes=num_classes, **kwargs)
    device = torch.device(device)
    if device.type == "meta":
        return build_on_meta(factory)
    if not initialise:
        if device.type != "cpu":
            raise ValueError(f"an uninitialised build is on the CPU, not {device}")
        return build_uninitialised(factory)
    with device:
        return factory()
