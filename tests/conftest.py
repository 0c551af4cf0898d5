"""Shared fixtures: the H200 measurements in the repository, the TX2 dataset beside the project
(its tests marked `tx2`, skipped when it is absent), an editor of a stored model's header, the
console's messages back on after a test that ran the CLI with --quiet, each test's own disk
cache, and the old Python + PyTorch stacks a Jetson runs (old_stacks.py). A skip for any other
reason fails the run: every behaviour is tested on data in the repository."""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from old_stacks import OldStack, StackUnavailable, provide_stacks, stack_name
from repository_data import H200

from perf4sight import console
from perf4sight.architecture import lifetimes
from perf4sight.networks import CHECKED_STACKS, forget_traces, registry

ROOT = Path(__file__).resolve().parents[1]
# PERF4SIGHT_TX2 points elsewhere (a missing path runs the suite as a clean clone would).
TX2_DIR = Path(os.environ.get("PERF4SIGHT_TX2", ROOT.parent / "shared" / "datasets" / "tx2"))
TX2_SKIP = "TX2 dataset not found at"
_UNEXPECTED = pytest.StashKey[list]()
# The skips a run may have: no CUDA GPU (or one present, for the check of its absence), an old
# Python stack not provided (old_stacks.py says how), scikit-learn's array API check of an
# estimator (it runs only under SCIPY_ARRAY_API=1, which changes SciPy for the whole process),
# and the TX2 data for the `tx2` tests.
ALLOWED_SKIPS = re.compile(
    r"needs a CUDA GPU|CUDA is available here|no Python \d\.\d+ found|is not a Python \d\.\d+ interpreter"
    r"|SCIPY_ARRAY_API is not set: not checking array_api input")


@pytest.fixture(autouse=True)
def _console_not_quiet() -> Iterator[None]:
    """`--quiet` and the warnings shown are process-wide state; a later test's messages must
    not depend on them."""
    yield
    console.reset()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that reads the TX2 folder is in the optional `tx2` group."""
    for item in items:
        if "tx2_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.tx2)


def _unexpected_skips(reports: list[pytest.TestReport]) -> list[str]:
    """'test: reason' of each skip that is not one of ALLOWED_SKIPS (nor a `tx2` test's)."""
    found = []
    for report in reports:
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if ALLOWED_SKIPS.search(reason) or ("tx2" in report.keywords and TX2_SKIP in reason):
            continue
        found.append(f"{report.nodeid}: {reason}")
    return found


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """An unexpected skip fails the run: a test that quietly stopped running would otherwise
    read as a pass. (Runs before the terminal's summary, which lists them.)"""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller sees every report
    session.config.stash[_UNEXPECTED] = _unexpected_skips(reporter.stats.get("skipped", []))
    if session.config.stash[_UNEXPECTED] and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    unexpected = config.stash.get(_UNEXPECTED, [])
    if unexpected:
        terminalreporter.write_sep("=", f"{len(unexpected)} unexpected skips (see tests/conftest.py)", red=True, bold=True)
        for line in unexpected:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def h200_dir() -> Path:
    """The H200 measurements in the repository (repository_data.H200)."""
    return H200


_CACHE_VARIABLES = ("PERF4SIGHT_CACHE", "PERF4SIGHT_CACHE_MAX_MIB")


@pytest.fixture(scope="session", autouse=True)
def _no_users_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A disk cache (`perf4sight.cache`) of the session's own, never the user's: module-wide
    fixtures load networks before any test's own cache is set."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PERF4SIGHT_CACHE_DIR", str(tmp_path_factory.mktemp("session_cache")))
        for name in _CACHE_VARIABLES:
            patch.delenv(name, raising=False)
        yield


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's own empty disk cache: what one test records is no other's, and the
    commands it runs inherit the folder."""
    monkeypatch.setenv("PERF4SIGHT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    for name in _CACHE_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def tx2_dir() -> Path:
    """`../shared/datasets/tx2` relative to the project root (or $PERF4SIGHT_TX2); skips the
    test when absent."""
    if not (TX2_DIR / "models").is_dir():
        pytest.skip(f"{TX2_SKIP} {TX2_DIR}")
    return TX2_DIR


@pytest.fixture
def edit_header() -> Callable[[Path, Callable[[dict], None]], None]:
    """`edit(model_path, change)`: apply `change` to the header stored beside a model and fix
    its hash, as a careful tamperer would (`perf4sight.fit.store.model_hash`)."""

    def edit(path: Path, change: Callable[[dict], None]) -> None:
        from perf4sight.fit.store import model_hash

        meta_path = path.with_suffix(".json")
        meta = json.loads(meta_path.read_text())
        change(meta)
        if isinstance(meta, dict):
            meta["sha256"] = model_hash(path.read_bytes(), meta)
        meta_path.write_text(json.dumps(meta))

    return edit


@functools.cache
def _made_stacks() -> dict[tuple[str, str], OldStack | StackUnavailable]:
    """Every checked stack, made side by side on first use (or by `make test` before)."""
    return provide_stacks(CHECKED_STACKS)


def _stack(python_version: str, torch_version: str) -> OldStack:
    made = _made_stacks()[(python_version, torch_version)]
    if isinstance(made, StackUnavailable):
        pytest.skip(str(made))
    return made


@pytest.fixture(scope="session", params=CHECKED_STACKS, ids=[stack_name(*s) for s in CHECKED_STACKS])
def old_stack(request: pytest.FixtureRequest) -> OldStack:
    """Each stack the device side is checked on: Python 3.6 + torch 1.10.2, Python 3.8 + torch 1.12.1."""
    return _stack(*request.param)


@pytest.fixture(scope="session")
def oldest_stack() -> OldStack:
    """Python 3.6 + torch 1.10.2 (JetPack 4.6), the oldest stack the device side runs on."""
    return _stack(*CHECKED_STACKS[0])


@pytest.fixture
def recordings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the networks recorded from now on (no base traced, nor torchvision's builders
    listed, in this process before)."""
    forget_traces()
    registry._catalogue.cache_clear()
    recorded: list[str] = []
    original = lifetimes.record_timeline

    def counting(build, input_size, num_classes, stage, arch=None, **options):  # noqa: ANN001, ANN202
        recorded.append(arch.name if arch is not None else "")
        return original(build, input_size, num_classes, stage, arch, **options)

    monkeypatch.setattr(lifetimes, "record_timeline", counting)
    return recorded
