"""Model description files for profiling tests: a tiny CNN, one that fails, one that hogs memory,
one that takes a minute."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

TINY = """
from torch import nn


def tinynet(num_classes=10):
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes),
    )
"""

# raises from the batch size of 16 on, as an out-of-memory error would
FRAGILE = """
from torch import nn


class Fragile(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(8, num_classes))

    def forward(self, x):
        if x.shape[0] >= 16:
            raise RuntimeError("simulated: not enough memory")
        return self.body(x)


def fragile(num_classes=10):
    return Fragile(num_classes)
"""

# holds 64 MiB per sample, to cross a memory limit at large batch sizes
HOG = """
import torch
from torch import nn


class Hog(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(8, num_classes))

    def forward(self, x):
        hog = torch.ones(x.shape[0], 16, 1024, 1024)
        return self.body(x) + hog.mean() * 0


def hog(num_classes=10):
    return Hog(num_classes)
"""

# takes a minute from the batch size of 8 on: a test still running when its campaign stops
SLOW = """
import time
from torch import nn


class Slow(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(8, num_classes))

    def forward(self, x):
        if x.shape[0] >= 8:
            time.sleep(60)
        return self.body(x)


def slow(num_classes=10):
    return Slow(num_classes)
"""

SOURCES = {"tinynet": TINY, "fragile": FRAGILE, "hog": HOG, "slow": SLOW}


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A directory of model files `<net>_<level>.py` (levels 0 and 50 of each)."""
    directory = tmp_path / "models"
    directory.mkdir()
    for net, source in SOURCES.items():
        for level in (0, 50):
            (directory / f"{net}_{level}.py").write_text(source)
    return directory


def _write_test_config(path: Path, models: list[Path], bs: list[int], *,
                      test_var: tuple[str, ...] = ("memory", "latency"),
                      stage: tuple[str, ...] = ("training",)) -> Path:
    """A test config in the original's layout: a section per model, named after its network."""
    sections = []
    for model in models:
        net = model.stem.rsplit("_", 1)[0]
        sections.append(
            f"[{net.upper()}_{len(sections)}]\n"
            f"test_var= {list(test_var)!r}\nbs= {bs!r}\ndataset= ['cifar10']\n"
            f"net_name= [{net!r}]\nexec_stage= {list(stage)!r}\nmodel= [{str(model)!r}]\n"
        )
    path.write_text("\n".join(sections))
    return path


@pytest.fixture
def write_test_config() -> Callable[..., Path]:
    """Writes a test config: (path, models, bs, *, test_var=, stage=) -> path."""
    return _write_test_config
