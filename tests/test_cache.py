"""The disk cache of traced and recorded networks: what it reads back is what was recorded,
a damaged or foreign entry is recorded again, it keeps within its bound, and the CLI shows
and empties it. Each test has its own empty cache folder (conftest)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perf4sight.architecture import Architecture, Detail
from perf4sight.cache import cache_dir, cache_info
from perf4sight.config import NetworkDatasetSettings
from perf4sight.features.replay import replay_features
from perf4sight.networks import create_network_dataset, forget_traces, load_architecture, registry

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "model_files"
SMALL = {"input_size": (3, 32, 32), "num_classes": 10}
BATCH_SIZES = [1, 3, 8, 50, 200]
PERF4SIGHT = Path(sys.executable).with_name("perf4sight")


def _load(source: str | Path) -> Architecture:
    forget_traces()  # as a new process would: only the disk cache is left
    return load_architecture(source, needs=Detail.LIFETIMES, **SMALL)


def _assert_same(read: Architecture, made: Architecture) -> None:
    assert read == made and read.lifetimes.keys() == made.lifetimes.keys()
    for stage, timeline in made.lifetimes.items():
        other = read.lifetimes[stage]
        assert other.same_events(timeline)
        assert (other.scaling is None) == (timeline.scaling is None)
        if timeline.scaling is not None:
            for name in ("layer", "fixed_quantity", "per_sample_quantity"):
                assert np.array_equal(getattr(other.scaling, name), getattr(timeline.scaling, name))
    assert replay_features(read, BATCH_SIZES).equals(replay_features(made, BATCH_SIZES))


def test_a_base_and_its_pruned_variant_read_back_what_was_recorded(
    recordings: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_network_dataset(NetworkDatasetSettings(
        networks=["resnet18"], pruning_perc=[50], model_path=tmp_path / "specs", **SMALL,
    ))
    variant = tmp_path / "specs" / "resnet18_50.json"
    made = {source: _load(source) for source in ("resnet18", variant)}
    # torchvision's builders, the trace, and it with its recording
    assert recordings == ["resnet18"] and cache_info().entries == 3
    read = {source: _load(source) for source in made}
    assert recordings == ["resnet18"]
    for source, arch in made.items():
        _assert_same(read[source], arch)
    monkeypatch.setenv("PERF4SIGHT_CACHE", "0")  # off: recorded again, nothing read or written
    shutil.rmtree(os.environ["PERF4SIGHT_CACHE_DIR"])
    for source, arch in made.items():
        _assert_same(_load(source), arch)
    assert recordings == ["resnet18"] * 3  # for each source, as each load starts afresh
    assert not Path(os.environ["PERF4SIGHT_CACHE_DIR"]).exists()


# A new process loading a network by name: whether it imported torchvision, and what it got.
_BY_NAME = """
import hashlib, json, sys
from perf4sight.architecture import Detail
from perf4sight.networks import load_architecture
arch = load_architecture(sys.argv[1], needs=Detail.LIFETIMES, input_size=(3, 32, 32), num_classes=10)
print(json.dumps({"torchvision": "torchvision" in sys.modules, "name": arch.name,
                  "arch": hashlib.sha256(repr((arch.layers, arch.lifetimes)).encode()).hexdigest()}))
