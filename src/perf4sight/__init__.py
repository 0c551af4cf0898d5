"""perf4sight: predict the memory and the time per iteration of training a CNN on a device.

The stages of the toolflow, each a subpackage: `networks` (load, prune, specs),
`profile` (measure on the device), `features` and `fit` (fingerprint the device), and
`predict` (answers for any network). The public API is re-exported here; each name is
imported on first use, so that `import perf4sight` (and the CLI's start) stays cheap.
"""

from __future__ import annotations

import importlib
from importlib.metadata import version
from typing import Any

__version__ = version("perf4sight")

_EXPORTS = {
    # the workload's names, defined once on the device side
    "STAGES": "perf4sight.device.definitions",
    "QUANTITIES": "perf4sight.device.definitions",
    "DATASETS": "perf4sight.device.definitions",
    "Recipe": "perf4sight.device.recipe",
    "load_config": "perf4sight.config",
    "run_config": "perf4sight.pipeline",
    "Architecture": "perf4sight.architecture",
    "Layer": "perf4sight.architecture",
    "Detail": "perf4sight.architecture",
    "trace_architecture": "perf4sight.architecture",
    "load_network": "perf4sight.networks",
    "load_architecture": "perf4sight.networks",
    "prune_network": "perf4sight.networks",
    "ChannelPruner": "perf4sight.networks",
    "create_network_dataset": "perf4sight.networks",
    "read_spec": "perf4sight.networks",
    "write_spec": "perf4sight.networks",
    "spec_from_module": "perf4sight.networks",
    "create_test_config": "perf4sight.profile",
    "profile_campaign": "perf4sight.profile",
    "profile_from_settings": "perf4sight.profile",
    "FEATURE_SETS": "perf4sight.features",
    "paper_features": "perf4sight.features",
    "network_features": "perf4sight.features",
    "METHODS": "perf4sight.fit",
    "fingerprint_device": "perf4sight.fit",
    "load_model": "perf4sight.fit",
    "Predictor": "perf4sight.predict",
    "plan_variants": "perf4sight.predict",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'perf4sight' has no attribute '{name}'")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted(__all__)
