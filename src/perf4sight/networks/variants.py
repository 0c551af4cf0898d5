"""The pruned variants of one network, for a caller that needs their widths more than their
modules (`perf4sight plan`).

Which channels a level keeps depends only on the network's structure, the pruning mode and
seed, torch-pruning and perf4sight's code; for a torchvision network in `random` mode (a
seed's draw, not the untrained weights' norms) the widths of each level are kept in the
disk cache (`perf4sight.cache`), so that a later process plans from them and from the
network's cached architecture without importing torchvision (over a second, most of a
plan's own work) or building the network. The network is loaded, and its pruner built, only
for a level the cache does not hold, or one whose widths cannot give its architecture.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
from collections.abc import Sequence
from typing import Any

from perf4sight.cache import cached_value
from perf4sight.networks.checks import check_level, check_mode, check_seed
from perf4sight.networks.loader import LoadedNetwork, Source, load_network, torchvision_shape
from perf4sight.networks.pruning import ChannelPruner, PrunedNetwork, PrunedWidths
from perf4sight.networks.registry import is_torchvision_network, resolve_network

__all__ = ["NetworkVariants"]


class NetworkVariants:
    """`network` (anything the network loader accepts) pruned at any level, at `input_size`
    and `num_classes` (None: the network's own), by `mode` and `seed` as `ChannelPruner`
    prunes it."""

    def __init__(self, network: Source, *, input_size: Sequence[int] | None = None, num_classes: int | None = None,
                 mode: str = "random", seed: int = 0) -> None:
        check_mode(mode)
        check_seed(seed)
        self.network, self.mode, self.seed = network, mode, seed
        self._options: dict[str, Any] = {"input_size": input_size, "num_classes": num_classes}
        self._key: dict[str, Any] | None = None
        if isinstance(network, str) and is_torchvision_network(network):  # as the loader sizes it, unbuilt
            self.name = network
            self.input_size, self.num_classes = torchvision_shape(network, input_size, num_classes)
            if mode == "random":
                builder, kwargs = resolve_network(network)
                self._key = {"pruned_widths": builder, "arguments": kwargs, "input_size": list(self.input_size),
                             "num_classes": self.num_classes, "seed": seed,
                             "torch_pruning": importlib.metadata.version("torch-pruning")}
        else:
            self.name = self.loaded.name
            self.input_size, self.num_classes = self.loaded.input_size, self.loaded.num_classes

    @functools.cached_property
    def loaded(self) -> LoadedNetwork:
        return load_network(self.network, **self._options)

    @functools.cached_property
    def pruner(self) -> ChannelPruner:
        return ChannelPruner(self.loaded.module, input_size=self.input_size, mode=self.mode, seed=self.seed,
                             name=self.name)

    @property
    def source(self) -> Any:
        """What describes the unpruned network: its name where the cache may hold it, else its module."""
        return self.network if self._key is not None else self.loaded.module

    def widths(self, level: float) -> PrunedWidths | None:
        """`ChannelPruner.prune_widths(level)`, from the cache where it holds them."""
        level = check_level(level)
        if self._key is None:
            return self.pruner.prune_widths(level)

        def made() -> dict[str, Any]:  # a whole entry even where the widths cannot be predicted
            widths = self.pruner.prune_widths(level)
            return {"widths": None if widths is None else dataclasses.asdict(widths)}

        stored = cached_value({**self._key, "level": level}, made)["widths"]
        return None if stored is None else PrunedWidths(**stored)

    def prune(self, level: float) -> PrunedNetwork:
        """The network pruned at `level` on the meta device (shapes are all a prediction needs)."""
        return self.pruner.prune(level, meta=True)
