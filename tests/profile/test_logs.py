"""Log files: the original's journal layout, torn last lines, the expanded -gt file."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from perf4sight.device.logs import (GT_COLUMNS, append_gt_row, append_row, gt_path, journal_path, read_gt, read_journal,
                                   write_gt)
from perf4sight.device.recipe import DEFAULT_RECIPE, RECIPE_COLUMNS, Recipe
from perf4sight.errors import LogFormatError
from perf4sight.profile import ProfileTest

TX2_MEMORY_COLUMNS = ["passed", "mem_alloc", "mem_reserved", "mem_used", "mem_avail", "free", "capacity",
                      "test_var", "bs", "dataset", "net_name", "model"]


def _test(bs: int, test_var: str = "memory") -> ProfileTest:
    return ProfileTest(test_var, bs, "cifar10", "tinynet", "training", "/models/tinynet_50.py")


def test_rows_round_trip_and_expand(tmp_path: Path) -> None:
    path = journal_path(tmp_path, _test(2))
    assert path == tmp_path / "memory" / "tinynet_50.csv"
    append_row(path, "memory", {"passed": True, "mem_alloc": None, "mem_used": 12.5, "capacity": 24000.0,
                                "status": "ok", "params": _test(2).params()})
    append_row(path, "memory", {"passed": False, "status": "error", "error": "RuntimeError: a|b\nc",
                                "params": _test(4).params()})
    lines = path.read_text().splitlines()
    assert lines[0] == "passed|mem_alloc|mem_reserved|mem_used|mem_avail|free|capacity|mem_context|status|error|test_s|params"
    assert lines[1].startswith("True||")
    rows = read_journal(path)
    assert [r["passed"] for r in rows] == [True, False]
    assert rows[0]["mem_used"] == 12.5 and rows[0]["mem_alloc"] is None
    assert rows[1]["error"] == "RuntimeError: a/b c"
    assert ProfileTest.from_params(rows[1]["params"]) == _test(4)
    gt = pd.read_csv(write_gt(path, "memory"), sep="|")
    assert list(gt.columns) == GT_COLUMNS["memory"]
    assert list(gt.columns[:12]) == TX2_MEMORY_COLUMNS
    assert gt["stage"].tolist() == ["training", "training"]
    assert gt["bs"].tolist() == [2, 4] and gt["passed"].tolist() == [True, False]


def test_gt_rows_appended_one_by_one_equal_the_rewritten_file(tmp_path: Path) -> None:
    path = journal_path(tmp_path, _test(2))
    for bs, passed in ((2, True), (4, True), (8, False)):
        row = {"passed": passed, "mem_used": 10.0 * bs if passed else None,
               "status": "ok" if passed else "error", "params": _test(bs).params()}
        append_row(path, "memory", row)
        append_gt_row(path, "memory", row)
    appended = gt_path(path).read_text()
    assert appended.count("\n") == 4 and appended.startswith("|".join(GT_COLUMNS["memory"]))
    assert write_gt(path, "memory").read_text() == appended


def test_a_gt_file_without_recipe_columns_keeps_its_rows_when_appended_to(tmp_path: Path) -> None:
    """The original's gt files have no journal and no recipe columns: appending a test of another
    recipe adds the columns, its rows the default recipe's values (what they ran), and loses none."""
    path = journal_path(tmp_path, _test(2))
    gt_path(path).parent.mkdir(parents=True)
    gt_path(path).write_text("|".join(TX2_MEMORY_COLUMNS) + "\n"
                             "True|||20.0||||memory|2|cifar10|tinynet|tinynet_50.py\n")
    first = ProfileTest("memory", 4, "cifar10", "tinynet", "training", "/models/tinynet_50.py",
                        Recipe(zero_grad="first"))
    append_gt_row(path, "memory", {"passed": True, "mem_used": 40.0, "status": "ok", "params": first.params()})
    header, rows = read_gt(gt_path(path), ["mem_used"])
    assert header[:len(TX2_MEMORY_COLUMNS)] == TX2_MEMORY_COLUMNS
    assert [(row["bs"], Recipe(*(row[c] for c in RECIPE_COLUMNS))) for row in rows] == [
        (2, DEFAULT_RECIPE), (4, Recipe(zero_grad="first"))]


