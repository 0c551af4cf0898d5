"""The host's model loader for the device's worker: everything `perf4sight.networks`
loads (specs, model files, torchvision names), at the size the test runs at.

The worker imports it by name (`LOADER`), so the device package never imports the host.
It imports `perf4sight.networks` itself, so that the worker has done so before its first
test: a memory test counts what training allocates, not the loader's modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from perf4sight.device.errors import ArgumentError, ConfigError
from perf4sight.device.models import check_against_spec, test_shape
from perf4sight.device.recipe import TRAIN_ALL, TRAIN_CLASSIFIER, Recipe
from perf4sight.device.test_config import ProfileTest
from perf4sight.networks import LoadedNetwork, load_network

if TYPE_CHECKING:
    from perf4sight.config import ProfileSettings

__all__ = ["LOADER", "check_models", "check_network_recipes", "load_test_model", "model_source"]

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
    shape = test_shape(test)
    options = {} if shape is None else {"input_size": shape[0], "num_classes": shape[1]}
    return load_network(model_source(test), **options)


def check_models(tests: Sequence[ProfileTest]) -> None:
    """Refuse a test config whose model files are missing or whose specs do not read or do
    not describe a network their base can become: such a test would fail without measuring
    anything, and its failure, journalled, would never be retried once the file is fixed."""
    from perf4sight.networks.model_file import split_model_source
    from perf4sight.networks.spec import read_spec, spec_architecture

    for source, test in {model_source(test): test for test in tests}.items():
        path = split_model_source(source)[0]
        if path.suffix not in (".py", ".json"):  # a torchvision name
            continue
        if not path.is_file():
            raise ConfigError(f"test config: model file not found: {path}")
        if path.suffix == ".json":
            spec_architecture(read_spec(path))
        elif path.with_suffix(".json").is_file():
            check_against_spec(path, load_test_model(test).module)


def check_network_recipes(settings: ProfileSettings) -> None:
    """Refuse a `trainable` layer a [profile] network lacks, or more checkpoint segments than
    it has blocks (`workload.recipe_problems`), before anything runs: checked on each network
    that is a torchvision name (its pruned variants keep its layers and blocks), built on the
    meta device at its own input size (the blocks do not depend on it, and nothing is
    computed). The device checks the test config's own models again when a campaign starts
    (`workload.check_recipes`)."""
    import torch

    from perf4sight.device.workload import checkpoint_blocks, recipe_problems
    from perf4sight.networks import known_networks
    from perf4sight.networks.registry import build_torchvision, default_input_size
    from perf4sight.profile.test_config import network_recipes

    for network in settings.network:
        needs = dict.fromkeys(Recipe(trainable=r.trainable, checkpoint_segments=r.checkpoint_segments)
                              for r in network_recipes(settings, network)
                              if r.trainable not in (TRAIN_ALL, TRAIN_CLASSIFIER) or r.checkpoint_segments)
        if not needs or network not in known_networks():
            continue
        module = build_torchvision(network, num_classes=10, device="meta")
        blocks = checkpoint_blocks(module, torch.empty(2, *default_input_size(network), device="meta")) \
            if any(recipe.checkpoint_segments for recipe in needs) else []
        for recipe in needs:
            problems = recipe_problems(module, recipe, blocks, network=network)
            if problems:
                raise ArgumentError(problems[0])
