"""Plain-text messages, tables and progress lines for a campaign run without the host's
console (the bundle's runner); the host hands its own console, of the same functions,
to the campaign instead."""

import contextlib
import sys
from typing import Any, Iterator, Sequence

__all__ = ["set_quiet", "info", "warn", "print_table", "progress"]

_state = {"quiet": False}


def set_quiet(quiet: bool) -> None:
    """Silence informational messages and progress lines (tables and warnings still show)."""
    _state["quiet"] = quiet


def info(message: str) -> None:
    """An informational line on stdout, unless quiet."""
    if not _state["quiet"]:
        print(message, flush=True)


def warn(message: str) -> None:
    """A warning line on stderr; shown even when quiet."""
    print("warning: " + message, file=sys.stderr, flush=True)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a table; floats get 2 decimals."""
    cells = [list(columns)] + [["{:.2f}".format(v) if isinstance(v, float) else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    print(title)
    for row in cells:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths)))
    sys.stdout.flush()


class _Steps:
    def __init__(self, description: str, total: int) -> None:
        self.description = description
        self.total = total
        self.done = 0

    def advance(self, label: str) -> None:
        self.done += 1
        if not _state["quiet"]:
            print("{} [{}/{}] {}".format(self.description, self.done, self.total, label), file=sys.stderr, flush=True)

    def label(self, label: str) -> None:
        """Nothing to redraw: each step is one line when it ends."""


@contextlib.contextmanager
def progress(description: str, total: int) -> Iterator[_Steps]:
    """Yields an object with `advance(label)`, one line on stderr a step, and `label(text)`."""
    yield _Steps(description, total)
