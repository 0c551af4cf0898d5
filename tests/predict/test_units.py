"""Budgets and limits as people write them."""

from __future__ import annotations

import psutil
import pytest

from perf4sight.errors import UsageError
from perf4sight.predict import device_memory_mib, parse_duration_ms, parse_memory_mib


@pytest.mark.parametrize(
    ("text", "mib"),
    [("7.5GiB", 7680.0), ("512MiB", 512.0), ("1GB", 1e9 / 2**20), ("300", 300.0), ("2 gib", 2048.0)],
)
def test_memory(text: str, mib: float) -> None:
    assert parse_memory_mib(text) == pytest.approx(mib)


def test_auto_is_this_machines_memory() -> None:
    assert parse_memory_mib("auto") == device_memory_mib() == pytest.approx(psutil.virtual_memory().total / 2**20)


@pytest.mark.parametrize(("text", "ms"), [("500ms", 500.0), ("2s", 2000.0), ("250", 250.0), ("1.5 s", 1500.0)])
def test_duration(text: str, ms: float) -> None:
    assert parse_duration_ms(text) == pytest.approx(ms)


@pytest.mark.parametrize("text", ["lots", "5 parsecs", "-1GiB", "0MiB", "", "1" + "0" * 400 + "TiB"])
def test_bad_memory(text: str) -> None:
    with pytest.raises(UsageError, match="memory budget"):
        parse_memory_mib(text)
