"""Terms: what a physical model weighs, declared by the feature set that computes the columns.

A term is a weighted sum of feature columns with a unit and a role in the model. The
feature set builds its terms from the same names it builds its columns with, so a renamed
or new group changes both at once, and the model types no column name of its own.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["Role", "Term", "TermSet", "report_only"]


class Role(enum.Enum):
    """How a model uses a term's amount."""

    FITTED = "fitted"  # a coefficient of its own (a device's rate or scale), fitted
    EXACT = "exact"  # added as it is (coefficient 1): a known amount a fitted scale would distort
    OPTIMIZER = "optimizer"  # a temporary held instead of the fitted terms when it is the larger
    LIBRARY = "library"  # above zero: the network loads a library with a fixed footprint, fitted
    FOOTPRINT = "footprint"  # a fixed footprint per unit of its amount (a count), fitted, beside the runtime


@dataclass(frozen=True, eq=False)
class Term:
    """`name` = sum of `columns[c] * weight` over the feature columns `c`, in `unit`.

    `tie` names the fitted term whose coefficient this one takes where the training rows
    cannot identify its own (none of them holds a share of the two worth a rate of its own,
    `perf4sight.fit.physical`). A term is itself (compared and
    hashed by identity), so that what a model derives from its terms can be kept per term."""

    name: str
    columns: Mapping[str, float]
    unit: str
    role: Role = Role.FITTED
    tie: str | None = None

    def __post_init__(self) -> None:
        if not self.columns:
            raise ValueError(f"term '{self.name}': no columns")
        object.__setattr__(self, "columns", MappingProxyType(dict(self.columns)))


@dataclass(frozen=True)
class TermSet:
    """The terms of one feature set's memory and latency models, by a name of their own."""

    name: str
    memory: tuple[Term, ...]
    latency: tuple[Term, ...]
    by_kind: Mapping[str, tuple[Term, ...]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for terms in (self.memory, self.latency):
            names = [term.name for term in terms]
            if len(set(names)) != len(names):
                raise ValueError(f"terms named twice: {names}")
            fitted = {term.name for term in terms if term.role is Role.FITTED}
            bad = [term.name for term in terms if term.tie is not None and term.tie not in fitted]
            if bad:
                raise ValueError(f"terms tied to no fitted term: {', '.join(bad)}")
        object.__setattr__(self, "by_kind", MappingProxyType({"memory": self.memory, "latency": self.latency}))

    def columns(self) -> set[str]:
        """Every column some term of either model weighs."""
        return {column for terms in self.by_kind.values() for term in terms for column in term.columns}


def report_only(columns: Iterable[str], terms: TermSet) -> list[str]:
    """The columns of a feature table that feed no model: kept for people and for the
    predictor's check that a query lies within the training ranges."""
    used = terms.columns()
    return [column for column in columns if column not in used]
