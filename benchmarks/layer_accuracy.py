"""Latency from layer-level tests on the CPU zoo, each family of architectures left out.

The zoo's networks (`zoo_accuracy.py`) have 2168 distinct convolution and linear layer
shapes; a sample of them (20 per network, seed 0) was timed as probes (`perf4sight profile
probes`, `perf4sight.profile.layer_probes`) at batch sizes 2, 8 and 32, 5 iterations each.
For each family, a kernel predictor (per layer group, gradient-boosted trees on the log of
the layer's operations and input and output elements, times the batch size) is
fitted on the probes of the shapes no network of that family has; a network's latency is
then the sum of its layers' predicted times at a rate, plus its other layers' elements moved,
its layer count and its parameters, each at a rate fitted (non-negative, relative error) on
the other families' whole-network runs. Printed: MAPE % per family of that model and of
`physical` (the same run), the kernel predictor's own MAPE on the left-out family's probed
layers (those of 0.2 ms or more), and the share of a network's time its probed layers'
predicted sum makes.

    .venv/bin/python benchmarks/layer_accuracy.py [--profile N]

`--profile N` writes N probes per network into benchmarks/data/cpu_zoo/layers/models and
profiles them first (about 8 minutes for N = 20 on 2 idle cores); the logs are kept in
benchmarks/data/cpu_zoo/layers/latency.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import nnls
from sklearn.ensemble import HistGradientBoostingRegressor

from perf4sight.architecture import Architecture
from perf4sight.config import ProfileSettings
from perf4sight.features.network import gemm_flops, layer_group
from perf4sight.fit import ArchitectureCatalog, mape_pct
from perf4sight.networks.spec import read_spec, spec_architecture
from perf4sight.profile import profile_from_settings
from perf4sight.profile.layer_probes import (PROBE_NET, LayerShape, layer_shape, layer_shapes, read_layer_times,
                                             write_probes)
from zoo_accuracy import FAMILIES, ZOO_DIR, leave_family_out
from tx2_accuracy import profiled

LAYERS_DIR = ZOO_DIR / "layers"
_SMALLEST_MS = 0.02  # the kernel predictor's floor: below it a probe's time is its noise


def zoo_architectures() -> dict[str, tuple[str, Architecture]]:
    """Each zoo spec's network and architecture, by name."""
    archs = {}
    for path in sorted((ZOO_DIR / "models").glob("*.json")):
        spec = read_spec(path)
        archs[spec["name"]] = (spec["net"], spec_architecture(spec))
    return archs


def profile_sample(archs: dict[str, tuple[str, Architecture]], per_network: int) -> None:
    """Write `per_network` probes of each network's shapes (not drawn before) and profile them."""
    rng = random.Random(0)
    by_net: dict[str, list[Architecture]] = {}
    for net, arch in archs.values():
        by_net.setdefault(net, []).append(arch)
    chosen: set[LayerShape] = set()
    for net in sorted(by_net):
        shapes = [shape for shape in layer_shapes(by_net[net]) if shape not in chosen]
        chosen.update(rng.sample(shapes, min(per_network, len(shapes))))
    models = LAYERS_DIR / "models"
    write_probes(sorted(chosen), models)
    profile_from_settings(ProfileSettings(
        network=[PROBE_NET], bs=[2, 8, 32], stage=["training"], profile_variables=["latency"], local_model_loc=models,
        device_model_loc=models, test_config=LAYERS_DIR / "test_config.ini", log_dir=LAYERS_DIR, iterations=5))


def _inputs(shape: LayerShape, batch_size: int) -> np.ndarray:
    return np.log1p([gemm_flops(shape.layer()) * batch_size, np.prod(shape.in_shape) * batch_size,
                     np.prod(shape.out_shape) * batch_size])