def test_latency_log_keeps_each_iteration(tmp_path: Path) -> None:
    path = journal_path(tmp_path, _test(2, "latency"))
    append_row(path, "latency", {"passed": True, "latency": 2.0, "latency_iters_ms": [1.5, 2.0, 2.5],
                                 "status": "ok", "params": _test(2, "latency").params()})
    gt = pd.read_csv(write_gt(path, "latency"), sep="|")
    assert gt_path(path).name == "tinynet_50-gt.csv"
    assert gt.loc[0, "latency"] == 2.0 and gt.loc[0, "latency_iters_ms"] == "[1.5, 2.0, 2.5]"
    assert list(gt.columns[:2]) == ["passed", "latency"]


def test_journal_begun_with_fewer_columns_is_appended_in_its_own_columns(tmp_path: Path) -> None:
    path = journal_path(tmp_path, _test(2, "latency"))
    path.parent.mkdir(parents=True)
    old_header = "passed|latency|latency_iters_ms|status|error|params"
    path.write_text(f"{old_header}\nTrue|2.0|[2.0]|ok||{_test(2, 'latency').params()!r}\n")
    append_row(path, "latency", {"passed": True, "latency": 3.0, "latency_iters_ms": [3.0], "cpu_elsewhere": 0.5,
                                 "status": "ok", "params": _test(4, "latency").params()})
    assert path.read_text().splitlines()[0] == old_header
    rows = read_journal(path)
    assert [(r["params"]["bs"], r["latency"]) for r in rows] == [(2, 2.0), (4, 3.0)]
    gt = pd.read_csv(write_gt(path, "latency"), sep="|")
    assert list(gt.columns) == GT_COLUMNS["latency"] and gt["cpu_elsewhere"].isna().all()


def test_torn_last_line_is_cut_before_appending(tmp_path: Path) -> None:
    path = journal_path(tmp_path, _test(2))
    append_row(path, "memory", {"passed": True, "mem_used": 1.0, "status": "ok", "params": _test(2).params()})
    with open(path, "a") as handle:
        handle.write("True|1.0|2.0|3.")  # a write cut short by SIGKILL
    assert len(read_journal(path)) == 1
    assert len(read_journal(path, repair=True)) == 1
    append_row(path, "memory", {"passed": True, "mem_used": 2.0, "status": "ok", "params": _test(4).params()})
    assert [r["params"]["bs"] for r in read_journal(path)] == [2, 4]


def test_malformed_row_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "memory" / "x.csv"
    path.parent.mkdir()
    path.write_text("passed|mem_used|params\nTrue|1.0|{'bs': 2}\n")
    with pytest.raises(LogFormatError, match=r"x.csv: line 2: params lacks"):
        read_journal(path)
    path.write_text("passed|mem_used|params\nmaybe|1.0|{}\n")
    with pytest.raises(LogFormatError, match=r"line 2: passed='maybe', expected True or False"):
        read_journal(path)


def test_non_utf8_journal_names_file_and_line(tmp_path: Path) -> None:
    path = journal_path(tmp_path, _test(2))
    append_row(path, "memory", {"passed": True, "mem_used": 1.0, "status": "ok", "params": _test(2).params()})
    with open(path, "ab") as handle:
        handle.write("False|||||||error|caf\u00e9|{}\n".encode("latin-1"))
        handle.write(b"True|1.0|")  # a torn line too: not cut off a file that cannot be read
    size = path.stat().st_size
    with pytest.raises(LogFormatError, match=rf"^{re.escape(str(path))}: line 3: not UTF-8 text"):
        read_journal(path, repair=True)
    assert path.stat().st_size == size


def test_non_utf8_gt_file_names_it_when_appended_to(tmp_path: Path) -> None:
    path = journal_path(tmp_path, _test(2))
    gt_path(path).parent.mkdir(parents=True)
    gt_path(path).write_bytes(b"\xff\xfe binary\n")
    with pytest.raises(LogFormatError, match=rf"^{re.escape(str(gt_path(path)))}: line 1: not UTF-8 text"):
        append_gt_row(path, "memory", {"passed": True, "status": "ok", "params": _test(2).params()})
