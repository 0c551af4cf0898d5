"""The host's model loader for the device's worker: everything `perf4sight.networks`
loads (specs, model files, torchvision names), at the size the test runs at.

The worker imports it by name (`LOADER`), so the device package never imports the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from perf4sight.device.errors import ConfigError
from perf4sight.device.models import test_shape
from perf4sight.device.test_config import ProfileTest

if TYPE_CHECKING:
    from perf4sight.networks import LoadedNetwork

__all__ = ["LOADER", "check_models", "load_test_model", "model_source"]

LOADER = f"{__name__}:load_test_model"


def model_source(test: ProfileTest) -> str:
    """What to hand `load_network` for the test's model entry.

    A .py model file is called through the factory named after the network, as the
    original did; when only the spec `<stem>.json` sits beside a listed .py (a network
    dataset kept as specs), the spec is used.
    """
    path = Path(test.model)
    if path.suffix != ".py":
        return test.model
    if not path.exists() and path.with_suffix(".json").exists():
        return str(path.with_suffix(".json"))
    return f"{test.model}:{test.net_name}"


def load_test_model(test: ProfileTest) -> LoadedNetwork:
    """The test's network, at its dataset's input size and classes (a spec's own for `spec`,
    also for a model file with its spec beside it: the size fitting will assume)."""
    from perf4sight.networks import load_network

    shape = test_shape(test)
    options = {} if shape is None else {"input_size": shape[0], "num_classes": shape[1]}
    return load_network(model_source(test), **options)


def check_models(tests: Sequence[ProfileTest]) -> None:
    """Refuse a test config whose model files are missing or whose specs do not read:
    such a test would fail without measuring anything, and its failure, journalled,
    would never be retried once the file is fixed."""
    from perf4sight.networks.model_file import split_model_source
    from perf4sight.networks.spec import read_spec

    for source in dict.fromkeys(model_source(test) for test in tests):
        path = split_model_source(source)[0]
        if path.suffix not in (".py", ".json"):  # a torchvision name
            continue
        if not path.is_file():
            raise ConfigError(f"test config: model file not found: {path}")
        if path.suffix == ".json":
            read_spec(path)