"""


@pytest.mark.slow
def test_a_cached_network_is_read_by_name_without_importing_torchvision(tmp_path: Path) -> None:
    """torchvision's import (it loads `torch._dynamo`) takes longer than a cached query's work:
    a later process checks the name against the builders the cache lists and reads the network
    it holds, the one recorded, without importing torchvision."""
    env = {**os.environ, "PERF4SIGHT_CACHE_DIR": str(tmp_path / "cache")}

    def load(name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", _BY_NAME, name], capture_output=True, text=True, env=env,
                              timeout=120)

    first, second = (json.loads(load("mobilenetv2").stdout) for _ in range(2))  # an alias, as users write it
    assert first["torchvision"] and not second["torchvision"]
    assert second["name"] == first["name"] == "mobilenetv2" and second["arch"] == first["arch"]
    unknown = load("mobilenetv9")  # a name no entry holds is checked as before
    assert unknown.returncode != 0 and "unknown network 'mobilenetv9'" in unknown.stderr


def test_a_model_file_is_read_back_until_its_bytes_change(recordings: list[str], tmp_path: Path) -> None:
    path = tmp_path / "mobilenet_like.py"
    shutil.copy(EXAMPLES / "mobilenet_like.py", path)
    made = _load(path)
    _assert_same(_load(path), made)
    assert recordings == ["mobilenet_like"]
    path.write_text(path.read_text() + "\n# changed\n")
    _load(path)
    assert recordings == ["mobilenet_like", "mobilenet_like"]


def test_the_models_reference_network_is_recorded_once(recordings: list[str]) -> None:
    """Loading a stored model computes a reference network's features (`perf4sight.fit.store`):
    a later process reads its recording back."""
    from perf4sight.features import FEATURE_SETS
    from perf4sight.fit import store

    tables = []
    for _ in range(2):
        store._probe_features.cache_clear()  # as a new process would
        tables.append(store._probe_features(FEATURE_SETS["replay"], "training"))
    assert len(recordings) == 1 and tables[1].equals(tables[0])


@pytest.mark.parametrize("damage", ["truncated", "garbage", "foreign", "inconsistent"])
def test_a_damaged_or_foreign_entry_is_recorded_again(recordings: list[str], damage: str) -> None:
    made = _load("resnet18")
    squeezenet = _load("squeezenet")
    entries = sorted(cache_dir().glob("*.npz"), key=lambda path: path.stat().st_size)
    for path in entries:
        data = path.read_bytes()
        if damage == "truncated":
            path.write_bytes(data[: len(data) // 2])
        elif damage == "garbage":
            path.write_bytes(b"\x93NUMPY" + os.urandom(len(data)))
        elif damage == "inconsistent":  # its own key, a timeline's arrays of two lengths
            with np.load(path, allow_pickle=False) as stored:
                arrays = {name: stored[name][:-1] if name.endswith(".tensor") else stored[name]
                          for name in stored.files}
            with path.open("wb") as out:
                np.savez(out, **arrays)
    if damage == "foreign":  # another key's entry under these names
        for path, other in zip(entries, entries[1:] + entries[:1]):
            shutil.copy(other, path.with_suffix(".swap"))
        for path in entries:
            path.with_suffix(".swap").replace(path)
    before = len(recordings)
    _assert_same(_load("resnet18"), made)
    _assert_same(_load("squeezenet"), squeezenet)
    assert len(recordings) == before + 2  # both recorded again ...
    _assert_same(_load("resnet18"), made)
    assert len(recordings) == before + 2  # ... and stored whole again


def test_torchvision_builders_are_listed_again_from_a_damaged_entry(recordings: list[str]) -> None:
    names = registry.known_networks()  # listed and stored (the fixture cleared the process's list)
    (entry,) = cache_dir().glob("*.npz")
    entry.write_bytes(b"\x93NUMPY" + os.urandom(64))
    registry._catalogue.cache_clear()  # as a new process would
    assert registry.known_networks() == names and "aux_logits" in registry.builder_arguments("googlenet")
    with np.load(entry, allow_pickle=False) as stored:  # and stored whole again
        assert stored.files == ["meta"]


def _entry_bytes(folder: Path) -> dict[Path, int]:
    return {path: path.stat().st_size for path in folder.glob("*.npz")}


def test_the_entries_read_longest_ago_go_past_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def resnet18_at_48() -> None:
        forget_traces()
        load_architecture("resnet18", needs=Detail.LIFETIMES, input_size=(3, 48, 48), num_classes=10)

    folder = cache_dir()
    monkeypatch.setenv("PERF4SIGHT_CACHE_DIR", str(tmp_path / "elsewhere"))
    resnet18_at_48()
    coming = sum(_entry_bytes(tmp_path / "elsewhere").values())  # what it will write
    monkeypatch.setenv("PERF4SIGHT_CACHE_DIR", str(folder))
    _load("squeezenet")
    _load("resnet18")
    sizes = _entry_bytes(folder)
    order = sorted(sizes)  # an order of reading: the first read longest ago
    for age, path in enumerate(reversed(order)):
        os.utime(path, (1e9 - age, 1e9 - age))
    oldest, *rest = order
    room = coming + sum(sizes[path] for path in rest)  # for every entry but the oldest
    monkeypatch.setenv("PERF4SIGHT_CACHE_MAX_MIB", str(room / (1 << 20)))
    resnet18_at_48()
    left = _entry_bytes(folder)
    assert oldest not in left and set(rest) <= set(left) and len(left) == len(order) + 1
    assert sum(left.values()) <= room


def _cli(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PERF4SIGHT), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_the_cli_shows_and_empties_the_cache(tmp_path: Path) -> None:
    _load("squeezenet")
    folder = cache_dir()
    # the trace and its recording, and torchvision's builders where this process had not listed them yet
    entries = cache_info().entries
    assert entries in (2, 3)
    done = _cli(["cache", "info"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{folder}: {entries} entries, ") and "(at most 256 MiB)" in done.stdout
    done = _cli(["cache", "clear"])
    assert done.returncode == 0 and done.stdout.strip() == f"removed {entries} entries from {folder}"
    assert cache_info().entries == 0
    assert _cli(["cache", "info"], PERF4SIGHT_CACHE="0").stdout.strip() == "the cache is off (PERF4SIGHT_CACHE=0)"
    done = _cli(["cache", "info"], PERF4SIGHT_CACHE_MAX_MIB="lots")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["error: PERF4SIGHT_CACHE_MAX_MIB=lots: expected a number of MiB, 0 or more"]
