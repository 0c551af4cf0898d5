"""Tensor lifetimes: what an iteration allocates and frees, in order.

How much memory a device's caching allocator holds depends on more than the largest
amount alive at once: on the order in which tensors of which sizes come and go, since a
freed block serves only requests that fit in it. That order is recorded by running the
profiler's own iterations (`perf4sight.device.workload.iteration`) on the meta device,
where nothing is allocated or computed, under a dispatch mode that notes each new storage
and the moment its last tensor dies. A saved-tensors hook keeps what autograd saves as
Python tensors, so that their lifetimes are seen too.

Two iterations are recorded: the first creates the optimizer's momentum buffers, the
second is what every later one repeats. Recorded at two batch sizes, each allocation's
size is an affine function of the batch size (fixed bytes plus bytes per sample), so one
recording serves every batch size. Device-specific temporaries (cuDNN workspaces, cuBLAS
handles) are not seen: they are left to the fitted coefficients.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from perf4sight.errors import NetworkError

__all__ = ["Timeline", "ITERATIONS", "record_timeline", "timeline_of"]

# The first iteration creates the momentum buffers; the second is the steady state.
ITERATIONS = {"training": 2, "inference": 1}
# The two batch sizes recorded (BatchNorm refuses one sample per channel in training).
_RECORDED_BS = (2, 4)


@dataclass(frozen=True)
class Timeline:
    """Allocations and frees in program order.

    Event i allocates (`allocates[i]`) or frees storage `tensor[i]`; an allocation's size
    in bytes is `fixed_bytes[i] + per_sample_bytes[i] * batch_size`.
    """

    tensor: np.ndarray
    allocates: np.ndarray
    fixed_bytes: np.ndarray
    per_sample_bytes: np.ndarray

    def sizes(self, batch_size: int) -> np.ndarray:
        """Each event's size in bytes at `batch_size` (0 for a free)."""
        return self.fixed_bytes + self.per_sample_bytes * batch_size


class _Recorder(TorchDispatchMode):
    """Notes every new storage an op returns, and when the last tensor on it dies."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[int, bool, int]] = []  # (storage number, allocates, bytes)
        self._live: dict[int, list[int]] = {}  # storage address -> [number, live tensors]
        self._count = 0

    def note(self, tensor: Any) -> None:
        if not isinstance(tensor, torch.Tensor):
            return
        storage = tensor.untyped_storage()
        key = storage._cdata
        entry = self._live.get(key)
        if entry is None:
            entry = self._live[key] = [self._count, 0]
            self.events.append((self._count, True, storage.nbytes()))
            self._count += 1
        entry[1] += 1
        weakref.finalize(tensor, self._dead, key)

    def _dead(self, key: int) -> None:
        entry = self._live[key]
        entry[1] -= 1
        if entry[1] == 0:
            del self._live[key]
            self.events.append((entry[0], False, 0))

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        seen: set[int] = set()
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor) and id(tensor) not in seen:
                seen.add(id(tensor))
                self.note(tensor)
        return out


def _record(module: torch.nn.Module, input_size: tuple[int, ...], num_classes: int, stage: str,
            batch_size: int) -> list[tuple[int, bool, int]]:
    """The events of `ITERATIONS[stage]` iterations at `batch_size`, the model's own tensors first."""
    recorder = _Recorder()
    # Tensors die when their last reference goes; a garbage collection in the middle would
    # free whatever cycles hold at a moment that depends on the process's history. (No
    # collection first: older garbage holds none of the tensors recorded here, and a full
    # collection costs more than the recording in a large process.)
    gc.disable()
    try:
        return _run(recorder, module, input_size, num_classes, stage, batch_size)
    finally:
        gc.enable()


def _run(recorder: _Recorder, module: torch.nn.Module, input_size: tuple[int, ...], num_classes: int,
         stage: str, batch_size: int) -> list[tuple[int, bool, int]]:
    from perf4sight.device.workload import iteration

    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t), recorder:
        # Moving the model to the device allocates its parameters and buffers in this order.
        module._apply(lambda t: (recorder.note(t), t)[1])
        inputs = torch.randn(batch_size, *input_size, device="meta")
        step = iteration(module, stage, inputs, num_classes)
        for _ in range(ITERATIONS[stage]):
            step()
        del step, inputs
    # A copy: the model's tensors die later, and their finalizers would go on appending.
    return list(recorder.events)


def record_timeline(builder: Callable[[], Any], stage: str) -> Timeline:
    """The timeline for `stage`, any batch size, of the network `builder` builds (a
    `LoadedNetwork`), built afresh for each recording: a used model holds gradients."""

    def record(batch_size: int) -> list[tuple[int, bool, int]]:
        network = builder()
        module = network.module.to("meta")
        return _record(module, tuple(network.input_size), network.num_classes, stage, batch_size)

    small, large = (record(bs) for bs in _RECORDED_BS)
    pattern = [(number, allocates) for number, allocates, _ in small]
    if pattern != [(number, allocates) for number, allocates, _ in large]:
        raise NetworkError("tensor lifetimes differ between batch sizes; the allocator replay cannot scale them")
    low = np.array([size for *_, size in small], dtype=np.int64)
    high = np.array([size for *_, size in large], dtype=np.int64)
    step = _RECORDED_BS[1] - _RECORDED_BS[0]
    per_sample, remainder = np.divmod(high - low, step)
    fixed = low - per_sample * _RECORDED_BS[0]
    if remainder.any() or (per_sample < 0).any() or (fixed < 0).any():
        raise NetworkError("tensor sizes are not affine in the batch size; the allocator replay cannot scale them")
    return Timeline(
        tensor=np.array([number for number, _ in pattern], dtype=np.int64),
        allocates=np.array([allocates for _, allocates in pattern], dtype=bool),
        fixed_bytes=fixed,
        per_sample_bytes=per_sample,
    )


# Timelines per builder and stage, kept while the builder lives (as long as its architecture):
# a builder of a module given as the source holds that module, weights and all.
_TIMELINES: weakref.WeakKeyDictionary[Callable[[], Any], dict[str, Timeline]] = weakref.WeakKeyDictionary()


def timeline_of(builder: Callable[[], Any], stage: str) -> Timeline:
    """`record_timeline`, once per builder and stage."""
    recorded = _TIMELINES.setdefault(builder, {})
    if stage not in recorded:
        recorded[stage] = record_timeline(builder, stage)
    return recorded[stage]
