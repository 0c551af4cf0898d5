"""Values derived from an architecture, kept while it lives.

An `Architecture` is immutable data, and what is computed from it (its feature tables, its
family key) is asked for again by every model and every refit that sees it: fingerprinting
refits a model once per network left out, each time on the same architectures, and a
prediction evaluates two models of one feature set. What is derived is kept per
architecture object (by identity: two descriptions loaded apart are two objects, never
mixed up) and dropped with it.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable
from typing import Any

from perf4sight.architecture.ir import Architecture

__all__ = ["derived_values"]

_KEPT: dict[int, dict[Hashable, Any]] = {}


def derived_values(arch: Architecture) -> dict[Hashable, Any]:
    """The values kept for `arch` (a dict its users fill by key), gone when `arch` is."""
    key = id(arch)
    kept = _KEPT.get(key)
    if kept is None:
        kept = _KEPT[key] = {}
        weakref.finalize(arch, _KEPT.pop, key, None)
    return kept