class KernelPredictor:
    """A layer shape's time at a batch size, one model per layer group (`layer_group`); a
    group no probe holds is predicted by all groups' model."""

    def fit(self, times: pd.DataFrame) -> KernelPredictor:
        groups = times["shape"].map(lambda shape: layer_group(shape.layer()))
        self.models_ = {group: self._fitted(times[groups == group]) for group in groups.unique()}
        self.models_[None] = self._fitted(times)
        return self

    @staticmethod
    def _fitted(times: pd.DataFrame) -> HistGradientBoostingRegressor:
        x = np.array([_inputs(s, b) for s, b in zip(times["shape"], times["batch_size"])])
        y = np.log(np.maximum(times["layer_ms"].to_numpy(), _SMALLEST_MS))
        return HistGradientBoostingRegressor(max_iter=200, learning_rate=0.05, min_samples_leaf=5,
                                             random_state=0).fit(x, y)

    def predict(self, shapes: list[LayerShape], batch_size: int) -> np.ndarray:
        if not shapes:
            return np.zeros(0)
        groups = [layer_group(shape.layer()) for shape in shapes]
        x = np.array([_inputs(shape, batch_size) for shape in shapes])
        out = np.empty(len(shapes))
        for group in set(groups):
            rows = np.array([g == group for g in groups])
            out[rows] = np.exp(self.models_.get(group, self.models_[None]).predict(x[rows]))
        return out


def network_columns(arch: Architecture, batch_size: int, kernels: KernelPredictor) -> list[float]:
    """The network model's amounts: its probed layers' predicted ms, its other layers'
    elements moved, its layers, its parameters, 1."""
    probed, other = [], 0.0
    for layer in arch.layers:
        shape = layer_shape(layer)
        if shape is not None:
            probed.append(shape)
        else:
            other += (sum(float(np.prod(i)) for i in layer.inputs) + float(np.prod(layer.output))) * batch_size
    return [float(kernels.predict(probed, batch_size).sum()), other, float(len(arch.layers)), float(arch.params), 1.0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=int, metavar="N", help="profile N probes per network first")
    args = parser.parse_args(argv)
    archs = zoo_architectures()
    if args.profile:
        profile_sample(archs, args.profile)
    family_of = {net: family for family, nets in FAMILIES.items() for net in nets}
    family_shapes: dict[str, set[LayerShape]] = {}
    for net, arch in archs.values():
        family_shapes.setdefault(family_of[net], set()).update(layer_shapes([arch]))
    times = read_layer_times(LAYERS_DIR / "latency")
    times = times[times["stage"] == "training"]
    print(f"{len(times)} probed layer times ({times['shape'].nunique()} shapes)")

    runs = []
    for path in sorted((ZOO_DIR / "latency").glob("*-gt.csv")):
        log = pd.read_csv(path, sep="|")
        log = log[log["passed"].astype(bool) & (log["stage"] == "training")]
        runs += [(Path(model).stem, int(bs), float(ms)) for model, bs, ms in zip(log["model"], log["bs"], log["latency"])]
    names, sizes, measured = (np.array(column) for column in zip(*runs))
    families = np.array([family_of[archs[name][0]] for name in names])

    errors, kernel_errors, shares = {}, {}, {}
    for family in FAMILIES:
        held = families == family
        in_family = np.array([shape in family_shapes[family] for shape in times["shape"]])
        kernels = KernelPredictor().fit(times[~in_family])
        x = np.array([network_columns(archs[name][1], bs, kernels) for name, bs in zip(names, sizes)])
        weight, scale = 1 / measured[~held], x[~held].max(axis=0)
        scale[scale == 0] = 1
        coef, _ = nnls(x[~held] / scale * weight[:, None], measured[~held] * weight)
        errors[family] = mape_pct(measured[held], x[held] @ (coef / scale))
        shares[family] = float(np.median(x[held, 0] / measured[held]))
        test = times[in_family & (times["layer_ms"] >= 0.2).to_numpy()]
        predicted = np.concatenate([kernels.predict([s], b) for s, b in zip(test["shape"], test["batch_size"])])
        kernel_errors[family] = mape_pct(test["layer_ms"].to_numpy(), predicted)

    nets, levels = profiled(ZOO_DIR)
    physical, _, _ = leave_family_out("physical", ZOO_DIR, ArchitectureCatalog(ZOO_DIR / "models"), nets, levels)
    table = pd.DataFrame({
        "layers model %": errors,
        "physical %": {family: physical[family]["latency_ms"] for family in errors},
        "kernel predictor %": kernel_errors,
        "probed share": shares,
    }).round(2)
    print(table.to_string())
    print(f"mean: layers model {np.mean(list(errors.values())):.2f} %, physical "
          f"{np.mean(table['physical %']):.2f} %, kernel predictor {np.mean(list(kernel_errors.values())):.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
