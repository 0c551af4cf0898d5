"""Shared fixtures: the TX2 dataset beside the project, skipped when absent."""

from __future__ import annotations

from pathlib import Path

import pytest

TX2_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "tx2"


@pytest.fixture(scope="session")
def tx2_dir() -> Path:
    """`../shared/datasets/tx2` relative to the project root; skips the test when absent."""
    if not (TX2_DIR / "models").is_dir():
        pytest.skip(f"TX2 dataset not found at {TX2_DIR}")
    return TX2_DIR
