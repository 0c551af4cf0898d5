"""create_network_dataset: prune each network at every level and store its architecture spec.

For each network the dependency graph is built once and every level is pruned from a
clone on the meta device (shapes only), except in `l1-norm` mode, where the channels to
drop are chosen from the weights the network was built with (seeded). The manifest
lists every spec in the folder: those there when the run began (of earlier or stopped
runs, each row made from its spec) and each one written, the file rewritten after every
spec: a run stopped at any point leaves a manifest that agrees with the folder (but for the
one spec written just before the stop). The specs are what later stages load.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn

from perf4sight import console
from perf4sight.config import NetworkDatasetSettings
from perf4sight.device.lock import FolderLock
from perf4sight.errors import ArgumentError, DataNotFoundError, NetworkError, clip
from perf4sight.files import read_json, remove_stale_temporaries, write_text
from perf4sight.networks.checks import check_settings_values
from perf4sight.networks.loader import load_network
from perf4sight.networks.model_file import is_model_file, split_model_source
from perf4sight.networks.trust import model_file_folders, trust_model_folder
from perf4sight.networks.model_writer import write_model_file
from perf4sight.networks.pruning import ChannelPruner
from perf4sight.networks.registry import build_torchvision, is_torchvision_network, known_networks, resolve_network
from perf4sight.networks.spec import (architecture_from_spec, read_spec, spec_from_module, spec_macs, spec_text,
                                      write_spec)

__all__ = ["MANIFEST_COLUMNS", "MANIFEST_FILE", "check_settings", "create_network_dataset"]

MANIFEST_FILE = "manifest.csv"
# Held by a `prune` in its folder: two at once would each rewrite the manifest without the other's specs.
_LOCK_FILE = "prune.lock"
MANIFEST_COLUMNS = ("name", "network", "target_level", "level_reached", "params", "macs", "spec_file")


def check_settings(settings: NetworkDatasetSettings) -> tuple[list[str], list[int]]:
    """Refuse bad settings before any work, a network that cannot be found among them;
    returns the networks and the levels without repeats."""
    check_settings_values(settings)
    for network in settings.networks:
        _check_found(network, settings.model_desc_dir)
    return list(dict.fromkeys(settings.networks)), list(dict.fromkeys(settings.pruning_perc))


def _check_found(network: str, model_desc_dir: Path | None) -> None:
    """Refuse a network name that names nothing the loader can find (as `load_network`
    looks: torchvision, a model file or spec, `<model_desc_dir>/<name>.py` or `.json`)."""
    if is_torchvision_network(network):
        return
    if is_model_file(network) or network.endswith(".json"):
        path = split_model_source(network)[0]
        if not path.is_file():
            raise ArgumentError(f"networks: {clip(str(path))} not found")
        return
    if model_desc_dir is not None and any((model_desc_dir / f"{network}{suffix}").is_file()
                                          for suffix in (".py", ".json")):
        return
    where = f" (nor {network}.py or {network}.json in {model_desc_dir})" if model_desc_dir is not None else ""
    raise ArgumentError(f"networks: unknown network {clip(repr(network))}{where}; known networks: "
                      f"{', '.join(known_networks())}")


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


def _spec_name(net: str, network: str) -> str:
    """`net`, the name the specs of `network` are written under (`<net>_<level>.json`), if it
    names a file in the output folder and nothing else (no folder, no `..`); else NetworkError."""
    if not net or net.startswith(".") or any(c in net for c in "/\\\0:"):
        raise NetworkError(f"networks: {clip(repr(network))} is named {clip(repr(net))}, which is no file name: "
                           "its specs would be written outside the output folder")
    return net


def _check_replaceable(spec: dict[str, Any], path: Path, settings: NetworkDatasetSettings, sources: set[Path]) -> None:
    """Refuse to write `spec` at `path` over an input of the run (`sources`, the networks'
    files) or, unless `overwrite`, over a spec that differs from it (another input size,
    classes, seed, mode or network): logs may have been measured against the one there."""
    if path.resolve() in sources:
        raise NetworkError(f"{path}: is the network file this run reads; prune it into another folder")
    if settings.overwrite or not path.is_file():
        return
    text = spec_text(spec, path)
    if path.read_bytes() == text.encode():
        return
    there, new = read_json(path, what="architecture spec", error=NetworkError), json.loads(text)
    there = there if isinstance(there, dict) else {}
    keys = [key for key in dict.fromkeys([*new, *there])
            if there.get(key) != new.get(key) and key not in ("layers", "out_channels")]
    shown = ", ".join(f"{key} {clip(repr(there.get(key)), 40)} there, {clip(repr(new.get(key)), 40)} now"
                      for key in keys[:2]) or "its layers differ"
    raise NetworkError(f"{path}: a different spec is there ({shown}); logs may have been measured against it: "
                       "set overwrite = True (--overwrite) to replace it, or prune into another folder")


def _manifest_row(spec: dict[str, Any], spec_file: Path) -> tuple[Any, ...]:
    """A spec's manifest row (MANIFEST_COLUMNS), from the spec alone."""
    params = spec.get("params") or architecture_from_spec(spec).params
    reached = spec.get("level_reached", math.nan)
    return (spec["name"], spec["net"], spec.get("prune_level"), reached, params, spec_macs(spec), str(spec_file))


