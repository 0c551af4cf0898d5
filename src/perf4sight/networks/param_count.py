"""Parameters and layer widths left after pruning, predicted from the pruning groups without
pruning anything.

Searching for a pruning level asks for the parameter count of many candidate networks;
cloning and pruning each one costs a tenth of a second or more. Each group says which
dimension of which layer loses how many entries when its first k channels (in pruning
order) go, and each layer's pruning functions are probed once on a meta copy to see
which parameter dimensions, and which of a Conv2d's or Linear's widths (`WIDTHS`), they
cut. A count is then a few array look-ups, and so are the widths of the pruned network's
Conv2d and Linear layers (what a plan needs of a variant: its architecture follows from
its base's). Layers whose pruning is not a plain cut along dimensions (or unwrapped
parameters) are not predicted: the caller falls back to pruning clones.
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch_pruning import ops as tp_ops

__all__ = ["UnpredictableError", "ParamCounter", "WIDTHS", "meta_memo"]

Key = tuple[nn.Module, Any]  # a layer and one of its pruning functions
# The attributes that give a Conv2d's or a Linear's shape, which pruning cuts.
WIDTHS = {nn.Conv2d: ("in_channels", "out_channels", "groups"), nn.Linear: ("in_features", "out_features")}


class UnpredictableError(Exception):
    """The parameter count of this network cannot be predicted from its groups."""


def meta_memo(module: nn.Module) -> dict[int, Any]:
    """A deepcopy memo that gives every parameter and buffer of `module` an empty meta twin."""
    memo: dict[int, Any] = {}
    for p in module.parameters():
        memo[id(p)] = nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
    for b in module.buffers():
        memo[id(b)] = torch.empty_like(b, device="meta")
    return memo


def _widths(layer: nn.Module) -> dict[str, int]:
    """The widths (`WIDTHS`) of a Conv2d or Linear layer; none for another layer."""
    names = next((names for kind, names in WIDTHS.items() if isinstance(layer, kind)), ())
    return {name: int(getattr(layer, name)) for name in names}


def _cut_dims(layer: nn.Module, handler: Any) -> tuple[dict[str, tuple[int, ...]], tuple[str, ...]]:
    """For each own parameter of `layer`, the dimensions `handler` cuts by one per index; and
    the widths it cuts by one per index."""
    before = {n: tuple(p.shape) for n, p in layer.named_parameters(recurse=False)}
    widths = _widths(layer)
    cuts, width_cuts = [], []
    for count in (1, 2):
        probe = copy.deepcopy(layer, meta_memo(layer))
        handler(probe, list(range(count)))
        after = {n: tuple(p.shape) for n, p in probe.named_parameters(recurse=False)}
        if after.keys() != before.keys() or any(len(after[n]) != len(before[n]) for n in before):
            raise UnpredictableError(f"pruning {type(layer).__name__} changes its parameters' layout")
        cuts.append({n: tuple(d for d, (a, b) in enumerate(zip(after[n], before[n])) if a != b) for n in before})
        for n in before:
            if any(before[n][d] - after[n][d] != count for d in cuts[-1][n]):
                raise UnpredictableError(f"pruning {type(layer).__name__} is not a cut of one entry per channel")
        width_cuts.append({name: widths[name] - width for name, width in _widths(probe).items()
                           if widths[name] != width})
        if any(cut != count for cut in width_cuts[-1].values()):
            raise UnpredictableError(f"pruning {type(layer).__name__} is not a cut of one channel per index")
    if cuts[0] != cuts[1] or width_cuts[0].keys() != width_cuts[1].keys():
        raise UnpredictableError(f"pruning {type(layer).__name__} cuts different dimensions")
    return cuts[0], tuple(width_cuts[0])


class ParamCounter:
    """Parameter count of the network after pruning the first `counts[g]` channels of group g
    (calling it), and the widths of its Conv2d and Linear layers then (`widths`)."""

    def __init__(self, module: nn.Module, groups: Sequence[Any], orders: Sequence[np.ndarray]) -> None:
        self._items: list[list[tuple[Key, np.ndarray]]] = []
        self._cuts: dict[nn.Module, dict[Any, dict[str, tuple[int, ...]]]] = defaultdict(dict)
        self._width_cuts: dict[nn.Module, dict[Any, tuple[str, ...]]] = defaultdict(dict)
        for group, order in zip(groups, orders):
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            items = []
            for item in group:
                target = item.dep.target
                if target.type == tp_ops.OPTYPE.PARAMETER:
                    raise UnpredictableError("the network has unwrapped parameters")
                layer, handler = target.module, item.dep.handler
                if not isinstance(layer, nn.Module) or not any(True for _ in layer.parameters(recurse=False)):
                    continue
                if handler not in self._cuts[layer]:
                    self._cuts[layer][handler], self._width_cuts[layer][handler] = _cut_dims(layer, handler)
                items.append(((layer, handler), np.sort(rank[np.asarray(item.root_idxs, dtype=np.int64)])))
            self._items.append(items)
        self._shapes = {
            layer: {n: tuple(p.shape) for n, p in layer.named_parameters(recurse=False)} for layer in self._cuts
        }
        counted = sum(math.prod(s) for shapes in self._shapes.values() for s in shapes.values())
        self._fixed = sum(p.numel() for p in module.parameters()) - counted
        self._names = {layer: name for name, layer in module.named_modules()}
        self._base_widths = {name: widths for name, layer in module.named_modules() if (widths := _widths(layer))}

    def _removed(self, counts: Sequence[int]) -> dict[Key, int]:
        removed: dict[Key, int] = defaultdict(int)
        for items, count in zip(self._items, counts):
            if count:
                for key, ranks in items:
                    removed[key] += int(np.searchsorted(ranks, count))
        return removed

    def widths(self, counts: Sequence[int]) -> dict[str, dict[str, int]]:
        """Per Conv2d and Linear layer (by qualified name), its widths (`WIDTHS`) after pruning."""
        removed = self._removed(counts)
        widths = {name: dict(values) for name, values in self._base_widths.items()}
        for layer, handlers in self._width_cuts.items():
            for handler, cut in handlers.items():
                for width in cut:
                    widths[self._names[layer]][width] -= removed.get((layer, handler), 0)
        return widths

    def __call__(self, counts: Sequence[int]) -> int:
        removed = self._removed(counts)
        total = self._fixed
        for layer, shapes in self._shapes.items():
            for name, shape in shapes.items():
                size = list(shape)
                for handler, cuts in self._cuts[layer].items():
                    for dim in cuts[name]:
                        size[dim] -= removed.get((layer, handler), 0)
                total += math.prod(size)
        return total
