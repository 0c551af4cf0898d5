"""Networks: load from a name, spec, model file or module; prune; architecture specs."""

from perf4sight.networks.spec import architecture_from_spec, build_from_spec, read_spec

__all__ = ["architecture_from_spec", "build_from_spec", "read_spec"]
