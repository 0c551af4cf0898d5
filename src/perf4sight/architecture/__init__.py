"""The architecture description (IR) between networks and features."""

from perf4sight.architecture.ir import Architecture, Layer
from perf4sight.architecture.trace import module_kind, trace_architecture

__all__ = ["Architecture", "Layer", "module_kind", "trace_architecture"]
