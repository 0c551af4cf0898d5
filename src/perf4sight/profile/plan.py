"""A campaign that fits a time budget: each candidate test's time estimated from a short probe
of this machine, then a spread of tests (`selection.spread_tests`) until the budget is spent.

The probe builds each network's least pruned model and times one training iteration of it at
the smallest and at the largest batch size (after one warm-up), as the profiler's worker runs
it. A model's iteration at batch size b is then `a + s * b`: its network's fixed cost per
iteration `a` (its layers' launches, the optimizer's step) and its cost per sample `s`, scaled
by the model's operations per sample against the probed model's (the `network` features' GEMM
work). A test adds what starting it costs: a memory test runs in a worker of its own (a Python
with torch and the model loader imported) that builds its model twice, cold
(`device.workload.run_test`), which one real memory test measures; a latency test builds it
once, in the worker the latency tests share. The plan is timed on the machine that runs it: on the host, for
`device = cpu` or a local GPU; a bundle's device is not there to be probed.

Then from what has run (`from_what_has_run`): where `log_dir` already holds a candidate's tests
with their seconds (`test_s`), it costs nothing (the campaign skips what is recorded), and the
other estimates are scaled by what those took against their estimates, so that a plan made
again after a run (a larger budget, a resumed campaign) is timed by this machine's campaign
rather than by its probe alone.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from perf4sight import console
from perf4sight.config import ProfileSettings
from perf4sight.device.definitions import MEMORY, QUANTITIES
from perf4sight.device.logs import architecture_name

__all__ = ["NetworkProbe", "estimate_seconds", "from_what_has_run", "logged_seconds", "probe_network",
           "test_start_seconds", "time_tests"]


@dataclass(frozen=True)
class NetworkProbe:
    """A network's timings on this machine: building its probed model, an iteration's fixed
    cost and cost per sample (seconds), and the probed model's GEMM operations per sample."""

    build_s: float
    fixed_s: float
    per_sample_s: float
    flops_per_sample: float

    def iteration_s(self, flops_per_sample: float, bs: int) -> float:
        """An iteration of a model of `flops_per_sample` operations per sample at batch size `bs`."""
        scale = flops_per_sample / self.flops_per_sample if self.flops_per_sample else 1.0
        return self.fixed_s + self.per_sample_s * scale * bs


def time_tests(settings: ProfileSettings, tests: pd.DataFrame,
               local: dict[str, Sequence[Path]]) -> tuple[np.ndarray, float]:
    """Each candidate of `tests` (`estimate_seconds`) timed on this machine from a probe of each
    network's least pruned model (`local`: network -> its model files here, least pruned
    first) and a memory test of the first network's most pruned one; and what starting the
    campaign costs (its first worker's start)."""
    with console.progress("timing the networks", len(local) + 1) as bar:
        probes = {}
        for network, files in local.items():
            bar.label(network)
            probes[network] = probe_network(settings, Path(files[0]), settings.bs)
            bar.advance(network)
        network, files = next(iter(local.items()))
        memory_test = f"a memory test of {Path(files[-1]).stem}"
        bar.label(memory_test)
        start_s = test_start_seconds(settings, network, Path(files[-1]))
        bar.advance(memory_test)
    return estimate_seconds(settings, tests, probes, start_s), start_s


def test_start_seconds(settings: ProfileSettings, network: str, model: Path) -> float:
    """What a test costs here beyond its iterations: one memory test of `model` (a `network`
    model) at the smallest batch size, run in a worker of its own as a campaign runs it
    (the worker's Python, torch and the model loader imported, the model built twice, cold),
    less its iterations."""
    from perf4sight.device.backends import backend_name
    from perf4sight.device.test_config import ProfileTest
    from perf4sight.device.worker import WorkerProcess
    from perf4sight.profile.models import LOADER

    test = ProfileTest(MEMORY.kind, min(settings.bs), settings.dataset, network, settings.stage[0], str(model))
    start = time.perf_counter()
    with WorkerProcess(backend_name(settings.device), gpu_id=settings.gpu_id, loader=LOADER) as worker:
        outcome = worker.run(test, iterations=settings.iterations, warmup=settings.warmup)
    elapsed = time.perf_counter() - start
    iterations_s = sum(outcome.latency_iters_ms) / 1e3 * (settings.warmup + settings.iterations) / settings.iterations
    return max(elapsed - iterations_s, 0.0)


