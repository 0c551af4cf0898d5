"""create_network_dataset: prune each network at every level and store its architecture spec.

For each network the dependency graph is built once and every level is pruned from a
clone on the meta device (shapes only), except in `l1-norm` mode, where the channels to
drop are chosen from the weights the network was built with (seeded). The manifest
lists what was made; the specs are what later stages load.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn

from perf4sight import console
from perf4sight.config import NetworkDatasetSettings
from perf4sight.errors import ConfigError, NetworkError
from perf4sight.files import write_text
from perf4sight.networks.loader import check_input_size, check_num_classes, load_network
from perf4sight.networks.model_file import is_model_file, split_model_source
from perf4sight.networks.model_writer import write_model_file
from perf4sight.networks.pruning import ChannelPruner, check_level, check_mode, check_seed
from perf4sight.networks.registry import build_torchvision, is_torchvision_network, resolve_network
from perf4sight.networks.spec import spec_from_module, spec_macs, write_spec

__all__ = ["MANIFEST_COLUMNS", "MANIFEST_FILE", "check_settings", "create_network_dataset"]

MANIFEST_FILE = "manifest.csv"
MANIFEST_COLUMNS = ("name", "network", "target_level", "level_reached", "params", "macs", "spec_file")
_WHERE = "[create_network_dataset]"


def check_settings(settings: NetworkDatasetSettings) -> list[int]:
    """Refuse bad settings before any work; returns the levels without repeats."""
    if not settings.networks:
        raise ConfigError(f"{_WHERE} networks: no network given")
    if not settings.pruning_perc:
        raise ConfigError(f"{_WHERE} pruning_perc: no level given")
    if settings.dataset is not None and Path(settings.dataset).name != settings.dataset:
        raise ConfigError(f"{_WHERE} dataset: '{settings.dataset}' is not a folder name")
    if settings.model_desc_dir is not None and not settings.model_desc_dir.is_dir():
        raise ConfigError(f"{_WHERE} model_desc_dir: directory not found: {settings.model_desc_dir}")
    checks: list[tuple[str, Callable[[Any], Any], Any]] = [
        ("mode", check_mode, settings.mode),
        ("seed", check_seed, settings.seed),
        *(("pruning_perc", check_level, level) for level in settings.pruning_perc),
        ("input_size", check_input_size, settings.input_size),
        ("num_classes", check_num_classes, settings.num_classes),
    ]
    for key, check, value in checks:
        try:
            check(value)
        except NetworkError as exc:
            raise ConfigError(f"{_WHERE} {key}: {exc}") from None
    return list(dict.fromkeys(settings.pruning_perc))


def _base_network(network: str, settings: NetworkDatasetSettings) -> tuple[str, nn.Module, dict[str, Any]]:
    """The network's name for its specs, its unpruned module, and what a spec says of its base."""
    meta = settings.mode == "random"  # random pruning needs no weights
    if is_torchvision_network(network):
        builder, kwargs = resolve_network(network)
        module = build_torchvision(
            network, num_classes=settings.num_classes, device="meta" if meta else "cpu", seed=settings.seed
        )
        return network, module, {"torchvision_name": builder, "torchvision_kwargs": kwargs}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        loaded = load_network(
            network,
            input_size=settings.input_size,
            num_classes=settings.num_classes,
            model_desc_dir=settings.model_desc_dir,
        )
    if loaded.spec is not None:
        base = {"torchvision_name": loaded.spec.get("torchvision"),
                "torchvision_kwargs": loaded.spec.get("torchvision_kwargs"),
                "model_desc": loaded.spec.get("model_desc")}
        return loaded.spec["net"], loaded.module, base
    if is_model_file(network):
        return split_model_source(network)[0].stem, loaded.module, {"model_desc": network}
    # found as <model_desc_dir>/<network>.py
    return network, loaded.module, {"model_desc": str(Path(settings.model_desc_dir) / f"{network}.py")}


def _write_manifest(out_dir: Path, rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    manifest = pd.DataFrame(rows, columns=list(MANIFEST_COLUMNS))
    write_text(out_dir / MANIFEST_FILE, manifest.to_csv(index=False))
    return manifest


def create_network_dataset(settings: NetworkDatasetSettings) -> pd.DataFrame:
    """Prune every network at every level; write specs (and model files on request) and a manifest.

    Returns the manifest: one row per pruned network with the level asked for, the level
    reached, its parameters and its multiply-accumulates for one input of `input_size`.
    """
    levels = check_settings(settings)
    out_dir = settings.spec_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    input_size = tuple(settings.input_size)
    rows = []
    with console.progress("pruning", len(settings.networks) * len(levels)) as bar:
        for network in settings.networks:
            bar.label(network)
            net, module, base = _base_network(network, settings)
            pruner = ChannelPruner(module, input_size=input_size, mode=settings.mode, seed=settings.seed, name=net)
            for level in levels:
                name = f"{net}_{level}"
                pruned = pruner.prune(level, meta=True)
                if abs(pruned.level - level) > 1:
                    console.warn(f"{name}: reached level {pruned.level:.2f}, the closest {net} allows")
                spec = spec_from_module(
                    pruned.module, name=name, net=net, prune_level=level, input_size=input_size,
                    num_classes=settings.num_classes, **base,
                )
                spec_file = write_spec(spec, out_dir / f"{name}.json")
                if settings.write_model_files:
                    write_model_file(
                        pruned.module, out_dir / f"{name}.py", net=net, name=name,
                        num_classes=settings.num_classes, input_size=input_size,
                    )
                rows.append((name, net, level, pruned.level, pruned.params, spec_macs(spec), str(spec_file)))
                manifest = _write_manifest(out_dir, rows)  # after each spec: a stopped run lists what it wrote
                bar.advance(name)
    console.info(f"{len(rows)} architecture specs and {MANIFEST_FILE} written to {out_dir}")
    return manifest
