"""A disk cache of traced architectures and their recorded tensor lifetimes.

Recording a base network's iteration on the meta device takes 0.2-0.3 s (ResNet-18,
ResNet-50), and a process that predicts a network records its base again. The recording
(and the trace it belongs to) depends only on what built the network (a torchvision name
and its arguments, or a model file's bytes), its input size and classes, the stages, the
recipe, the PyTorch and torchvision that ran it and perf4sight's own code: keyed by all of
them, it is stored once and read back in milliseconds by any later process, for the base and
every pruned variant propagated from it. The list of torchvision's classification builders
(which only importing torchvision, over a second, tells) is kept the same way (`cached_value`),
and so are the widths of a torchvision network's pruning levels (`perf4sight.networks.variants`).

An entry is one `.npz` file: the arrays of the lifetimes and, as a byte array, JSON of the
key and the layers; read with `allow_pickle=False`, never unpickled. It is written whole
(a temporary file renamed over it); one that does not read back as an entry of its key
(truncated, corrupt, from another version or another key) is ignored and written anew.
The folder is bounded: past `PERF4SIGHT_CACHE_MAX_MIB` (256 by default), the entries read
longest ago go first.

Where: `$PERF4SIGHT_CACHE_DIR`, else `$XDG_CACHE_HOME/perf4sight`, else
`~/.cache/perf4sight`; `PERF4SIGHT_CACHE=0` turns it off. `perf4sight cache info` and
`perf4sight cache clear` show and empty it. This module loads no torch: the CLI's `cache`
command imports it alone.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import io
import json
import os
import zipfile
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from perf4sight.device.files import file_digest
from perf4sight.errors import ConfigError, clip
from perf4sight.files import remove_stale_temporaries, replaced

if TYPE_CHECKING:
    from perf4sight.architecture import Architecture

__all__ = ["CacheInfo", "bound_bytes", "cache_dir", "cache_info", "cached_architecture", "cached_value", "clear_cache",
           "file_digest"]

DIR_VARIABLE = "PERF4SIGHT_CACHE_DIR"
SWITCH_VARIABLE = "PERF4SIGHT_CACHE"
BOUND_VARIABLE = "PERF4SIGHT_CACHE_MAX_MIB"
_DEFAULT_BOUND_MIB = 256
_SUFFIX = ".npz"
_META = "meta"
# Raised while reading an entry that is not a whole one of its key: it is then rebuilt.
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, EOFError, zipfile.BadZipFile,
               zlib.error)


def cache_dir() -> Path | None:
    """The cache's folder, or None where `PERF4SIGHT_CACHE=0` turns the cache off."""
    if os.environ.get(SWITCH_VARIABLE, "").strip() == "0":
        return None
    given = os.environ.get(DIR_VARIABLE, "").strip()
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".cache") / "perf4sight"


def bound_bytes() -> int:
    """The most bytes the entries may take (`PERF4SIGHT_CACHE_MAX_MIB`)."""
    text = os.environ.get(BOUND_VARIABLE, "").strip()
    if not text:
        return _DEFAULT_BOUND_MIB << 20
    try:
        mib = float(text)
    except ValueError:
        mib = -1.0
    if not 0 <= mib < float(1 << 40):  # NaN too
        raise ConfigError(f"{BOUND_VARIABLE}={clip(text)}: expected a number of MiB, 0 or more")
    return int(mib * (1 << 20))


class CacheInfo(NamedTuple):
    """Where the cache is, how many entries it holds and their bytes (0 and 0 when off or empty)."""

    folder: Path | None
    entries: int
    bytes: int


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*" + _SUFFIX)) if folder.is_dir() else []


def cache_info() -> CacheInfo:
    """The cache's folder and what it holds."""
    folder = cache_dir()
    entries = _entries(folder) if folder is not None else []
    return CacheInfo(folder, len(entries), sum(_size(path) for path in entries))


def clear_cache() -> int:
    """Remove every entry (and what killed writers left); the number of entries removed."""
    folder = cache_dir()
    if folder is None or not folder.is_dir():
        return 0
    removed = 0
    for path in _entries(folder):
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            pass
    remove_stale_temporaries(folder)
    return removed


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


