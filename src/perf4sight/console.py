"""The one place that writes to the console: messages, tables and progress bars.

Stage functions report through here so that `--quiet` and non-terminal output are
handled once. Progress bars are hidden when quiet or when stderr is not a terminal.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

__all__ = ["out", "err", "set_quiet", "reset", "info", "warn", "collected_warnings", "print_table", "progress"]

# Output that is not a terminal (a log file, CI) gets room for the widest table (a plan's
# recipes and notes, which a narrower table cuts), whatever COLUMNS says there (test
# runners and CI set it to 80 with no terminal to fit).
_PIPE_WIDTH = 200
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)
for _console in (out, err):
    if not _console.is_terminal:
        _console.width = _PIPE_WIDTH
_state = {"quiet": False}
_warned: set[str] = set()
_collecting: list[list[str]] = []  # the lists of the `collected_warnings` blocks open


def set_quiet(quiet: bool) -> None:
    """Silence informational messages and progress bars (tables and errors still show)."""
    _state["quiet"] = quiet


def reset() -> None:
    """Back to the start: not quiet, and no warning shown yet (for a process that runs one
    job after another, as the tests do)."""
    set_quiet(False)
    _warned.clear()


def info(message: str) -> None:
    """An informational line on stdout, unless quiet."""
    if not _state["quiet"]:
        out.print(message)


def warn(message: str) -> None:
    """A warning line on stderr, never wrapped, its text as it is (a `[section]` is no markup);
    shown even when quiet, and once per process (a network predicted for several recipes is
    described once)."""
    for collected in _collecting:
        collected.append(message)
    if message in _warned:
        return
    _warned.add(message)
    err.print(f"[yellow]warning:[/yellow] {escape(message)}", soft_wrap=True)


@contextlib.contextmanager
def collected_warnings() -> Iterator[list[str]]:
    """The warnings given inside the block, in order, each once (also one shown before it): for
    a report that must say what its output said."""
    collected: list[str] = []
    _collecting.append(collected)
    try:
        yield collected
    finally:
        _collecting.remove(collected)
        collected[:] = list(dict.fromkeys(collected))


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a table; floats get 2 decimals."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row))
    out.print(table)


@contextlib.contextmanager
def progress(description: str, total: int) -> Iterator[Any]:
    """A progress bar; yields an object with `advance(label)` to step it and `label(text)`.

    On a terminal it is a live bar on stderr; otherwise (a log file, CI) each step is one
    line on stderr, so long work still shows its progress. Quiet hides both.
    """
    quiet = _state["quiet"]
    enabled = not quiet and err.is_terminal
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        disable=not enabled,
    )

    class _Step:
        def __init__(self) -> None:
            self.task = bar.add_task(description, total=total)

        def advance(self, label: str) -> None:
            self.label(label)
            bar.advance(self.task)
            if not enabled and not quiet:
                done = int(bar.tasks[0].completed)
                err.print(f"{description} [{done}/{total}] {label}")

        def label(self, label: str) -> None:
            bar.update(self.task, description=f"{description}: {label}")

    with bar:
        yield _Step()
