"""Structured channel pruning of any CNN with torch-pruning's dependency graph.

A level is the percent of parameters removed. Every prunable group of coupled channels
(a Conv2d's outputs together with the BatchNorm, residual partners, depthwise
convolutions and next-layer inputs that follow it) loses a share of its channels set by
one common ratio, searched until the parameter count is on target.

The graph is built once per network. The search predicts parameter counts from the
groups (param_count.py), or prunes clones where that is not possible; the network of
each level is then one clone of the network and its graph, pruned (on the meta device
when only shapes are wanted, so no weights are copied). Where the counts are predicted,
so are the widths of a level's Conv2d and Linear layers (`ChannelPruner.prune_widths`):
its architecture follows from its base's without a clone or a trace.

Modes: `random` draws, from the seed, a per-group weight on that ratio (so layers are
pruned unevenly, as in the original tool) and which channels go; `l1-norm` prunes every
group by the same ratio, dropping the channels whose filters have the smallest L1 norm.
Each group keeps at least 2 channels; the classifier's outputs, the input channels and
the channels of grouped (not depthwise) convolutions are never pruned.
"""

from __future__ import annotations

import contextlib
import copy
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch_pruning as tp
from torch import nn
from torch_pruning.pruner import function as tp_function

from perf4sight.architecture import Architecture, LayerShape, output_shape, with_layer_shapes
from perf4sight.architecture.kinds import CONV2D, LINEAR
from perf4sight.errors import NetworkError
from perf4sight.networks.checks import check_level, check_mode, check_seed
from perf4sight.networks.param_count import ParamCounter, UnpredictableError, meta_memo

__all__ = ["MIN_CHANNELS", "PrunedNetwork", "PrunedWidths", "ChannelPruner", "prune_network"]

MIN_CHANNELS = 2
# The search stops once the level reached is this close to the target (percentage points).
_LEVEL_TOLERANCE = 0.1
_RANDOM_WEIGHT_RANGE = (0.5, 1.5)
_CLONE_RECURSION_LIMIT = 100_000


@dataclass(frozen=True)
class PrunedNetwork:
    """One pruned network and how close it came to the level asked for."""

    module: nn.Module
    target_level: float
    level: float
    params: int
    base_params: int


@dataclass(frozen=True)
class PrunedWidths:
    """One pruned network as the widths of its Conv2d and Linear layers (`in_channels`,
    `out_channels`, `groups`; `in_features`, `out_features`; by qualified name), no module built."""

    widths: dict[str, dict[str, int]]
    target_level: float
    level: float
    params: int
    base_params: int

    def architecture(self, base: Architecture, name: str) -> Architecture | None:
        """`base` (the architecture of the network pruned, under any recipe) with these widths,
        every other layer following (`with_layer_shapes`); None where they cannot follow, the
        parameters they give are not the pruned network's, or `base`'s recorded tensor lifetimes
        cannot be scaled to them (the module must be traced)."""
        shapes = {}
        for layer in base.of_kind(CONV2D, LINEAR):
            width = self.widths.get(layer.name)
            if width is None:
                return None
            if layer.kind == CONV2D:
                shapes[layer.name] = LayerShape((width["in_channels"], *layer.in_shape[1:]),
                                                (width["out_channels"], *layer.output[1:]), width["groups"])
            else:
                shapes[layer.name] = LayerShape((*layer.in_shape[:-1], width["in_features"]),
                                                (*layer.output[:-1], width["out_features"]))
        try:
            variant = with_layer_shapes(base, shapes, name=name)
        except NetworkError:
            return None
        return variant if variant.params == self.params and variant.lifetimes.keys() == base.lifetimes.keys() else None


@dataclass(frozen=True)
class _Group:
    root: str  # qualified name of the group's root layer
    handler: Any  # torch-pruning's out-channel pruning function for the root
    channels: int
    order: np.ndarray  # root channel indices, first to prune first
    weight: float  # multiplier on the common pruning ratio