def probe_network(settings: ProfileSettings, model: Path, batch_sizes: Sequence[int]) -> NetworkProbe:
    """Time `model` (a network's least pruned model file or spec) at the smallest and largest
    of `batch_sizes`, one warm-up and one timed iteration each, on [profile]'s device."""
    import torch

    from perf4sight.device.backends import make_backend
    from perf4sight.device.definitions import dataset_load_options
    from perf4sight.device.recipe import DEFAULT_RECIPE
    from perf4sight.device.workload import iteration
    from perf4sight.networks import load_network

    backend = make_backend(settings.device, gpu_id=settings.gpu_id)
    backend.setup()
    start = time.perf_counter()
    network = load_network(str(model), **dataset_load_options(settings.dataset))
    build_s = time.perf_counter() - start
    module = network.module.to(backend.device)
    sizes = sorted({min(batch_sizes), max(batch_sizes)})
    seconds = []
    for bs in sizes:
        inputs = torch.randn(bs, *network.input_size, device=backend.device)
        step = iteration(module, settings.stage[0], inputs, network.num_classes, DEFAULT_RECIPE)
        step()
        backend.synchronize()
        seconds.append(backend.time_ms(step) / 1e3)
    per_sample = (seconds[-1] - seconds[0]) / (sizes[-1] - sizes[0]) if len(sizes) > 1 else seconds[0] / sizes[0]
    per_sample = max(per_sample, 0.0)
    fixed = max(seconds[0] - per_sample * sizes[0], 0.0)
    return NetworkProbe(build_s, fixed, per_sample, _flops_per_sample(model, settings))


def estimate_seconds(settings: ProfileSettings, tests: pd.DataFrame, probes: dict[str, NetworkProbe],
                     start_s: float) -> np.ndarray:
    """Seconds each candidate of `tests` (columns `net`, `local` (its model here), `bs`: a model
    at a batch size, run for each [profile] stage and variable) takes on this machine; a
    memory test starts as `test_start_seconds` measured (`start_s`), a latency test builds its
    model in the worker the latency tests share, once in each of `latency_passes`."""
    runs = settings.warmup + settings.iterations
    flops = {path: _flops_per_sample(Path(path), settings) for path in dict.fromkeys(tests["local"])}
    seconds = []
    for net, path, bs in zip(tests["net"], tests["local"], tests["bs"]):
        probe = probes[net]
        loop = runs * probe.iteration_s(flops[path], int(bs))
        per_variable = [start_s + loop if variable == MEMORY.kind else settings.latency_passes * (probe.build_s + loop)
                        for variable in settings.profile_variables]
        seconds.append(len(settings.stage) * sum(per_variable))
    return np.asarray(seconds)


def logged_seconds(settings: ProfileSettings, tests: pd.DataFrame) -> np.ndarray:
    """The seconds the logs under `settings.log_dir` hold for each candidate of `tests`
    (columns `local`, `bs`): the sum of its tests' `test_s` over each [profile] stage and
    variable, NaN where any of those tests has no row with one."""
    from perf4sight.fit.logs import read_gt_log

    kinds = {quantity.kind: quantity for quantity in QUANTITIES}
    logs: dict[tuple[str, str], pd.DataFrame | None] = {}
    seconds = []
    for path, bs in zip(tests["local"], tests["bs"]):
        total = 0.0
        for variable in settings.profile_variables:
            name = architecture_name(str(path))
            if (variable, name) not in logs:
                gt = settings.log_dir / variable / f"{name}-gt.csv"
                logs[(variable, name)] = read_gt_log(gt, [kinds[variable]]) if gt.is_file() else None
            frame = logs[(variable, name)]
            if frame is None or "test_s" not in frame or "stage" not in frame:
                total = np.nan
                break
            rows = frame[(frame["bs"] == int(bs)) & frame["stage"].isin(settings.stage)]
            taken = pd.to_numeric(rows["test_s"], errors="coerce").dropna()
            if set(rows.loc[taken.index, "stage"]) != set(settings.stage):
                total = np.nan
                break
            total += float(taken.sum())
        seconds.append(total)
    return np.asarray(seconds, dtype=float)


def from_what_has_run(settings: ProfileSettings, tests: pd.DataFrame) -> np.ndarray:
    """`tests`' `seconds` (their estimates) corrected by the logs (`logged_seconds`): none for
    a candidate already measured, and the others' scaled by what the measured ones took
    against their estimates."""
    estimated = tests["seconds"].to_numpy(dtype=float)
    logged = logged_seconds(settings, tests)
    measured = ~np.isnan(logged)
    if not measured.any() or estimated[measured].sum() <= 0:
        return estimated
    ratio = float(logged[measured].sum() / estimated[measured].sum())
    console.info(f"{int(measured.sum())} of the candidates are in {settings.log_dir} already: they took {ratio:.2f}x "
                 "their estimates, and the others' are scaled so")
    return np.where(measured, 0.0, estimated * ratio)


def _flops_per_sample(model: Path, settings: ProfileSettings) -> float:
    """A model's GEMM operations per sample in training (the `network` features' flops)."""
    from perf4sight.device.definitions import dataset_load_options
    from perf4sight.features import network_features
    from perf4sight.features.network import GEMM_GROUPS, group_column
    from perf4sight.networks import load_architecture

    arch = load_architecture(model, **dataset_load_options(settings.dataset))
    table = network_features(arch, [1], settings.stage[0])
    return float(sum(table[group_column(group, "flops")].iloc[0] for group in GEMM_GROUPS))
