"""The CUDA and Jetson backends on a real GPU; skipped where CUDA is absent."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from perf4sight.device.worker import WorkerProcess
from perf4sight.errors import ConfigError
from perf4sight.profile import profile_campaign, read_test_config

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_device_without_cuda_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="device = cuda: CUDA is not available"), WorkerProcess("cuda") as worker:
        worker.start()


@needs_cuda
@pytest.mark.parametrize("device", ["cuda", "jetson"])
def test_gpu_campaign_measures_memory_and_latency(tmp_path: Path, model_dir: Path, write_test_config,
                                                  device: str) -> None:
    config = write_test_config(tmp_path / "t.ini", [model_dir / "tinynet_0.py"], [2, 64],
                               stage=("training", "inference"))
    summary = profile_campaign(read_test_config(config), log_dir=tmp_path / "logs", device=device)
    assert summary.passed == 8
    memory = {(r.test.bs, r.test.stage): r.outcome.memory for r in summary.results if r.test.test_var == "memory"}
    for figures in memory.values():
        assert 0 < figures.mem_alloc <= figures.mem_reserved
        assert figures.mem_context > 0 and figures.mem_used >= figures.mem_context
        assert figures.capacity > 0
    assert memory[(64, "training")].mem_alloc > memory[(2, "training")].mem_alloc
    assert memory[(64, "inference")].mem_alloc < memory[(64, "training")].mem_alloc
    latencies = [r.latency_ms for r in summary.results if r.test.test_var == "latency"]
    assert all(latency > 0 for latency in latencies)
