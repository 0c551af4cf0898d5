"""Latency measured in passes: the campaign's latency tests run several times, each pass in
another order of the models, and each test's latency is the mean of all its timed iterations.

A shared machine's speed drifts over minutes, and not by one factor for every network: on a
2-core VM two campaigns of the same latency tests minutes apart differ by 11-22 % per test,
while a test's own iterations vary by 8-9 % (BENCHMARKS.md, "The CPU zoo's latency"). More
iterations in one minute do not remove the drift; passes at other moments average it out, and
latency tests are cheap beside memory tests, each of which starts a worker. Each pass is a
campaign of its own in `<log_dir>/latency-passes/pass-<n>` (resumed as any campaign is), and
`<log_dir>/latency` is made from them after each run: one row per test, as a single campaign
writes it, whatever the fit reads.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from perf4sight import console
from perf4sight.device.campaign import CampaignSummary
from perf4sight.device.definitions import LATENCY, is_positive_int
from perf4sight.device.lock import LogFolderLock
from perf4sight.device.logs import GT_SUFFIX, LogRow, append_row, latest_rows, read_journal, write_gt
from perf4sight.device.test_config import ProfileTest
from perf4sight.errors import ArgumentError

__all__ = ["PASSES_FOLDER", "check_passes", "merge_passes", "pass_order", "run_in_passes"]

PASSES_FOLDER = "latency-passes"


def check_passes(passes: int, save: bool) -> None:
    """Refuse a number of passes no run can make: passes are merged from their logs."""
    if not is_positive_int(passes):
        raise ArgumentError(f"latency_passes: expected a positive integer, got {passes!r}")
    if passes > 1 and not save:
        raise ArgumentError(f"latency_passes = {passes}: passes are merged from their logs; needs save = true")


def pass_order(models: Sequence[str], number: int) -> list[str]:
    """The models' order in pass `number`: as listed, reversed, then shuffled (seeded by the
    pass), so that each model runs early in some passes and late in others."""
    if number == 0:
        return list(models)
    if number == 1:
        return list(models)[::-1]
    order = list(models)
    random.Random(number).shuffle(order)
    return order


def _in_pass_order(tests: Sequence[ProfileTest], number: int) -> list[ProfileTest]:
    """`tests` grouped by model, the models in pass `number`'s order, each model's tests as listed."""
    models = pass_order(list(dict.fromkeys(test.model for test in tests)), number)
    return sorted(tests, key=lambda test: models.index(test.model))


def _merged(rows: Sequence[LogRow]) -> LogRow:
    """One test's rows of several passes as one: its first row with the timed iterations of
    all, their mean, the largest share of the CPU taken elsewhere and the summed seconds; a
    failure in any pass is the test's (the first such row)."""
    failed = [row for row in rows if not row["passed"]]
    if failed:
        return failed[0]
    times = [time for row in rows for time in (row["latency_iters_ms"] or [])]
    shares = [row["cpu_elsewhere"] for row in rows if row.get("cpu_elsewhere") is not None]
    return {**rows[0], "latency": float(np.mean(times)), "latency_iters_ms": times,
            "cpu_elsewhere": max(shares) if shares else None,
            "test_s": sum(row.get("test_s") or 0.0 for row in rows)}


def merge_passes(passes: Sequence[Path], log_dir: Path) -> Path:
    """Write `<log_dir>/latency` from the latency logs of the campaigns in `passes`: each test
    that any of them recorded, merged over those that did (`_merged`), and their environment
    records beside it. The folder is made aside and then put in place of the old one, so that
    an interrupted merge leaves the passes' logs to merge again. Returns the folder."""
    target = log_dir / LATENCY.kind
    aside = log_dir / (LATENCY.kind + ".merging")
    shutil.rmtree(aside, ignore_errors=True)
    aside.mkdir(parents=True)
    names = sorted({journal.name for folder in passes for journal in (folder / LATENCY.kind).glob("*.csv")
                    if not journal.name.endswith(GT_SUFFIX)})
    for name in names:
        runs = [latest_rows(read_journal(folder / LATENCY.kind / name)) for folder in passes]
        for key in dict.fromkeys(key for run in runs for key in run):
            append_row(aside / name, LATENCY.kind, _merged([run[key] for run in runs if key in run]))
        write_gt(aside / name, LATENCY.kind)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(aside, target)
    for folder in passes:
        for record in folder.glob("environment-*.json"):
            shutil.copy2(record, log_dir / record.name)
    return target


def run_in_passes(tests: Sequence[ProfileTest], passes: int, *, log_dir: Path, budget_s: float | None,
                  campaign: Callable[..., CampaignSummary], **options: Any) -> CampaignSummary:
    """Run `tests` with `campaign` (`profile_campaign`'s keywords in `options`): every test
    but the latency ones once in `log_dir`, the latency ones in `passes` passes, then merge
    them into `<log_dir>/latency`. The budget (`budget_s`) is the whole run's: no pass starts
    once it is spent. Returns every campaign's results in one summary."""
    summary = CampaignSummary()

    def add(part: CampaignSummary) -> None:
        summary.results.extend(part.results)
        summary.already_recorded += part.already_recorded
        summary.not_run += part.not_run
        summary.environment_file = part.environment_file or summary.environment_file

    latency = [test for test in tests if test.test_var == LATENCY.kind]
    others = [test for test in tests if test.test_var != LATENCY.kind]
    if others:
        add(campaign(others, log_dir=log_dir, budget_s=budget_s, **options))
    if not latency:
        return summary
    folders = [log_dir / PASSES_FOLDER / f"pass-{number}" for number in range(passes)]
    _adopt_single_pass(log_dir, folders[0])
    for number, folder in enumerate(folders):
        left = None if budget_s is None else budget_s - summary.device_s
        if left is not None and left <= 0:
            summary.not_run += len(latency)
            continue
        console.info(f"latency, pass {number + 1} of {passes}")
        add(campaign(_in_pass_order(latency, number), log_dir=folder, budget_s=left, **options))
    measured = [folder for folder in folders if (folder / LATENCY.kind).is_dir()]
    if measured:
        with LogFolderLock(log_dir):
            merge_passes(measured, log_dir)
    return summary


def _adopt_single_pass(log_dir: Path, first: Path) -> None:
    """Latency logs a campaign of one pass wrote in `log_dir` become the first pass (`first`),
    run in the listed order as that pass is, rather than being replaced by the merge."""
    single = log_dir / LATENCY.kind
    if single.is_dir() and not (log_dir / PASSES_FOLDER).exists():
        with LogFolderLock(log_dir):
            first.mkdir(parents=True)
            os.replace(single, first / LATENCY.kind)
