"""Architecture specs: a pruned network as JSON, and the way back to a module.

A spec names a torchvision builder and the output channels of every pruned Conv2d;
its `layers` record every Conv2d and Linear with shapes, which is all the paper's
features need, so a spec can be described without building any module.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch_pruning as tp
import torchvision
from torch import nn

from perf4sight.architecture import Architecture, Layer
from perf4sight.errors import DataNotFoundError, NetworkError

__all__ = ["read_spec", "build_from_spec", "architecture_from_spec"]

SPEC_KEYS = ("name", "net", "torchvision", "num_classes", "input_size", "out_channels", "layers")


def read_spec(path: str | Path) -> dict[str, Any]:
    """Load and check a spec JSON; errors name the file and the missing key."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"architecture spec not found: {path}")
    try:
        spec = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise NetworkError(f"{path}: not valid JSON: {exc}") from None
    missing = [k for k in SPEC_KEYS if k not in spec]
    if missing:
        raise NetworkError(f"{path}: spec lacks key '{missing[0]}'")
    return spec


def architecture_from_spec(spec: dict[str, Any]) -> Architecture:
    """The spec's Conv2d and Linear layers as an (incomplete) Architecture, no module built."""
    layers = []
    for entry in spec["layers"]:
        kind = {"Conv2d": "conv2d", "Linear": "linear"}.get(entry["type"], entry["type"].lower())
        conv = kind == "conv2d"
        c_in = entry["in"][0]
        c_out = entry["out"][0]
        groups = entry.get("groups", 1)
        kernel = tuple(entry.get("kernel", ()))
        weights = c_out * (c_in // groups) * (kernel[0] * kernel[1] if conv else 1)
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
    """Rebuild the pruned module: the torchvision base with each Conv2d cut to its channels.

    The first channels of each layer are kept; torch-pruning's dependency graph makes the
    layers that depend on a pruned Conv2d (BatchNorm, next inputs, residual partners,
    concatenations, depthwise groups) follow.
    """
    builder = getattr(torchvision.models, spec["torchvision"], None)
    if builder is None:
        raise NetworkError(f"spec {spec['name']}: unknown torchvision builder '{spec['torchvision']}'")
    kwargs = dict(spec.get("torchvision_kwargs", {}))
    model = builder(num_classes=int(spec["num_classes"]), **kwargs).eval()
    example = torch.zeros(1, *spec["input_size"])
    graph = tp.DependencyGraph().build_dependency(model, example_inputs=example, verbose=False)
    modules = dict(model.named_modules())
    for name, channels in spec["out_channels"].items():
        conv = modules.get(name)
        if not isinstance(conv, nn.Conv2d):
            raise NetworkError(f"spec {spec['name']}: layer '{name}' is not a Conv2d of {spec['torchvision']}")
        if channels > conv.out_channels or channels < 1:
            raise NetworkError(
                f"spec {spec['name']}: layer '{name}' cannot have {channels} output channels "
                f"(its base has {conv.out_channels})"
            )
        if channels == conv.out_channels:
            continue
        group = graph.get_pruning_group(conv, tp.prune_conv_out_channels, list(range(channels, conv.out_channels)))
        group.prune()
    return model.to(device)
