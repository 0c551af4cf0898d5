"""A bundle profiles under the oldest stacks a Jetson runs (Python 3.6 + torch 1.10.2,
Python 3.8 + torch 1.12.1) with nothing else installed, on the CPU backend: a tiny campaign
killed and resumed, a test stopped by the memory limit, and logs `perf4sight fingerprint` fits.

The old interpreters come from tests/old_stacks.py (skipped, saying how to provide one, where
the machine has none); the bundles are made on the host once per module.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pandas as pd
import pytest
from old_stacks import OldStack

from perf4sight.cli import main
from perf4sight.profile import read_journal, read_test_config
from perf4sight.profile.layer_probes import PROBE_NET, LayerShape, read_layer_times, write_probes

pytestmark = pytest.mark.slow

CONFIG = """
[create_network_dataset]
networks = {networks}
pruning_perc = {levels}
input_size = [3, 32, 32]
num_classes = 10
model_path = {root}/specs

[profile]
network = {networks}
bs = {bs}
stage = {stages}
profile_variables = {variables}
device = cpu
iterations = 1
warmup = 0
"""


def _bundle(root: Path, *, networks: list[str], levels: list[int], bs: list[int], stages: list[str],
            variables: tuple[str, ...] = ("memory", "latency"), recipe: str = "") -> Path:
    """`perf4sight profile bundle` of these specs (made by [create_network_dataset]) and tests,
    with the [profile] recipe keys `recipe` (none: the default recipe)."""
    config = root / "config.ini"
    config.write_text(CONFIG.format(root=root, networks=networks, levels=levels, bs=bs, stages=stages,
                                    variables=list(variables)) + recipe)
    assert main(["--quiet", "profile", "bundle", "--config", str(config), "--out", str(root / "bundle")]) == 0
    return root / "bundle"


@pytest.fixture(scope="module")
def campaign_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two small specs (squeezenet at 0 and 50 %), batch size 2, training and inference,
    memory and latency: 8 tests."""
    return _bundle(tmp_path_factory.mktemp("campaign"), networks=["squeezenet"], levels=[0, 50], bs=[2],
                   stages=["training", "inference"])


@pytest.fixture(scope="module")
def fit_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """squeezenet and resnet18 pruned at 0 and 50 %, 3x32x32, batch sizes 2 and 4, training,
    memory and latency: 16 tests."""
    return _bundle(tmp_path_factory.mktemp("fit"), networks=["squeezenet", "resnet18"], levels=[0, 50], bs=[2, 4],
                   stages=["training"])


@pytest.fixture(scope="module")
def recipe_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """resnet18 at 0 %, batch size 2, training memory and latency, under each of two optimizers
    (adam, adamw) and two trainable parts (the classifier, layer4 on), bf16 autocast and 2
    checkpointed segments: 8 tests."""
    return _bundle(tmp_path_factory.mktemp("recipe"), networks=["resnet18"], levels=[0], bs=[2],
                   stages=["training"], recipe="optimizer = ['adam', 'adamw']\nprecision = ['amp-bf16']\n"
                                               "trainable = ['classifier', 'layer4']\ncheckpoint_segments = [2]\n")


@pytest.fixture(scope="module")
def big_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """squeezenet's training memory at batch sizes 2 and 4096 (about 2 GiB resident on torch 1.10)."""
    return _bundle(tmp_path_factory.mktemp("big"), networks=["squeezenet"], levels=[0], bs=[2, 4096],
                   stages=["training"], variables=("memory",))