@contextlib.contextmanager
def _quiet_shape_inference() -> Iterator[None]:
    """Without torch-pruning's "Maximum recursive depth reached!", which its shape
    inference repeats thousands of times on attention blocks and which says nothing a
    user can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Maximum recursive depth reached!")
        yield


def _count_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


class ChannelPruner:
    """A network with its dependency graph, ready to be pruned at any number of levels.

    The module given is never modified; each level gets its own pruned copy.
    """

    def __init__(
        self,
        module: nn.Module,
        *,
        input_size: Sequence[int],
        mode: str = "random",
        seed: int = 0,
        name: str = "",
    ) -> None:
        check_mode(mode)
        check_seed(seed)
        self.name = name or type(module).__name__.lower()
        self.mode = mode
        self.seed = seed
        self._base = module
        self.base_params = _count_params(module)
        self._graph, self._order = self._build_graph(module, input_size)
        self.classifier = self._order[-1]
        self._groups, full_groups = self._make_groups()
        try:
            self._counter: ParamCounter | None = ParamCounter(module, full_groups, [g.order for g in self._groups])
        except UnpredictableError:
            self._counter = None
        self._breakpoints: np.ndarray | None = None
        self._evaluated: dict[int, int] = {}  # breakpoint index -> parameter count

    # set-up ----------------------------------------------------------------------
    def _build_graph(self, module: nn.Module, input_size: Sequence[int]) -> tuple[tp.DependencyGraph, list[str]]:
        names = {m: n for n, m in module.named_modules()}
        order: list[str] = []

        def record(layer: nn.Module, args: Any, output: Any) -> None:
            order.append(names[layer])

        output_shape(module, input_size, name=self.name)  # a network that cannot take this size says so
        hooks = [m.register_forward_hook(record) for m in module.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
        device = next((p.device for p in module.parameters()), torch.device("cpu"))
        example = torch.zeros((1, *input_size), device=device)
        training = module.training
        try:
            with _quiet_shape_inference():
                graph = tp.DependencyGraph().build_dependency(module, example_inputs=example, verbose=False)
        except Exception as exc:
            raise NetworkError(
                f"{self.name}: torch-pruning cannot build its dependency graph (an operation it cannot follow, "
                f"such as a channel shuffle or windowed attention): {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            for hook in hooks:
                hook.remove()
            module.train(training)
        if not order:
            raise NetworkError(f"{self.name}: no Conv2d or Linear layer to prune")
        # torch-pruning traces in eval mode, through module calls: a layer that runs only in
        # training (an auxiliary classifier), or whose weights a function uses (F.linear in
        # attention), would keep its channels while its producer loses some.
        unseen = [name for m, name in names.items() if isinstance(m, (nn.Conv2d, nn.Linear)) and name not in order]
        if unseen:
            raise NetworkError(
                f"{self.name}: layer '{unseen[0]}' ({len(unseen)} in all) is not called as a module in eval mode, so "
                "pruning cannot follow its channels: it runs only in training (an auxiliary classifier: build the "
                "network without it, as googlenet and inception_v3 with aux_logits=False), or a function uses its "
                "weights (F.linear, as in Swin and ViT attention), which pruning cannot follow, or it never runs "
                "(a layer the forward pass skips: remove it from the network)"
            )
        return graph, list(dict.fromkeys(order))

    def _make_groups(self) -> tuple[list[_Group], list[Any]]:
        """The prunable groups with their pruning order, and torch-pruning's full groups."""
        modules = dict(self._base.named_modules())
        rng = np.random.default_rng(self.seed)
        groups, full_groups = [], []
        with _quiet_shape_inference():
            found = self._graph.get_all_groups(
                ignored_layers=[modules[self.classifier]], root_module_types=(nn.Conv2d, nn.Linear)
            )
        for group in found:
            root = group[0].dep.target.module
            channels = len(group[0].idxs)
            if channels <= MIN_CHANNELS or any(_is_grouped_conv(item.dep.target.module) for item in group):
                continue
            if self.mode == "random":
                weight = float(rng.uniform(*_RANDOM_WEIGHT_RANGE))
                order = rng.permutation(channels)
            else:
                weight = 1.0
                order = np.argsort(_filter_l1_norms(group, channels), kind="stable")
            groups.append(_Group(self._graph._module2name[root], group[0].dep.handler, channels, order, weight))
            full_groups.append(group)
        return groups, full_groups

    # pruning ---------------------------------------------------------------------
    def _counts(self, step: int) -> tuple[int, ...]:
        """Channels pruned per group at the common ratio of breakpoint `step`."""
        ratio = self._ratios[step] * (1 + 1e-9)
        return tuple(
            min(int(min(ratio * g.weight, 1.0) * g.channels), g.channels - MIN_CHANNELS) for g in self._groups
        )

    @property
    def _ratios(self) -> np.ndarray:
        """The ratios at which some group loses one more channel (params fall between them)."""
        if self._breakpoints is None:
            steps = [np.arange(1, g.channels - MIN_CHANNELS + 1) / (g.channels * g.weight) for g in self._groups]
            self._breakpoints = np.unique(np.concatenate([np.zeros(1), *steps]))
        return self._breakpoints

    def _clone(self, meta: bool) -> tuple[nn.Module, tp.DependencyGraph]:
        """A copy of the network and its graph; torch-pruning's stateless parts are shared."""
        memo: dict[int, Any] = meta_memo(self._base) if meta else {}
        memo[id(tp.ops)] = tp.ops
        for pruner in [*self._graph.REGISTERED_PRUNERS.values(), *tp_function.PrunerBox.values()]:
            memo[id(pruner)] = pruner
        for node in self._graph.module2node.values():
            memo[id(node.grad_fn)] = node.grad_fn
        # The graph's nodes link to each other, so copying them recurses as deep as the network.
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, _CLONE_RECURSION_LIMIT))
        try:
            return copy.deepcopy((self._base, self._graph), memo)
        finally:
            sys.setrecursionlimit(limit)

    def _apply(self, counts: tuple[int, ...], meta: bool) -> nn.Module:
        module, graph = self._clone(meta)
        modules = dict(module.named_modules())
        for group, count in zip(self._groups, counts):
            if count:
                idxs = sorted(int(i) for i in group.order[:count])
                graph.get_pruning_group(modules[group.root], group.handler, idxs).prune(record_history=False)
        return module

    def _params_at(self, step: int) -> int:
        if step not in self._evaluated:
            counts = self._counts(step)
            if self._counter is not None:
                self._evaluated[step] = self._counter(counts)
            else:
                self._evaluated[step] = _count_params(self._apply(counts, meta=True))
        return self._evaluated[step]

    def _search(self, target_params: float) -> int:
        """The breakpoint whose parameter count is closest to the target.

        Parameters fall as the step grows; the bracket starts from every step evaluated so
        far (levels share their evaluations) and shrinks by interpolation and bisection.
        """
        last = len(self._ratios) - 1
        self._params_at(0)
        self._params_at(last)
        above = [s for s, p in self._evaluated.items() if p > target_params]
        below = [s for s, p in self._evaluated.items() if p <= target_params]
        if not above or not below:
            return min(self._evaluated, key=lambda s: abs(self._evaluated[s] - target_params))
        lo, hi = max(above), min(below)
        tolerance = _LEVEL_TOLERANCE / 100 * self.base_params
        interpolate = True
        while hi - lo > 1 and min(self._evaluated[lo] - target_params, target_params - self._evaluated[hi]) > tolerance:
            p_lo, p_hi = self._evaluated[lo], self._evaluated[hi]
            if interpolate:
                step = lo + round((hi - lo) * (p_lo - target_params) / (p_lo - p_hi))
            else:
                step = (lo + hi) // 2
            step = min(max(step, lo + 1), hi - 1)
            interpolate = not interpolate
            if self._params_at(step) > target_params:
                lo = step
            else:
                hi = step
        return lo if self._evaluated[lo] - target_params < target_params - self._evaluated[hi] else hi

    def prune_widths(self, level: float) -> PrunedWidths | None:
        """The widths of the network pruned to `level` percent of parameters removed, as `prune`
        would cut it, from the groups alone; None where they cannot be predicted (`prune`)."""
        level = check_level(level)
        if self._counter is None:
            return None
        counts = self._level_counts(level)
        params = self._counter(counts)
        return PrunedWidths(self._counter.widths(counts), level, self._reached(params), params, self.base_params)

    def _level_counts(self, level: float) -> tuple[int, ...]:
        """Channels pruned per group at the breakpoint closest to `level`."""
        return self._counts(self._search(self.base_params * (1 - level / 100)) if level else 0)

    def _reached(self, params: int) -> float:
        """The level (percent of parameters removed) a network of `params` parameters is at."""
        return round(100 * (1 - params / self.base_params), 2)

    def prune(self, level: float, *, meta: bool = False) -> PrunedNetwork:
        """Prune a copy to `level` percent of parameters removed; `meta` for shapes only."""
        level = check_level(level)
        try:
            counts = self._level_counts(level)
            module = self._apply(counts, meta=meta)
            params = _count_params(module)
            if self._counter is not None and self._counter(counts) != params:
                # The prediction missed: search again by pruning clones, which is exact.
                self._counter = None
                self._evaluated.clear()
                return self.prune(level, meta=meta)
        except (RuntimeError, ValueError, IndexError, RecursionError) as exc:
            raise NetworkError(f"{self.name}: cannot be pruned to level {level:g}: {type(exc).__name__}: {exc}") from exc
        return PrunedNetwork(
            module=module,
            target_level=level,
            level=self._reached(params),
            params=params,
            base_params=self.base_params,
        )