def _rows_present(out_dir: Path) -> dict[str, tuple[Any, ...]]:
    """The manifest rows of the specs already in `out_dir`, by file; files that are not
    specs (other JSON) are not listed."""
    rows = {}
    for path in sorted(out_dir.glob("*.json")):
        try:
            rows[str(path)] = _manifest_row(read_spec(path), path)
        except (NetworkError, DataNotFoundError):
            continue
    return rows


def _write_manifest(out_dir: Path, rows: dict[str, tuple[Any, ...]]) -> pd.DataFrame:
    manifest = pd.DataFrame(list(rows.values()), columns=list(MANIFEST_COLUMNS))
    write_text(out_dir / MANIFEST_FILE, manifest.to_csv(index=False))
    return manifest


def create_network_dataset(settings: NetworkDatasetSettings) -> pd.DataFrame:
    """Prune every network at every level; write specs (and model files on request) and a manifest.

    Returns the manifest: one row per pruned network with the level asked for, the level
    reached, its parameters and its multiply-accumulates for one input of `input_size`.
    """
    networks, levels = check_settings(settings)
    # the specs written here name these model files: the user named them for this run
    for folder in model_file_folders(settings.networks, settings.model_desc_dir):
        trust_model_folder(folder)
    for key, given, kept in (("networks", settings.networks, networks), ("pruning_perc", settings.pruning_perc, levels)):
        if len(kept) < len(given):
            console.info(f"{key}: {len(given) - len(kept)} repeated entries made once")
    with FolderLock(settings.spec_dir, _LOCK_FILE, "{folder}: another prune (pid {pid}) is writing specs into "
                                                   "this folder; wait for it to end or give another folder"):
        return _write_specs(settings, networks, levels)


def _write_specs(settings: NetworkDatasetSettings, networks: list[str], levels: list[int]) -> pd.DataFrame:
    """`create_network_dataset`'s work, in its folder (`spec_dir`) that it holds the lock of."""
    out_dir = settings.spec_dir
    remove_stale_temporaries(out_dir)  # of a run killed while writing
    input_size = tuple(settings.input_size)
    rows = _rows_present(out_dir)
    written = 0
    sources = {split_model_source(network)[0].resolve() for network in networks
               if is_model_file(network) or network.endswith(".json")}
    manifest = _write_manifest(out_dir, rows)
    with console.progress("pruning", len(networks) * len(levels)) as bar:
        for network in networks:
            bar.label(network)
            net, module, base = _base_network(network, settings)
            net = _spec_name(net, network)
            pruner = ChannelPruner(module, input_size=input_size, mode=settings.mode, seed=settings.seed, name=net)
            for level in levels:
                name = f"{net}_{level}"
                pruned = pruner.prune(level, meta=True)
                if abs(pruned.level - level) > 1:
                    console.warn(f"{name}: reached level {pruned.level:.2f}, the closest {net} allows")
                spec = spec_from_module(
                    pruned.module, name=name, net=net, prune_level=level, level_reached=pruned.level,
                    input_size=input_size, num_classes=settings.num_classes, **base,
                )
                _check_replaceable(spec, out_dir / f"{name}.json", settings, sources)
                spec_file = write_spec(spec, out_dir / f"{name}.json")
                if settings.write_model_files:
                    write_model_file(
                        pruned.module, out_dir / f"{name}.py", net=net, name=name,
                        num_classes=settings.num_classes, input_size=input_size,
                    )
                rows[str(spec_file)] = _manifest_row(spec, spec_file)
                written += 1
                manifest = _write_manifest(out_dir, rows)  # after each spec: a stopped run lists what it wrote
                bar.advance(name)
    console.info(f"{written} architecture specs written to {out_dir}; {MANIFEST_FILE} lists the {len(rows)} there")
    return manifest
