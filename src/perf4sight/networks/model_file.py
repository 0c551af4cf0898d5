"""Model description files: a Python file with a factory function that builds the network.

As in the original tool, the factory is named after the network (`resnet18_50.py`
holds `resnet18`), or given explicitly as `file.py:factory`. The file is imported by
path, so it needs no package around it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from torch import nn

from perf4sight.device.models import call_factory, exec_model_file, split_model_source
from perf4sight.errors import DataNotFoundError, ModelFileError
from perf4sight.networks.trust import is_model_file

__all__ = ["split_model_source", "is_model_file", "factory_names", "import_factory", "build_from_file"]


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
    module = exec_model_file(path)
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
    """Call a model file's factory (with `num_classes` when given and it takes them:
    `call_factory`) and check it gives a module."""
    path, factory = split_model_source(source)
    return call_factory(path, import_factory(path, factory), num_classes)