def _is_grouped_conv(layer: Any) -> bool:
    """A grouped (not depthwise) convolution: its channels cannot be cut one by one."""
    return isinstance(layer, nn.Conv2d) and 1 < layer.groups < layer.in_channels


def _filter_l1_norms(group: Any, channels: int) -> np.ndarray:
    """Per root channel: the summed L1 norm of the filters it is the output of."""
    norms = torch.zeros(channels, dtype=torch.float64)
    for item in group:
        layer, handler = item.dep.target.module, item.dep.handler
        if not isinstance(layer, (nn.Conv2d, nn.Linear)) or handler not in (
            tp.prune_conv_out_channels,
            tp.prune_linear_out_channels,
            tp_function.prune_depthwise_conv_out_channels,
        ):
            continue
        weight = layer.weight.detach()
        if weight.is_meta:
            raise NetworkError("l1-norm pruning needs the network's weights; it was built on the meta device")
        per_filter = weight.abs().flatten(1).sum(1).to(torch.float64)
        norms.index_add_(0, torch.as_tensor(item.root_idxs), per_filter[item.idxs])
    return norms.numpy()


def prune_network(
    module: nn.Module,
    level: float,
    *,
    input_size: Sequence[int],
    mode: str = "random",
    seed: int = 0,
    name: str = "",
) -> PrunedNetwork:
    """Prune a copy of `module` to `level` percent of its parameters removed.

    For many levels of one network, make one `ChannelPruner` and call `prune` per level.
    """
    check_level(level)
    return ChannelPruner(module, input_size=input_size, mode=mode, seed=seed, name=name).prune(level)
