"""Model description files: a Python file with a factory function that builds the network.

As in the original tool, the factory is named after the network (`resnet18_50.py`
holds `resnet18`), or given explicitly as `file.py:factory`. The file is imported by
path, so it needs no package around it.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path

from torch import nn

from perf4sight.device.models import split_model_source
from perf4sight.errors import DataNotFoundError, ModelFileError

__all__ = ["split_model_source", "is_model_file", "factory_names", "import_factory", "build_from_file"]


def is_model_file(source: str | Path) -> bool:
    """True for `something.py` or `something.py:factory`."""
    return bool(re.search(r"\.py(:\w+)?$", str(source)))


def factory_names(path: Path) -> list[str]:
    """Factory names tried for a file: its stem, then the stem without a `_<level>` suffix."""
    names = [path.stem]
    base = re.sub(r"_\d+$", "", path.stem)
    if base != path.stem:
        names.append(base)
    return names


def import_factory(path: Path, factory: str | None = None) -> Callable[..., nn.Module]:
    """Import `path` and return its factory; errors name the file and what went wrong."""
    if not path.is_file():
        raise DataNotFoundError(f"model description file not found: {path}")
    module_name = f"_perf4sight_model_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ModelFileError(f"{path}: cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # any error in user code becomes one line naming the file
        sys.modules.pop(module_name, None)
        raise ModelFileError(f"{path}: import failed: {type(exc).__name__}: {exc}") from exc
    candidates = [factory] if factory else factory_names(path)
    for name in candidates:
        func = getattr(module, name, None)
        if callable(func):
            return func
    available = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
    raise ModelFileError(
        f"{path}: no factory function {' or '.join(repr(n) for n in candidates)}; "
        f"callables in the file: {', '.join(available) or 'none'}"
    )


def build_from_file(source: str | Path, *, num_classes: int | None = None) -> nn.Module:
    """Call a model file's factory (with `num_classes` when given) and check it gives a module."""
    path, factory = split_model_source(source)
    func = import_factory(path, factory)
    try:
        module = func() if num_classes is None else func(num_classes=num_classes)
    except Exception as exc:
        raise ModelFileError(
            f"{path}: factory {func.__name__}() failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(module, nn.Module):
        raise ModelFileError(f"{path}: factory {func.__name__}() returned {type(module).__name__}, not an nn.Module")
    return module
