"""Networks: load from a name, spec, model file or module; prune; architecture specs."""

from perf4sight.networks.network_dataset import MANIFEST_COLUMNS, MANIFEST_FILE, create_network_dataset
from perf4sight.networks.loader import LoadedNetwork, load_architecture, load_network
from perf4sight.networks.model_writer import CHECKED_STACKS, model_file_source, write_model_file
from perf4sight.networks.pruning import MAX_LEVEL, MODES, ChannelPruner, PrunedNetwork, prune_network
from perf4sight.networks.registry import NETWORK_ALIASES, known_networks, resolve_network
from perf4sight.networks.spec import (
    architecture_from_spec,
    build_from_spec,
    read_spec,
    spec_architecture,
    spec_from_module,
    spec_macs,
    write_spec,
)

__all__ = [
    "NETWORK_ALIASES",
    "MANIFEST_COLUMNS",
    "MANIFEST_FILE",
    "MAX_LEVEL",
    "MODES",
    "CHECKED_STACKS",
    "ChannelPruner",
    "LoadedNetwork",
    "PrunedNetwork",
    "architecture_from_spec",
    "build_from_spec",
    "create_network_dataset",
    "known_networks",
    "load_architecture",
    "load_network",
    "model_file_source",
    "prune_network",
    "read_spec",
    "resolve_network",
    "spec_architecture",
    "spec_from_module",
    "spec_macs",
    "write_model_file",
    "write_spec",
]
