"""Fixtures for the networks tests: a user's own model description file, layer shapes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from torch import nn

TINYNET = '''
import torch
from torch import nn


class TinyNet(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def tinynet(num_classes: int = 10) -> nn.Module:
    return TinyNet(num_classes)
'''


@pytest.fixture
def tinynet_file(tmp_path: Path) -> Path:
    """A model description file `tinynet.py` whose factory is `tinynet`."""
    path = tmp_path / "tinynet.py"
    path.write_text(TINYNET)
    return path


def _layer_shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    return {
        name: tuple(m.weight.shape) for name, m in module.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))
    }


@pytest.fixture
def layer_shapes() -> Callable[[nn.Module], dict[str, tuple[int, ...]]]:
    """Weight shape of every Conv2d and Linear of a module, by qualified name."""
    return _layer_shapes