def _run(stack: OldStack, bundle: Path, log_dir: Path, *args: str) -> None:
    done = stack.run([bundle / "run_profile.py", "--quiet", "--log-dir", log_dir, *args], timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


def _gt(log_dir: Path, variable: str, model: str) -> pd.DataFrame:
    return pd.read_csv(log_dir / variable / f"{model}-gt.csv", sep="|")


def _check_layout(bundle: Path, log_dir: Path, stack: OldStack) -> list:
    """The logs `profile run` writes, one journal row per test, run by the stack's torch; returns the tests."""
    tests = read_test_config(bundle / "test_config.ini")
    models = sorted({Path(t.model).stem for t in tests})
    variables = sorted({t.test_var for t in tests})
    assert sorted(str(p.relative_to(log_dir)) for p in log_dir.rglob("*.csv")) == sorted(
        f"{v}/{m}{suffix}.csv" for v in variables for m in models for suffix in ("", "-gt"))
    keys = [tuple(sorted(row["params"].items())) for v in variables for m in models
            for row in read_journal(log_dir / v / f"{m}.csv")]
    assert len(keys) == len(set(keys)) == len(tests)
    records = [json.loads(p.read_text()) for p in log_dir.glob("environment-*.json")]  # one per run
    assert records and all(r["torch"].split("+")[0] == stack.torch_version for r in records)
    assert all(r["python"].startswith(stack.python_version + ".") for r in records)
    assert all(r["fresh_pages_ms_per_mib"] >= 0 for r in records)  # the CPU's probe runs on the oldest stack too
    return tests


def test_a_campaign_killed_mid_way_resumes_with_one_row_per_test(old_stack: OldStack, campaign_bundle: Path,
                                                                 tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    journal = log_dir / "memory" / "squeezenet_0.csv"
    process = old_stack.popen([campaign_bundle / "run_profile.py", "--quiet", "--log-dir", log_dir],
                              start_new_session=True, stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
    deadline = time.monotonic() + 300
    while (not journal.exists() or journal.read_text().count("\n") < 2) and time.monotonic() < deadline:
        assert process.poll() is None, "the campaign ended before it could be killed"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)  # the campaign and its worker
    process.wait()
    done_before = sum(len(read_journal(p)) for p in log_dir.rglob("*.csv") if not p.stem.endswith("-gt"))
    assert 1 <= done_before < 8
    _run(old_stack, campaign_bundle, log_dir)
    tests = _check_layout(campaign_bundle, log_dir, old_stack)
    assert len(tests) == 8 and {t.stage for t in tests} == {"training", "inference"}
    for model in ("squeezenet_0", "squeezenet_50"):
        for variable in ("memory", "latency"):
            gt = _gt(log_dir, variable, model)
            assert len(gt) == 2 and gt["passed"].all(), gt
            assert sorted(gt["stage"]) == ["inference", "training"] and set(gt["bs"]) == {2}
            assert (gt[variable if variable == "latency" else "mem_used"] > 0).all()


def test_a_test_over_the_memory_limit_is_recorded_as_failed(old_stack: OldStack, big_bundle: Path,
                                                            tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    _run(old_stack, big_bundle, log_dir, "--memory-limit-mib", "600")
    _check_layout(big_bundle, log_dir, old_stack)
    gt = _gt(log_dir, "memory", "squeezenet_0").set_index("bs")
    assert bool(gt.loc[2, "passed"]) and not bool(gt.loc[4096, "passed"])
    assert "memory_limit_mib 600" in gt.loc[4096, "error"]


def test_logs_of_the_oldest_stack_are_fingerprinted(oldest_stack: OldStack, fit_bundle: Path, tmp_path: Path) -> None:
    """Python 3.6 + torch 1.10.2 with nothing else: every test passes and the host fits on the logs."""
    log_dir = tmp_path / "logs"
    _run(oldest_stack, fit_bundle, log_dir)
    freeze = oldest_stack.run(["-m", "pip", "freeze", "--all"])
    installed = {line.split("==")[0].lower() for line in freeze.stdout.split()}
    assert installed - {"pip", "setuptools", "wheel"} <= {"torch", "typing-extensions", "typing_extensions", "dataclasses"}
    tests = _check_layout(fit_bundle, log_dir, oldest_stack)
    assert len(tests) == 16
    for model in ("squeezenet_0", "squeezenet_50", "resnet18_0", "resnet18_50"):
        for variable in ("memory", "latency"):
            assert _gt(log_dir, variable, model)["passed"].all()
    config = tmp_path / "fingerprint.ini"
    config.write_text(
        "[fingerprint]\ntrain_nets = ['squeezenet', 'resnet18']\ntrain_logs = [0, 50]\n"
        f"memory_logs = ['{log_dir}/memory']\nlatency_logs = ['{log_dir}/latency']\n"
        f"pruned_models_storedir = {fit_bundle.parent}/specs\nmodel_storedir = {tmp_path}/fitted\n"
    )
    assert main(["--quiet", "fingerprint", "--config", str(config)]) == 0
    stored = sorted(p.name for p in (tmp_path / "fitted").iterdir())
    assert any("mem_used" in name for name in stored) and any("latency" in name for name in stored), stored


def test_recipes_profile_under_the_oldest_stack(oldest_stack: OldStack, recipe_bundle: Path, tmp_path: Path) -> None:
    """Adam/AdamW, bf16 autocast on the CPU, frozen layers and checkpointed segments under
    Python 3.6 + torch 1.10.2: every test passes and its row records its recipe."""
    log_dir = tmp_path / "logs"
    _run(oldest_stack, recipe_bundle, log_dir)
    tests = _check_layout(recipe_bundle, log_dir, oldest_stack)
    assert len(tests) == 8
    for variable in ("memory", "latency"):
        gt = _gt(log_dir, variable, "resnet18_0")
        assert gt["passed"].all(), gt["error"]
        assert sorted(zip(gt["optimizer"], gt["trainable"], gt["bs"])) == sorted(
            (o, t, 2) for o in ("adam", "adamw") for t in ("classifier", "layer4"))
        assert set(gt["precision"]) == {"amp-bf16"} and set(gt["checkpoint_segments"]) == {2}


PROBED = (
    LayerShape("conv2d", (8, 12, 12), (16, 6, 6), (3, 3), (2, 2), (1, 1), 1, False),
    LayerShape("conv2d", (8, 12, 12), (8, 12, 12), (5, 5), (1, 1), (2, 2), 8, False),
    LayerShape("linear", (40, 1, 1), (10, 1, 1), bias=True),
)


@pytest.fixture(scope="module")
def probe_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layer-level tests of a dense, a depthwise and a linear layer shape (and their two
    bases), batch sizes 2 and 4, training latency: 10 tests."""
    root = tmp_path_factory.mktemp("probes")
    write_probes(PROBED, root / "models")
    config = root / "config.ini"
    config.write_text(f"[profile]\nnetwork = ['{PROBE_NET}']\nbs = [2, 4]\nprofile_variables = ['latency']\n"
                      f"local_model_loc = {root / 'models'}\ndevice = cpu\niterations = 1\nwarmup = 0\n")
    assert main(["--quiet", "profile", "bundle", "--config", str(config), "--out", str(root / "bundle")]) == 0
    return root / "bundle"


def test_layer_probes_run_under_the_oldest_stack(oldest_stack: OldStack, probe_bundle: Path, tmp_path: Path) -> None:
    """Layer-level tests from a bundle under Python 3.6 + torch 1.10.2, read back as layer times."""
    log_dir = tmp_path / "logs"
    _run(oldest_stack, probe_bundle, log_dir)
    assert len(_check_layout(probe_bundle, log_dir, oldest_stack)) == 10
    times = read_layer_times(log_dir / "latency")
    assert sorted(zip(times["shape"], times["batch_size"])) == sorted((s, bs) for s in PROBED for bs in (2, 4))
    assert (times["probe_ms"] > 0).all() and (times["base_ms"] > 0).all()