@functools.cache
def _code_digest() -> str:
    """A digest of perf4sight's own source: an entry made by other code is another key."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cached_architecture(key: Mapping[str, Any], make: Callable[[], Architecture]) -> Architecture:
    """The architecture stored under `key` (plain JSON values saying what determines it; the
    PyTorch and torchvision versions and perf4sight's code are added), else `make()`'s,
    stored under it. With the cache off, `make()`."""
    return _cached(key, make, _to_plain, _from_plain)


def cached_value(key: Mapping[str, Any], make: Callable[[], Any]) -> Any:
    """`make()`'s value, plain JSON data, kept as `cached_architecture` keeps an architecture
    (what torchvision's builders are, which only importing torchvision tells)."""
    return _cached(key, make, lambda value: (value, {}), lambda value, arrays: value)


def _cached(key: Mapping[str, Any], make: Callable[[], Any], encode: Callable[[Any], tuple[Any, dict[str, Any]]],
            decode: Callable[[Any, dict[str, Any]], Any]) -> Any:
    """The value stored under `key`, decoded from its plain part and arrays, else `make()`'s,
    encoded and stored."""
    entry = _entry(key)
    if entry is None:
        return make()
    path, text = entry
    stored = _read(path, text, decode)
    if stored is not None:
        return stored
    value = make()
    _write(path, text, *encode(value))
    return value


def _entry(key: Mapping[str, Any]) -> tuple[Path, str] | None:
    """The file of `key`'s entry and the key as stored (with PyTorch's version, torchvision's
    read from its metadata, and perf4sight's code); None with the cache off."""
    folder = cache_dir()
    if folder is None:
        return None
    import torch

    text = json.dumps({**key, "torch": torch.__version__, "torchvision": _torchvision_version(),
                       "code": _code_digest()}, sort_keys=True)
    return folder / (hashlib.sha256(text.encode()).hexdigest() + _SUFFIX), text


@functools.cache
def _torchvision_version() -> str | None:
    """torchvision's version from its installed metadata (importing it takes over a second)."""
    try:
        return importlib.metadata.version("torchvision")
    except importlib.metadata.PackageNotFoundError:
        return None


def _read(path: Path, key: str, decode: Callable[[Any, dict[str, Any]], Any]) -> Any:
    """The value of the entry at `path` if it is a whole one of `key`, else None."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as arrays:
            meta = json.loads(arrays[_META].tobytes().decode("utf-8"))
            if meta["key"] != key:
                return None
            value = decode(meta["value"], {name: arrays[name] for name in arrays.files if name != _META})
    except _UNREADABLE:
        return None
    with contextlib.suppress(OSError):  # a cache that is only readable is still read
        os.utime(path)  # read now: the last the bound drops
    return value


def _write(path: Path, key: str, plain: Any, arrays: dict[str, Any]) -> None:
    """Store a value's plain part and arrays under `key`, whole, then drop the entries read
    longest ago past the bound. A cache that cannot be written (no permission, a full disk)
    is left as it is."""
    import numpy as np

    meta = np.frombuffer(json.dumps({"key": key, "value": plain}).encode("utf-8"), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **{_META: meta}, **arrays)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with replaced(path) as temporary:
            temporary.write_bytes(buffer.getvalue())
        _bound(path.parent, bound_bytes())
    except OSError:
        return


def _bound(folder: Path, limit: int) -> None:
    """Remove the entries read (or written) longest ago until the rest fit in `limit` bytes."""
    entries = []
    for path in _entries(folder):
        try:
            status = path.stat()
        except FileNotFoundError:
            continue
        entries.append((status.st_mtime, status.st_size, path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= limit:
            break
        path.unlink(missing_ok=True)
        total -= size


_TIMELINE_ARRAYS = ("tensor", "allocates", "fixed_bytes", "per_sample_bytes", "copies")
_SCALING_ARRAYS = ("layer", "fixed_quantity", "per_sample_quantity")


def _to_plain(arch: Architecture) -> tuple[dict[str, Any], dict[str, Any]]:
    """JSON values of `arch`, and the arrays of its lifetimes by name (`<stage>.<field>`)."""
    import dataclasses

    plain = {field.name: getattr(arch, field.name) for field in dataclasses.fields(arch)
             if field.name not in ("layers", "lifetimes")}
    plain["layers"] = [layer.__dict__ for layer in arch.layers]
    plain["lifetimes"] = list(arch.lifetimes)
    arrays = {}
    for stage, timeline in arch.lifetimes.items():
        for name in _TIMELINE_ARRAYS:
            if getattr(timeline, name) is not None:
                arrays[f"{stage}.{name}"] = getattr(timeline, name)
        if timeline.scaling is not None:
            arrays.update({f"{stage}.{name}": getattr(timeline.scaling, name) for name in _SCALING_ARRAYS})
    return plain, arrays


def _tupled(value: Any) -> Any:
    """JSON's lists as the tuples the architecture holds."""
    return tuple(_tupled(item) for item in value) if isinstance(value, list) else value


def _from_plain(plain: dict[str, Any], arrays: dict[str, Any]) -> Architecture:
    """The architecture `_to_plain` gave; KeyError, TypeError or ValueError where the entry
    does not hold one (its arrays of one timeline must be of one length)."""
    from perf4sight.architecture import Architecture, Layer, Scaling, Timeline
    from perf4sight.device.recipe import Recipe

    lifetimes = {}
    for stage in plain["lifetimes"]:
        timeline = {name: arrays.get(f"{stage}.{name}") for name in _TIMELINE_ARRAYS}
        scaling = None
        if f"{stage}.layer" in arrays:
            scaling = Scaling(*(arrays[f"{stage}.{name}"] for name in _SCALING_ARRAYS))
        given = [array for array in (*timeline.values(), *(scaling.__dict__.values() if scaling else ()))
                 if array is not None]
        if timeline["tensor"] is None or any(array.ndim != 1 or len(array) != len(timeline["tensor"])
                                             for array in given):
            raise ValueError(f"the arrays of stage {stage} differ in length")
        lifetimes[stage] = Timeline(scaling=scaling, **timeline)
    fields = {name: _tupled(value) for name, value in plain.items() if name not in ("layers", "lifetimes")}
    fields["recipe"] = Recipe(*fields["recipe"])
    layers = tuple(Layer(**{name: _tupled(value) for name, value in layer.items()}) for layer in plain["layers"])
    return Architecture(**fields, layers=layers, lifetimes=lifetimes)
