"""What autograd saves where PyTorch versions differ: the device's version, not the host's.

A network is traced, and its tensor lifetimes recorded, with the host's PyTorch; the device
trains it with its own, which on a Jetson is as old as its JetPack. One difference is large:
since PyTorch 1.10, an in-place hardtanh (`ReLU6(inplace=True)`, `relu6(x, inplace=True)`)
saves a copy of its input for the backward pass, where earlier versions saved its result,
the tensor the next layer saves anyway (pytorch/pytorch#62329, #95432). In a MobileNetV2
that copy is about 30 % of what autograd saves; the TX2's measurements show it absent.

So the trace and the recording mark that copy (`Layer.saved_copy_bytes`, `Timeline.copies`),
and `as_saved_by` removes it from an architecture for a device whose PyTorch makes none.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from perf4sight.architecture.derived import derived_values
from perf4sight.architecture.ir import Architecture, Timeline
from perf4sight.errors import ArgumentError

__all__ = ["BEFORE_COPIES", "COPIED_INPUT_OPS", "FIRST_COPYING", "as_saved_by", "check_torch_version", "copies_inputs",
           "version_name"]

# In-place ops whose input autograd copies from PyTorch 1.10 on (aten names).
COPIED_INPUT_OPS = frozenset({"hardtanh_"})
FIRST_COPYING = "1.10"
# The last version before the copies, standing for every earlier one (which save the same).
BEFORE_COPIES = "1.9"
_VERSION = re.compile(r"^\s*(\d+)\.(\d+)")


def _major_minor(torch_version: str) -> tuple[int, int] | None:
    match = _VERSION.match(torch_version)
    return (int(match.group(1)), int(match.group(2))) if match else None


_FIRST = _major_minor(FIRST_COPYING)


def check_torch_version(torch_version: str, where: str) -> str:
    """`torch_version` (as `torch.__version__` writes it: 1.8.0, 2.1.0a0+41361538.nv23.06),
    or ArgumentError naming `where` (a config key, a record)."""
    if _major_minor(str(torch_version)) is None:
        raise ArgumentError(f"{where}: '{torch_version}' is not a PyTorch version (such as 1.8.0 or 2.1.0)")
    return str(torch_version)


def copies_inputs(torch_version: str | None) -> bool:
    """Whether a device's PyTorch copies the inputs of `COPIED_INPUT_OPS` (None: the host's,
    which does: this project needs a PyTorch newer than 1.10)."""
    if torch_version is None:
        return True
    version = _major_minor(torch_version)
    if version is None:
        raise ValueError(f"'{torch_version}' is not a PyTorch version")
    return version >= _FIRST


def version_name(torch_version: str) -> str:
    """A version as a reader takes it: `BEFORE_COPIES` stands for every earlier one."""
    return f"before {FIRST_COPYING}" if torch_version == BEFORE_COPIES else torch_version


def as_saved_by(arch: Architecture, torch_version: str | None) -> Architecture:
    """`arch` as autograd on `torch_version` saves it: without the copies it does not make
    (`arch` itself where it makes them, or `arch` holds none); kept with `arch`."""
    if copies_inputs(torch_version) or not any(layer.saved_copy_bytes for layer in arch.layers):
        return arch
    kept = derived_values(arch)
    if "without_copies" not in kept:
        layers = tuple(
            layer.replaced(saved_bytes=layer.saved_bytes - layer.saved_copy_bytes,
                           saved_input_bytes=layer.saved_input_bytes - layer.saved_copy_bytes, saved_copy_bytes=0)
            if layer.saved_copy_bytes else layer
            for layer in arch.layers
        )
        lifetimes = {stage: _without_copies(timeline) for stage, timeline in arch.lifetimes.items()}
        kept["without_copies"] = dataclasses.replace(arch, layers=layers, lifetimes=lifetimes)
    return kept["without_copies"]


def _without_copies(timeline: Timeline) -> Timeline:
    """The timeline without the copies' allocations and frees."""
    if timeline.copies is None or not timeline.copies.any():
        return timeline
    keep = ~np.isin(timeline.tensor, timeline.tensor[timeline.copies])
    scaling = timeline.scaling
    if scaling is not None:
        scaling = dataclasses.replace(scaling, layer=scaling.layer[keep], fixed_quantity=scaling.fixed_quantity[keep],
                                      per_sample_quantity=scaling.per_sample_quantity[keep])
    return Timeline(timeline.tensor[keep], timeline.allocates[keep], timeline.fixed_bytes[keep],
                    timeline.per_sample_bytes[keep], scaling, timeline.copies[keep])
