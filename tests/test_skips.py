"""The suite's guard against tests that quietly stop running: a skip for a reason other than a
missing CUDA GPU, an old Python stack not provided or the TX2 data (for a `tx2` test) fails the
run and is listed by name (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS = '''
import pytest

def test_runs():
    pass

def test_on_a_gpu():
    pytest.skip("needs a CUDA GPU")

def test_on_python_36():
    pytest.skip("no Python 3.6 found: install it")

def test_reads_the_tx2_folder(tx2_dir):
    pass
'''


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A folder with the project's conftest and no TX2 data."""
    monkeypatch.setenv("PERF4SIGHT_TX2", str(pytester.path / "no-tx2"))
    pytester.makeconftest(Path(__file__).with_name("conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    tx2: reads the TX2 dataset\n")
    return pytester


def test_allowed_skips_pass(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_allowed=TESTS)
    result = suite.runpytest_inprocess("-p", "no:xdist", "-rs")
    assert result.ret == 0
    result.assert_outcomes(passed=1, skipped=3)
    assert "unexpected" not in result.stdout.str()


def test_any_other_skip_fails_the_run_and_is_named(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_other=TESTS + '''
def test_without_its_data():
    pytest.skip("data not found")

def test_tx2_reason_on_a_test_not_marked():
    pytest.skip("TX2 dataset not found at /somewhere")
''')
    result = suite.runpytest_inprocess("-p", "no:xdist")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, skipped=5)
    result.stdout.fnmatch_lines(["*2 unexpected skips*", "*test_without_its_data: Skipped: data not found",
                                 "*test_tx2_reason_on_a_test_not_marked: Skipped: TX2 dataset not found at /somewhere"])
    assert "test_on_a_gpu:" not in result.stdout.str()
