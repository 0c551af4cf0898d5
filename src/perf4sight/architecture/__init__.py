"""The architecture description (IR) between networks and features."""

from perf4sight.architecture.autograd import (
    BEFORE_COPIES,
    FIRST_COPYING,
    as_saved_by,
    check_torch_version,
    copies_inputs,
    version_name,
)
from perf4sight.architecture.derived import derived_values
from perf4sight.architecture.family import family_key
from perf4sight.architecture.ir import Architecture, Detail, Layer, Scaling, Timeline
from perf4sight.architecture.kinds import LayerKind, layer_kind, layer_kinds, register_layer_kind
from perf4sight.architecture.lifetimes import record_timeline, recording_problem, with_lifetimes
from perf4sight.architecture.propagate import LayerShape, with_layer_shapes
from perf4sight.architecture.trace import check_classes, module_kind, output_shape, trace_architecture

__all__ = [
    "BEFORE_COPIES", "FIRST_COPYING", "Architecture", "Detail", "Layer", "LayerKind", "LayerShape", "Scaling",
    "Timeline", "as_saved_by", "check_classes", "check_torch_version", "copies_inputs", "derived_values", "family_key",
    "layer_kind", "layer_kinds", "module_kind", "register_layer_kind", "output_shape", "record_timeline", "recording_problem", "trace_architecture", "version_name",
    "with_layer_shapes", "with_lifetimes",
]
