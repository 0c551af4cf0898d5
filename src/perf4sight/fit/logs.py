"""Profiler logs: find the `<net>_<level>-gt.csv` files and read them into one table.

The logs are the profiler's '|'-separated "-gt" CSVs (the TX2 README lists the columns).
Each row is checked as it is read, against its file too (its network, architecture and
variable), so that a broken or misplaced file is reported by name and line rather than
surfacing later as a NaN or another network's runs in a fitted model. Nothing is dropped
or doubled without a word: a log with no rows and a level listed with no log are named in a
warning, a test recorded twice (two campaigns on one folder) is counted once with a
warning, a file found twice (a folder listed twice, a link) is read once with a warning,
and a folder where a log should be is an error.
The table read names each quantity by its name with unit (`mem_used_mib`, `latency_ms`),
not by its log column, and so does everything downstream of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perf4sight import console
from perf4sight.device.definitions import Quantity
from perf4sight.device.environment import Environment
from perf4sight.device.logs import GT_SUFFIX, REQUIRED_COLUMNS, ran_out_of_memory, read_gt
from perf4sight.device.recipe import RECIPE_COLUMNS
from perf4sight.errors import DataNotFoundError, LogFormatError
from perf4sight.files import read_json

__all__ = ["REQUIRED_COLUMNS", "campaign_cost", "device_fresh_pages", "gt_log_path", "find_logs", "read_gt_log",
           "read_logs", "recorded_environments"]

# The columns that tell one test from another, where the log has them (the recipe's always:
# `read_gt` fills them): a second row with the same values is the same test measured again.
TEST_COLUMNS = ("model", "bs", "stage", "dataset") + RECIPE_COLUMNS


def gt_log_path(log_dir: str | Path, net: str, level: int | str) -> Path:
    """Where the profiler writes the log of `<net>_<level>` in `log_dir`."""
    return Path(log_dir) / f"{net}_{level}{GT_SUFFIX}"


def find_logs(nets: Sequence[str], levels: Sequence[int], log_dirs: Sequence[str | Path], *,
              warn: bool = True) -> list[tuple[str, Path]]:
    """(net, path) of every existing log for nets x levels in any of `log_dirs`, each file
    once, whatever the paths it is found by (a folder listed twice, or through a link).

    A level that is missing for one net is skipped, and so is a file found again, each
    with one warning (unless not `warn`: the logs are only looked for); when nothing matches at all, the error lists every path searched. A
    net without a single log is an error too (a misspelt name would otherwise leave the fit
    to the other networks without a word); it names the networks the folders do hold.
    """
    searched: list[Path] = []
    found: dict[Path, tuple[str, Path]] = {}
    again: list[Path] = []
    absent_levels: dict[str, list[int]] = {}
    for net in nets:
        for level in levels:
            paths = [gt_log_path(log_dir, net, level) for log_dir in log_dirs]
            searched.extend(paths)
            for path in paths:
                if path.is_dir() or (path.exists() and not path.is_file()):
                    raise LogFormatError(f"{path}: not a file; a profiling log is expected there")
            present = [path for path in paths if path.is_file()]
            if not present:
                absent_levels.setdefault(net, []).append(level)
            for path in present:
                if path.resolve() in found:
                    again.append(path)
                else:
                    found[path.resolve()] = (net, path)
    if not found:
        shown = ", ".join(str(p) for p in searched) or "(no nets, levels or log directories given)"
        raise DataNotFoundError(f"no profiling logs found; searched: {shown}")
    logs = list(found.values())
    absent = [net for net in dict.fromkeys(nets) if net not in {net for net, _ in logs}]
    if absent:
        held = sorted({path.name[: -len(GT_SUFFIX)].rpartition("_")[0]
                       for log_dir in log_dirs for path in Path(log_dir).glob(f"*_*{GT_SUFFIX}")})
        raise DataNotFoundError(
            f"no profiling logs of {', '.join(repr(net) for net in absent)} at levels {list(levels)} in "
            f"{', '.join(str(d) for d in log_dirs)}; the logs there are of: {', '.join(held) or 'no network'}"
        )
    if absent_levels and warn:
        console.warn("no log at " + "; ".join(f"{net} levels {missing}" for net, missing in absent_levels.items())
                     + f" in {', '.join(str(d) for d in log_dirs)}: only the levels found are used")
    if again and warn:
        console.warn(f"{len(again)} logs found again by another path (a folder listed twice or a link; "
                     f"first: {again[0]} is {found[again[0].resolve()][1]}): each is read once")
    return logs


def read_gt_log(path: str | Path, quantities: Sequence[Quantity], network: str | None = None) -> pd.DataFrame:
    """One log as a DataFrame with `passed` (bool), `bs` (int), `model` (str) and each of
    `quantities` under its name with unit (float, NaN where a failed row has none), read and
    checked by the device's `read_gt` (the one reader of a `-gt.csv`; its rows must be of
    `network`, when given). Raises LogFormatError naming the file and line of the first problem."""
    columns = [quantity.column for quantity in quantities]
    header, rows = read_gt(Path(path), columns, network)
    for row in rows:
        row.update((column, math.nan if row[column] is None else float(row[column])) for column in columns)
    frame = pd.DataFrame.from_records(rows, columns=header)
    frame = frame.rename(columns={quantity.column: quantity.name for quantity in quantities})
    return frame.astype({"passed": bool, "bs": int}) if rows else frame


def _repeated_tests(frame: pd.DataFrame) -> pd.Series:
    """True for each row that repeats the test (`TEST_COLUMNS`) of an earlier row of its log."""
    columns = [column for column in TEST_COLUMNS if column in frame.columns]
    return frame.duplicated(subset=columns, keep="first")


def read_logs(nets: Sequence[str], levels: Sequence[int], log_dirs: Sequence[str | Path],
              quantities: Sequence[Quantity]) -> pd.DataFrame:
    """All logs for nets x levels in `log_dirs` (as `read_gt_log` reads them), with `net`
    (the name searched for) and `log` columns; a row that repeats a test of its log is left
    out, with one warning for all."""
    frames = []
    repeats: list[tuple[Path, int]] = []
    found = find_logs(nets, levels, log_dirs)
    for net, path in found:
        frame = read_gt_log(path, quantities, net)
        if frame.empty:
            console.warn(f"{path}: no test rows (a header only); nothing of it is used")
            continue
        repeated = _repeated_tests(frame)
        if repeated.any():
            repeats.append((path, int(repeated.sum())))
            frame = frame[~repeated]
        frames.append(frame.assign(net=net, log=str(path)))
    if repeats:
        console.warn(f"{sum(count for _, count in repeats)} log rows repeat a test (same "
                     f"{', '.join(TEST_COLUMNS)}) of an earlier row of their log, in {len(repeats)} logs "
                     f"(first: {repeats[0][0]}); only the first row of each test is used")
    if not frames:
        raise DataNotFoundError(f"no test rows in the profiling logs found: {', '.join(str(p) for _, p in found)}")
    return pd.concat(frames, ignore_index=True)


def campaign_cost(logs: pd.DataFrame) -> dict[str, Any]:
    """What the runs of `logs` (`read_logs`) cost the device, for the fingerprint's report:
    the tests run, those that ran out of memory and those that failed otherwise, those
    skipped (not run after a smaller batch size failed), and the device minutes, the sum of
    their `test_s` (None where no row logged one: logs of the original or of an earlier
    perf4sight), with how many rows did (`timed`)."""
    rows = logs.to_dict("records")
    skipped = [row.get("status") == "skipped" for row in rows]
    failed = [not row["passed"] and not skip for row, skip in zip(rows, skipped)]
    memory = [fail and ran_out_of_memory(row) for row, fail in zip(rows, failed)]
    seconds = pd.to_numeric(logs["test_s"], errors="coerce").dropna() if "test_s" in logs else pd.Series(dtype=float)
    return {"tests": len(rows) - sum(skipped), "out_of_memory": sum(memory), "failed": sum(failed) - sum(memory),
            "skipped": sum(skipped), "device_minutes": round(float(seconds.sum()) / 60.0, 2) if len(seconds) else None,
            "timed": int(len(seconds))}


def recorded_environments(log_dirs: Sequence[str | Path]) -> dict[Path, Environment]:
    """The environment records of the campaigns behind `log_dirs` (`environment-*.json`, which
    the profiler writes in its log folder, the parent of its `memory` and `latency` folders),
    in the order of the records' times. LogFormatError names a record that is not JSON or
    names no PyTorch version."""
    records = sorted({record for folder in map(Path, log_dirs) for place in (folder, folder.parent)
                      for record in place.glob("environment-*.json") if record.is_file()},
                     key=lambda record: record.name)
    return {record: Environment.of(read_json(record, what="environment record", error=LogFormatError), str(record))
            for record in records}


def device_fresh_pages(log_dirs: Sequence[str | Path]) -> float | None:
    """What a tensor in fresh pages costs per MiB on the device behind `log_dirs`, as its
    profiler measured it (the latest environment record that says); None where none says (a
    GPU, or logs of a profiler that did not measure it)."""
    measured = [environment.fresh_pages_ms_per_mib for environment in recorded_environments(log_dirs).values()
                if environment.fresh_pages_ms_per_mib is not None]
    return measured[-1] if measured else None
