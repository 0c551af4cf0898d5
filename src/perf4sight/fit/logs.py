"""Profiler logs: find the `<net>_<level>-gt.csv` files and read them into one table.

The logs are the profiler's '|'-separated "-gt" CSVs (the TX2 README lists the columns).
Each row is checked as it is read, so that a broken file is reported by name and line
rather than surfacing later as a NaN in a fitted model.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from perf4sight.device.logs import GT_SUFFIX
from perf4sight.errors import DataNotFoundError, LogFormatError

__all__ = ["REQUIRED_COLUMNS", "gt_log_path", "find_logs", "read_gt_log", "read_logs"]

REQUIRED_COLUMNS = ("passed", "bs", "model")
_MISSING = {"", "none", "nan", "null"}


def gt_log_path(log_dir: str | Path, net: str, level: int | str) -> Path:
    """Where the profiler writes the log of `<net>_<level>` in `log_dir`."""
    return Path(log_dir) / f"{net}_{level}{GT_SUFFIX}"


def find_logs(nets: Sequence[str], levels: Sequence[int], log_dirs: Sequence[str | Path]) -> list[tuple[str, Path]]:
    """(net, path) of every existing log for nets x levels in any of `log_dirs`.

    A level that is missing for one net is skipped; when nothing matches at all, the error
    lists every path searched. A net without a single log is an error too (a misspelt name
    would otherwise leave the fit to the other networks without a word); it names the
    networks the folders do hold.
    """
    searched: list[Path] = []
    found: list[tuple[str, Path]] = []
    for net in nets:
        for log_dir in log_dirs:
            for level in levels:
                path = gt_log_path(log_dir, net, level)
                searched.append(path)
                if path.is_file():
                    found.append((net, path))
    if not found:
        shown = ", ".join(str(p) for p in searched) or "(no nets, levels or log directories given)"
        raise DataNotFoundError(f"no profiling logs found; searched: {shown}")
    absent = [net for net in dict.fromkeys(nets) if net not in {net for net, _ in found}]
    if absent:
        held = sorted({path.name[: -len(GT_SUFFIX)].rpartition("_")[0]
                       for log_dir in log_dirs for path in Path(log_dir).glob(f"*_*{GT_SUFFIX}")})
        raise DataNotFoundError(
            f"no profiling logs of {', '.join(repr(net) for net in absent)} at levels {list(levels)} in "
            f"{', '.join(str(d) for d in log_dirs)}; the logs there are of: {', '.join(held) or 'no network'}"
        )
    return found


def _bool(text: str) -> bool | None:
    return {"true": True, "false": False}.get(text.strip().lower())


def _number(text: str) -> float | None:
    """A float, NaN for an empty or 'None' field, or None when the text is not a number."""
    if text.strip().lower() in _MISSING:
        return math.nan
    try:
        return float(text)
    except ValueError:
        return None


def read_gt_log(path: str | Path, targets: Sequence[str]) -> pd.DataFrame:
    """One log as a DataFrame with `passed` (bool), `bs` (int), `model` (str) and `targets` (float).

    A passed row must have a value for every target; a failed row (usually out of memory)
    may leave them empty. Other columns are kept as text. Raises LogFormatError naming the
    file and line of the first problem.
    """
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle, delimiter="|"))
    except UnicodeDecodeError as exc:
        raise LogFormatError(f"{path}: not UTF-8 text (byte {exc.start}); is it a profiling log?") from None
    if not rows:
        raise LogFormatError(f"{path}: empty file, expected a '|'-separated header")
    header = [name.strip() for name in rows[0]]
    for column in (*REQUIRED_COLUMNS, *targets):
        if column not in header:
            raise LogFormatError(f"{path}: line 1: missing column '{column}' (columns: {', '.join(header)})")
    records = []
    for line, row in enumerate(rows[1:], start=2):
        if not any(field.strip() for field in row):
            continue
        if len(row) != len(header):
            raise LogFormatError(f"{path}: line {line}: {len(row)} fields, the header has {len(header)}")
        record = dict(zip(header, row))
        passed = _bool(record["passed"])
        if passed is None:
            raise LogFormatError(f"{path}: line {line}: passed={record['passed']!r}, expected True or False")
        bs = record["bs"].strip()
        if not bs.isdigit() or int(bs) < 1:
            raise LogFormatError(f"{path}: line {line}: bs={record['bs']!r}, expected a positive integer")
        if not record["model"].strip():
            raise LogFormatError(f"{path}: line {line}: empty 'model'")
        record.update(passed=passed, bs=int(bs), model=record["model"].strip())
        for target in targets:
            value = _number(record[target])
            if value is None or (passed and not math.isfinite(value)):
                raise LogFormatError(f"{path}: line {line}: {target}={record[target]!r}, expected a number")
            record[target] = value
        records.append(record)
    return pd.DataFrame.from_records(records, columns=header)


def read_logs(nets: Sequence[str], levels: Sequence[int], log_dirs: Sequence[str | Path],
              targets: Sequence[str]) -> pd.DataFrame:
    """All logs for nets x levels in `log_dirs`, with `net` (the name searched for) and `log` columns."""
    frames = []
    for net, path in find_logs(nets, levels, log_dirs):
        frame = read_gt_log(path, targets)
        frames.append(frame.assign(net=net, log=str(path)))
    return pd.concat(frames, ignore_index=True)
