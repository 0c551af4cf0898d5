"""Budgets and limits as people write them."""

from __future__ import annotations

import psutil
import pytest
import torch

from perf4sight.errors import UsageError
from perf4sight.predict import device_memory_mib, parse_duration_ms, parse_memory_mib


@pytest.mark.parametrize(
    ("text", "mib"),
    [("7.5GiB", 7680.0), ("512MiB", 512.0), ("1GB", 1e9 / 2**20), ("300", 300.0), ("2 gib", 2048.0)],
)
def test_memory(text: str, mib: float) -> None:
    assert parse_memory_mib(text) == pytest.approx(mib)


def test_auto_is_this_machines_memory() -> None:
    if torch.cuda.is_available():  # the first GPU's memory
        expected = torch.cuda.get_device_properties(0).total_memory / 2**20
    else:
        expected = psutil.virtual_memory().total / 2**20
    assert parse_memory_mib("auto") == device_memory_mib() == pytest.approx(expected)


def test_without_cuda_the_device_memory_is_system_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_memory_mib() == pytest.approx(psutil.virtual_memory().total / 2**20)


def test_with_cuda_the_device_memory_is_the_first_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    class Properties:
        total_memory = 12345 * 2**20  # no machine's system memory

    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: asked.append(device) or Properties())
    assert device_memory_mib() == 12345.0
    assert parse_memory_mib("auto") == 12345.0
    assert asked == [0, 0]


@pytest.mark.parametrize(("text", "ms"), [("500ms", 500.0), ("2s", 2000.0), ("250", 250.0), ("1.5 s", 1500.0)])
def test_duration(text: str, ms: float) -> None:
    assert parse_duration_ms(text) == pytest.approx(ms)


@pytest.mark.parametrize("text", ["lots", "5 parsecs", "-1GiB", "0MiB", "", "1" + "0" * 400 + "TiB"])
def test_bad_memory(text: str) -> None:
    with pytest.raises(UsageError, match="memory budget"):
        parse_memory_mib(text)
