"""Networks: load from a name, spec, model file or module; prune; architecture specs.

Each name is imported on first use (`perf4sight.lazy`): the value checks of `checks` are
imported without torch, before the CLI loads anything.
"""

from perf4sight.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".network_dataset": ("MANIFEST_COLUMNS", "MANIFEST_FILE", "create_network_dataset"),
    ".loader": ("LoadedNetwork", "forget_traces", "load_architecture", "load_network"),
    ".model_writer": ("CHECKED_STACKS", "model_file_source", "write_model_file"),
    ".checks": ("MAX_LEVEL", "MODES"),
    ".pruning": ("ChannelPruner", "PrunedNetwork", "PrunedWidths", "prune_network"),
    ".registry": ("NETWORK_ALIASES", "known_networks", "resolve_network"),
    ".variants": ("NetworkVariants",),
    ".spec": ("architecture_from_spec", "build_from_spec", "read_spec", "spec_architecture", "spec_from_module",
              "spec_macs", "write_spec"),
})
