"""Fault injection: every case of `benchmarks/fault_injection.py` (hostile configs, bad
command-line values, broken log rows and rows not of their file, log sets read twice or
incomplete, tampered stored models, impossible specs and specs not of their logs, outputs
over inputs, `prune` run again with other settings or killed part-way, names that are paths,
bundles broken or moved on the device, model folders written by two fingerprints or by one
killed part-way) is answered with one line and exit code 2, or with the right result; never a
traceback, a silent wrong answer, a lost or duplicated row, or executed code."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "fault_injection.py"
_spec = importlib.util.spec_from_file_location("fault_injection", _SCRIPT)
fault_injection = importlib.util.module_from_spec(_spec)
sys.modules["fault_injection"] = fault_injection  # dataclasses look their module up
_spec.loader.exec_module(fault_injection)

CASES = fault_injection.catalogue()


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory, request):
    """Shared by the module's cases: the fitted models are made once, when a case needs them."""
    return fault_injection.Fixtures(root=tmp_path_factory.mktemp("faults"))


def _param(case):
    marks = [pytest.mark.slow] if case.slow else []
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(case) for case in CASES])
def test_a_fault_is_one_line_or_the_right_result(case, fixtures, tmp_path):
    result = fault_injection.classify(case, tmp_path / "case", fixtures)
    assert result.outcome in ("one line", "right"), f"{result.outcome}: {result.detail}"


def test_the_catalogue_covers_every_category_and_the_issue_count():
    categories = {case.category for case in CASES}
    assert categories == {"config", "cli", "log", "log set", "stored model", "spec", "code from data", "output",
                          "prune again", "name as path", "leftover", "kill", "bundle", "store"}
    assert len(CASES) >= 175
    assert len({case.id for case in CASES}) == len(CASES)  # each case named once
