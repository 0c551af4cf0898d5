"""Shared fixtures: the TX2 dataset beside the project (skipped when absent), and an editor
of a stored model's metadata."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

TX2_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "tx2"


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
