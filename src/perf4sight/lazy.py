"""Public names of a package imported on first use (PEP 562), so that importing the package, or
one light module of it, does not load torch, scikit-learn or pandas: the CLI checks its
arguments before any of them is loaded."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, modules: Mapping[str, Sequence[str]], *, own: Sequence[str] = ()
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """The `__all__`, `__getattr__` and `__dir__` of `package`, whose public names are those of
    `modules` (module, relative to the package -> the names it defines) and those it defines
    itself (`own`): `from package import name` imports the name's module then, and
    `dir(package)` lists the names."""
    where = {name: module for module, names in modules.items() for name in names}
    public = [*own, *where]

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module '{package}' has no attribute '{name}'")
        return getattr(importlib.import_module(where[name], package), name)

    def __dir__() -> list[str]:
        return sorted(public)

    return public, __getattr__, __dir__
