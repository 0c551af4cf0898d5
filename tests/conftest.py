"""Shared fixtures: the TX2 dataset beside the project (skipped when absent), an editor of a
stored model's header, the console's messages back on after a test that ran the CLI
with --quiet, and the old Python + PyTorch stacks a Jetson runs (old_stacks.py)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from old_stacks import OldStack, StackUnavailable, provide_stack, stack_name

from perf4sight import console
from perf4sight.networks import CHECKED_STACKS

TX2_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "tx2"


@pytest.fixture(autouse=True)
def _console_not_quiet() -> Iterator[None]:
    """`--quiet` and the warnings shown are process-wide state; a later test's messages must
    not depend on them."""
    yield
    console.reset()


@pytest.fixture(scope="session")
def tx2_dir() -> Path:
    """`../shared/datasets/tx2` relative to the project root; skips the test when absent."""
    if not (TX2_DIR / "models").is_dir():
        pytest.skip(f"TX2 dataset not found at {TX2_DIR}")
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
    """Every checked stack, made side by side on first use: their downloads overlap."""
    with ThreadPoolExecutor(len(CHECKED_STACKS)) as pool:
        futures = {stack: pool.submit(provide_stack, *stack) for stack in CHECKED_STACKS}
    return {stack: future.exception() if isinstance(future.exception(), StackUnavailable) else future.result()
            for stack, future in futures.items()}


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
