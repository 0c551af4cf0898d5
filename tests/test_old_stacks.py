"""The old-stack helper finds interpreters where the machine has them, and says how to provide one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from old_stacks import StackUnavailable, checked_stacks, find_interpreter, provide_stack

from perf4sight.networks import CHECKED_STACKS


def test_without_an_interpreter_it_says_how_to_provide_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PERF4SIGHT_PY36", raising=False)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "no-pyenv"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(StackUnavailable, match=r"^no Python 3\.6 found: install it \(`pyenv install 3\.6`\) "
                                               r"or set PERF4SIGHT_PY36 to its interpreter$"):
        find_interpreter("3.6")


def test_a_named_interpreter_of_another_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERF4SIGHT_PY36", sys.executable)  # the host's Python, 3.10 or newer
    with pytest.raises(StackUnavailable, match=rf"PERF4SIGHT_PY36={sys.executable} is not a Python 3\.6 interpreter"):
        provide_stack("3.6", "1.10.2")


@pytest.mark.slow
def test_a_named_interpreter_with_that_torch_is_used_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's own Python and torch stand in for a ready old stack: no venv is made."""
    import torch

    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    monkeypatch.setenv(f"PERF4SIGHT_PY{version.replace('.', '')}", sys.executable)
    stack = provide_stack(version, torch.__version__.split("+")[0])
    assert stack.python == Path(sys.executable)
    done = stack.run(["-c", "import os; print(os.environ.get('PYTHONPATH'), os.environ.get('PYTHONNOUSERSITE'))"])
    assert done.stdout.split() == ["None", "1"]  # nothing of the host's packages


def test_the_script_make_test_starts_makes_the_stacks_perf4sight_checks() -> None:
    """`python3 tests/old_stacks.py` runs before perf4sight is installed: it reads the stacks from
    perf4sight's source, which must say what the package says."""
    assert checked_stacks() == CHECKED_STACKS
