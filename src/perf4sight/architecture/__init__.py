"""The architecture description (IR) between networks and features."""

from perf4sight.architecture.family import family_key
from perf4sight.architecture.ir import Architecture, Layer
from perf4sight.architecture.propagate import LayerShape, with_layer_shapes
from perf4sight.architecture.trace import LayerWatch, module_kind, output_shape, trace_architecture

__all__ = [
    "Architecture", "Layer", "LayerWatch", "LayerShape", "family_key", "module_kind", "output_shape",
    "trace_architecture", "with_layer_shapes",
]
