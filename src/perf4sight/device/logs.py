"""Profiling logs: one '|'-separated CSV per model and variable, the original's layout.

`<log_dir>/<memory|latency>/<model>.csv` is the journal: rows are appended and fsynced
one at a time, the last column is the original's `params` dict, and it is what a resumed
campaign reads to skip recorded tests. `<model>-gt.csv` beside it gets the same rows with
`params` expanded into columns, as the original's clean-up step made it, with `exec_stage`
named `stage`: appended after each journalled row, and rewritten from the journal when a
campaign resumes.

Columns beyond the original's: `mem_context` (MiB of runtime context in mem_used),
`latency_iters_ms` (each timed iteration, a list literal), `cpu_elsewhere` (the share of
the host's CPU other processes took while a latency test was timed; empty when too short
to tell, `contention`), `status` (`ok`; `error` for
an exception such as out of memory; `crashed` when the worker died; `skipped` for a
batch size not run after a smaller one failed under till_first_fail) and `error`. Rows
are appended in the columns of the file's own header, so a journal begun by a version
with fewer columns stays readable when resumed.
"""

import ast
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from .errors import LogFormatError
from .files import write_text
from .test_config import ProfileTest

__all__ = [
    "COLUMNS",
    "GT_COLUMNS",
    "GT_SUFFIX",
    "LogRow",
    "journal_path",
    "gt_path",
    "read_journal",
    "append_gt_row",
    "append_row",
    "write_gt",
]

_MEMORY_FIGURES = ["mem_alloc", "mem_reserved", "mem_used", "mem_avail", "free", "capacity"]
_PARAM_COLUMNS = ["test_var", "bs", "dataset", "net_name", "model", "stage"]
COLUMNS: Dict[str, List[str]] = {
    "memory": ["passed"] + _MEMORY_FIGURES + ["mem_context", "status", "error", "params"],
    "latency": ["passed", "latency", "latency_iters_ms", "cpu_elsewhere", "status", "error", "params"],
}
GT_COLUMNS: Dict[str, List[str]] = {
    "memory": ["passed"] + _MEMORY_FIGURES + _PARAM_COLUMNS + ["mem_context", "status", "error"],
    "latency": ["passed", "latency"] + _PARAM_COLUMNS + ["latency_iters_ms", "cpu_elsewhere", "status", "error"],
}
SEPARATOR = "|"
# `<model>-gt.csv`: the expanded log that fingerprinting reads.
GT_SUFFIX = "-gt.csv"

LogRow = Dict[str, Any]
"""A row: column -> value (None for an empty field); `params` is the original's dict."""


def journal_path(log_dir: Path, test: ProfileTest) -> Path:
    """The journal of `test`'s model and variable."""
    return log_dir / test.test_var / f"{test.log_name}.csv"


def gt_path(path: Path) -> Path:
    """The expanded `-gt.csv` beside the journal at `path`."""
    return path.with_name(f"{path.stem}{GT_SUFFIX}")


def read_journal(path: Path, *, repair: bool = False) -> List[LogRow]:
    """The rows of a journal; a torn last line (a write cut short) is ignored, or cut off
    the file when `repair`, so that the next append starts on a fresh line."""
    if not path.exists():
        return []
    data = path.read_bytes()
    complete, newline, torn = data.rpartition(b"\n")
    lines = _decode(complete, path).splitlines() if complete else []  # a file not ours is not cut
    if torn and repair:
        with open(path, "r+b") as handle:
            handle.truncate(len(complete) + len(newline))
            os.fsync(handle.fileno())
    if not lines:
        return []
    header = lines[0].split(SEPARATOR)
    if header[0] != "passed" or header[-1] != "params":
        raise LogFormatError(f"{path}: line 1: expected a header 'passed|...|params', got {lines[0]!r}")
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        if line.strip():
            rows.append(_parse(line, header, where=f"{path}: line {number}"))
    return rows


def _decode(data: bytes, path: Path) -> str:
    """The journal's text; LogFormatError naming the line when it is not UTF-8 (perf4sight
    writes UTF-8, so another encoding means a foreign or damaged file)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise LogFormatError(f"{path}: line {line}: not UTF-8 text ({exc.reason})") from None


def _parse(line: str, header: List[str], *, where: str) -> LogRow:
    fields = line.split(SEPARATOR)
    if len(fields) < len(header):
        raise LogFormatError(f"{where}: {len(fields)} fields, the header has {len(header)}")
    # params is last and may itself contain the separator
    fields = fields[: len(header) - 1] + [SEPARATOR.join(fields[len(header) - 1:])]
    row: LogRow = {}
    for name, text in zip(header, fields):
        row[name] = _value(name, text, where=where)
    try:
        ProfileTest.from_params(row["params"])
    except (KeyError, ValueError, TypeError) as exc:
        raise LogFormatError(f"{where}: params lacks or mangles {exc}") from None
    return row


def _value(name: str, text: str, *, where: str) -> Any:
    if name in ("status", "error"):
        return text or None
    if name == "passed":
        if text not in ("True", "False"):
            raise LogFormatError(f"{where}: passed must be True or False, got {text!r}")
        return text == "True"
    if text in ("", "None", "-1"):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise LogFormatError(f"{where}: column {name}: not a literal: {text[:80]!r}") from None


def append_row(path: Path, test_var: str, row: LogRow) -> None:
    """Append one row (writing the header first for a new file) and fsync it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = _header(path)
    text = ""
    if columns is None:
        columns = COLUMNS[test_var]
        text = SEPARATOR.join(columns) + "\n"
    text += SEPARATOR.join(_field(row.get(c)) for c in columns) + "\n"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def _header(path: Path) -> Optional[List[str]]:
    """The columns named by the file's first line; None for a missing or empty file."""
    if not path.exists():
        return None
    with open(path, "rb") as handle:
        first = _decode(handle.readline(), path).rstrip("\r\n")
    return first.split(SEPARATOR) if first else None


def _field(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return " ".join(value.replace(SEPARATOR, "/").split())
    return repr(value) if isinstance(value, (float, list, dict)) else str(value)


def write_gt(path: Path, test_var: str) -> Path:
    """Rewrite `<model>-gt.csv` from the journal at `path`; returns the gt path."""
    target = gt_path(path)
    lines = [SEPARATOR.join(GT_COLUMNS[test_var])]
    lines.extend(_gt_line(row, GT_COLUMNS[test_var]) for row in read_journal(path))
    write_text(target, "\n".join(lines) + "\n")
    return target


def append_gt_row(path: Path, test_var: str, row: LogRow) -> None:
    """Append the row just journalled at `path` to `<model>-gt.csv` (header first for a new
    file). Not synced: should a crash lose it, the resumed campaign rewrites the file from
    the journal."""
    target = gt_path(path)
    columns = _header(target)
    text = ""
    if columns is None:
        columns = GT_COLUMNS[test_var]
        text = SEPARATOR.join(columns) + "\n"
    with open(target, "a", encoding="utf-8") as handle:
        handle.write(text + _gt_line(row, columns) + "\n")


def _gt_line(row: LogRow, columns: List[str]) -> str:
    """A journal row with `params` expanded into `columns` and `exec_stage` named `stage`."""
    params = row["params"]
    expanded = dict(row)
    expanded.update((k, v) for k, v in params.items() if k != "exec_stage")
    expanded["stage"] = params["exec_stage"]
    return SEPARATOR.join(_field(expanded.get(c)) for c in columns)
