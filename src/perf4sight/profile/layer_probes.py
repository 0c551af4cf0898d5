"""Layer-level tests: one convolution or linear layer of a network timed on its own.

A probe is a network of its own around one layer, so that the campaign runs it as it runs
any network (a model file with its spec beside it, in a test config, in the bundle, under
the device's oldest Python and PyTorch): a depthwise 1x1 convolution in front, so that the
layer's backward computes the gradient of its input as it does inside a network, then the
layer, then a global average pool whose channels are the classes. A `base` probe is that
frame without the layer, at the layer's input shape: what a probe adds to the layer.

The probes of a set of networks are their distinct layer shapes (`layer_shapes`), written
as `probe_<shape>.py` and `.json` into one folder (`write_probes`; `network_probes` for the
models of a [profile] section, `perf4sight profile probes`); profiling network `probe` from
that folder times them, and `read_layer_times` gives each layer shape's time per batch
size, its base's time taken off.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from torch import nn

from perf4sight.architecture import Architecture, Layer
from perf4sight.architecture.kinds import CONV2D, LINEAR
from perf4sight.config import ProfileSettings
from perf4sight.device.definitions import DATASETS, LATENCY, MAX_INPUT_EXTENT
from perf4sight.device.logs import GT_SUFFIX, read_gt
from perf4sight.errors import ArgumentError, NetworkError
from perf4sight.networks import load_architecture
from perf4sight.networks.model_writer import write_model_file
from perf4sight.networks.spec import spec_from_module, write_spec
from perf4sight.profile.test_config import find_model_files

__all__ = ["PROBE_NET", "LayerShape", "layer_shape", "layer_shapes", "network_probes", "probe_module", "read_layer_times",
           "write_probes"]

PROBE_NET = "probe"
_DIMS = r"(\d+)x(\d+)x(\d+)"
_NAME = re.compile(rf"^(?:base-{_DIMS}|(conv|linear)-{_DIMS}-o{_DIMS}-k(\d+)x(\d+)-s(\d+)x(\d+)-p(\d+)x(\d+)"
                   r"-g(\d+)-b([01]))$")


@dataclass(frozen=True, order=True)
class LayerShape:
    """What a layer's time depends on: its kind (`conv2d`, `linear`, or `base`: no layer), its
    input and output per sample (C, H, W; a linear layer's are (features, 1, 1)) and, for a
    convolution, its kernel, stride, padding and groups."""

    kind: str
    in_shape: tuple[int, int, int]
    out_shape: tuple[int, int, int] = (0, 0, 0)
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    groups: int = 1
    bias: bool = False

    @property
    def name(self) -> str:
        """The probe's level in `probe_<level>`: readable, and no underscore in it."""
        dims = "x".join(map(str, self.in_shape))
        if self.kind == "base":
            return f"base-{dims}"
        prefix = "conv" if self.kind == CONV2D else "linear"
        return (f"{prefix}-{dims}-o{'x'.join(map(str, self.out_shape))}-k{self.kernel[0]}x{self.kernel[1]}"
                f"-s{self.stride[0]}x{self.stride[1]}-p{self.padding[0]}x{self.padding[1]}"
                f"-g{self.groups}-b{int(self.bias)}")

    @property
    def base(self) -> LayerShape:
        """The probe frame at this layer's input shape."""
        return LayerShape("base", self.in_shape)

    @classmethod
    def from_name(cls, name: str) -> LayerShape:
        """The shape a probe's level names (`name`), as written by `name`."""
        match = _NAME.match(name)
        if match is None:
            raise NetworkError(f"'{name}' is not a probe's name")
        c, h, w, kind, *rest = match.groups()
        if kind is None:
            return cls("base", (int(c), int(h), int(w)))
        c, h, w, oc, oh, ow, kh, kw, sh, sw, ph, pw, groups, bias = (int(v) for v in rest)
        return cls(CONV2D if kind == "conv" else LINEAR, (c, h, w), (oc, oh, ow), (kh, kw), (sh, sw), (ph, pw),
                   groups, bool(bias))

    def layer(self) -> Layer:
        """The layer as the architecture describes it (a linear layer on one axis)."""
        if self.kind == LINEAR:
            return Layer(self.name, LINEAR, ((math.prod(self.in_shape),),), (self.out_shape[0],), bias=self.bias)
        return Layer(self.name, self.kind, (self.in_shape,), self.out_shape, kernel=self.kernel, stride=self.stride,
                     padding=self.padding, dilation=(1, 1), groups=self.groups, bias=self.bias)


def layer_shape(layer: Layer) -> LayerShape | None:
    """The probed shape of a convolution (not dilated) or a linear layer on one axis; None for any other."""
    if layer.kind == LINEAR and len(layer.in_shape) == 1 and len(layer.output) == 1:
        return LayerShape(LINEAR, _features_as_input(layer.in_shape[0]), (layer.output[0], 1, 1), bias=layer.bias)
    if layer.kind == CONV2D and len(layer.in_shape) == 3 and layer.dilation in ((), (1, 1)):
        return LayerShape(CONV2D, tuple(layer.in_shape), tuple(layer.output),  # type: ignore[arg-type]
                          tuple(layer.kernel), tuple(layer.stride), tuple(layer.padding),  # type: ignore[arg-type]
                          layer.groups, layer.bias)
    return None


def _features_as_input(features: int) -> tuple[int, int, int]:
    """A linear layer's input features as a probe's input (C, H, 1): one channel per feature
    up to the largest extent an input may have (`MAX_INPUT_EXTENT`), the rest over H."""
    height = next(h for h in range(1, features + 1) if features % h == 0 and features // h <= MAX_INPUT_EXTENT)
    return features // height, height, 1


def layer_shapes(architectures: Iterable[Architecture]) -> list[LayerShape]:
    """The distinct shapes of the convolutions and linear layers of `architectures`, sorted
    (dilated convolutions and layers on more than one sample axis are left out)."""
    return sorted({shape for arch in architectures for shape in map(layer_shape, arch.layers) if shape is not None})


def probe_module(shape: LayerShape) -> nn.Module:
    """The probe network of `shape` (its frame alone for `base`)."""
    channels = shape.in_shape[0]
    front = nn.Conv2d(channels, channels, 1, groups=channels, bias=False)
    if shape.kind == "base":
        return nn.Sequential(front, nn.AdaptiveAvgPool2d(1), nn.Flatten())
    if shape.kind == LINEAR:
        return nn.Sequential(front, nn.Flatten(), nn.Linear(math.prod(shape.in_shape), shape.out_shape[0],
                                                            bias=shape.bias))
    conv = nn.Conv2d(channels, shape.out_shape[0], shape.kernel, shape.stride, shape.padding,
                     groups=shape.groups, bias=shape.bias)
    return nn.Sequential(front, conv, nn.AdaptiveAvgPool2d(1), nn.Flatten())


def _classes(shape: LayerShape) -> int:
    return shape.in_shape[0] if shape.kind == "base" else shape.out_shape[0]


def write_probes(shapes: Sequence[LayerShape], folder: Path) -> list[Path]:
    """Write the probe of each shape and of each shape's base into `folder`: the model file
    `probe_<name>.py`, which the device runs, and its spec beside it, which gives the input
    size. A probe already there is kept. Returns the model files."""
    folder = Path(folder)
    wanted = dict.fromkeys([s.base for s in shapes] + list(shapes))
    paths = []
    for shape in wanted:
        name = f"{PROBE_NET}_{shape.name}"
        path = folder / f"{name}.py"
        if not (path.is_file() and path.with_suffix(".json").is_file()):
            module = probe_module(shape)
            write_model_file(module, path, net=PROBE_NET, name=name, num_classes=_classes(shape),
                             input_size=list(shape.in_shape))
            write_spec(spec_from_module(module, name=name, net=PROBE_NET, prune_level=0, input_size=shape.in_shape,
                                        num_classes=_classes(shape), model_desc=str(path.resolve())),
                       path.with_suffix(".json"))
        paths.append(path)
    return paths


def network_probes(settings: ProfileSettings) -> list[Path]:
    """Write into `local_model_loc` the probes of every layer shape of the models that
    [profile]'s networks (`network`, `probe` itself aside) have there, at the input size
    their tests run at (`dataset`), so that profiling network `probe` times them."""
    local = Path(settings.local_model_loc or ".")
    size_and_classes = DATASETS[settings.dataset] or (None, None)
    archs = []
    for network in settings.network:
        if network == PROBE_NET:
            continue
        for path in find_model_files(local, network):
            spec = path.with_suffix(".json")
            archs.append(load_architecture(str(spec if spec.is_file() else path), input_size=size_and_classes[0],
                                           num_classes=size_and_classes[1], model_desc_dir=local))
    if not archs:
        raise ArgumentError(f"network: no models of {', '.join(settings.network)} in {local}")
    return write_probes(layer_shapes(archs), local)


def read_layer_times(latency_dir: Path) -> pd.DataFrame:
    """Each probed layer shape's time (ms) per batch size and stage, its base's time taken off
    (at least zero), from the latency logs of a probe campaign (`<log_dir>/latency`), each
    checked as fingerprinting checks a log (`read_gt`).
    Columns: `shape` (a LayerShape), `batch_size`, `stage`, `probe_ms`, `base_ms`, `layer_ms`."""
    rows = []
    for path in sorted(Path(latency_dir).glob(f"{PROBE_NET}_*{GT_SUFFIX}")):
        shape = LayerShape.from_name(path.name[len(PROBE_NET) + 1:-len(GT_SUFFIX)])
        _, logged = read_gt(path, [LATENCY.column], PROBE_NET)
        rows += [(shape, row["bs"], row["stage"], row[LATENCY.column]) for row in logged if row["passed"]]
    times = pd.DataFrame(rows, columns=["shape", "batch_size", "stage", "ms"])
    times = times.groupby(["shape", "batch_size", "stage"], as_index=False)["ms"].last()
    bases = times[[s.kind == "base" for s in times["shape"]]].rename(columns={"shape": "base", "ms": "base_ms"})
    layers = times[[s.kind != "base" for s in times["shape"]]].rename(columns={"ms": "probe_ms"})
    layers = layers.assign(base=[s.base for s in layers["shape"]])
    merged = layers.merge(bases, on=["base", "batch_size", "stage"], how="inner").drop(columns="base")
    merged["layer_ms"] = (merged["probe_ms"] - merged["base_ms"]).clip(lower=0.0)
    return merged.reset_index(drop=True)
