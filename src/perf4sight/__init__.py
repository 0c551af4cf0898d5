"""perf4sight: predict the memory and the time per iteration of training a CNN on a device.

The stages of the toolflow, each a subpackage: `networks` (load, prune, specs),
`profile` (measure on the device), `features` and `fit` (fingerprint the device), and
`predict` (answers for any network). The public API is re-exported here; each name is
imported on first use, so that `import perf4sight` (and the CLI's start) stays cheap.
"""

from __future__ import annotations

from importlib.metadata import version

from perf4sight.lazy import lazy_exports

__version__ = version("perf4sight")

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    # the workload's names, defined once on the device side
    ".device.definitions": ("STAGES", "QUANTITIES", "DATASETS"),
    ".device.recipe": ("Recipe",),
    ".config": ("load_config",),
    ".pipeline": ("run_config",),
    ".architecture": ("Architecture", "Layer", "Detail", "LayerKind", "register_layer_kind", "trace_architecture"),
    ".networks": ("load_network", "load_architecture", "prune_network", "ChannelPruner", "create_network_dataset",
                  "read_spec", "write_spec", "spec_from_module"),
    ".profile": ("create_test_config", "profile_campaign", "profile_from_settings"),
    ".features": ("FEATURE_SETS", "paper_features", "network_features"),
    ".fit": ("METHODS", "fingerprint_device", "load_model"),
    ".predict": ("Predictor", "plan_variants"),
}, own=["__version__"])
