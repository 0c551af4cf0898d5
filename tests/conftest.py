"""Shared fixtures: the TX2 dataset beside the project (skipped when absent), an editor of a
stored model's metadata, and the console's messages back on after a test that ran the CLI
with --quiet."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from perf4sight import console

TX2_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "tx2"


@pytest.fixture(autouse=True)
def _console_not_quiet() -> Iterator[None]:
    """`--quiet` sets process-wide state; a later test's messages must not depend on it."""
    yield
    console.set_quiet(False)


@pytest.fixture(scope="session")
def tx2_dir() -> Path:
    """`../shared/datasets/tx2` relative to the project root; skips the test when absent."""
    if not (TX2_DIR / "models").is_dir():
        pytest.skip(f"TX2 dataset not found at {TX2_DIR}")
    return TX2_DIR


@pytest.fixture
def edit_metadata() -> Callable[[Path, Callable[[dict], None]], None]:
    """`edit(model_path, change)`: apply `change` to the metadata stored beside a model."""

    def edit(path: Path, change: Callable[[dict], None]) -> None:
        meta_path = path.with_suffix(".json")
        meta = json.loads(meta_path.read_text())
        change(meta)
        meta_path.write_text(json.dumps(meta))

    return edit
