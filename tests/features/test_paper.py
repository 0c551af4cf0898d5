"""The paper's features: hand-computed values, batch-size behaviour, spec against traced module."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from torch import nn

from perf4sight.architecture import trace_architecture
from perf4sight.errors import ConfigError, NetworkError
from perf4sight.features import FEATURE_SETS, paper_features
from perf4sight.networks import architecture_from_spec, build_from_spec, read_spec


def _small_net() -> nn.Module:
    # conv a: 3 -> 8 channels, 3x3, 8x8 map kept; conv b: 8 -> 16, 3x3, stride 2, 2 groups, 8x8 -> 4x4
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2, bias=False),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 10),
    )


# At batch size 2, worked out by hand from the paper's formulas, conv a + conv b:
#   weights        oc*ic/g*k^2                   8*3*9 + 16*4*9                 = 216 + 576
#   ifm (train)    2*bs*ic*ip^2                  2*2*3*64 + 2*2*8*64            = 768 + 2048
#   ofm (train)    2*bs*oc*op^2                  2*2*8*64 + 2*2*16*16           = 2048 + 1024
#   i2c fwd        bs*op^2*k^2*ic                2*64*9*3 + 2*16*9*8            = 3456 + 2304
#   GEMM fwd ops   bs*oc*op^2*k^2*ic/g           2*8*64*9*3 + 2*16*16*9*4       = 27648 + 18432
#   FFT ifm        ip*(ip+1)*bs*ic               8*9*2*3 + 8*9*2*8              = 432 + 1152
#   FFT fwd ops    ip^2*log2(ip)*(bs*ic + bs*oc + oc*ic/g) + bs*oc*ic*ip^2
#                  64*3*46 + 3072 + 64*3*112 + 16384                           = 11904 + 37888
#   FFT bwd_x ops  the same with op:             64*3*46 + 3072 + 16*2*112 + 4096 = 11904 + 7680
#   Winograd F(4,3) fwd tiles  3*bs*oc*6^2*ceil(ip/4)^2   3*2*8*36*4 + 3*2*16*36*4 = 6912 + 13824
#   Winograd F(4,3) bwd_w ops  bs*oc*ic/g*ceil(ip/4)^2*ceil(op/3)^2*36
#                              2*8*3*4*9*36 + 2*16*4*4*4*36                     = 62208 + 73728
EXPECTED_TRAINING_BS2 = {
    "tensor_weights": 792,
    "tensor_weight_grad": 1584,
    "tensor_ifm": 2816,
    "tensor_ofm": 3072,
    "tensors_sum": 8264,
    "gemm_i2c_fwd": 5760,
    "gemm_ops_fwd": 46080,
    "fft_ifm_fwd": 1584,
    "fft_ops_fwd": 49792,
    "fft_ops_bwd_x": 19584,
    "wino_4_3_fwd": 20736,
    "wino_ops_4_3_bwd_w": 135936,
}
EXPECTED_INFERENCE_BS2 = {"tensor_weights": 792, "tensor_ifm": 1408, "tensor_ofm": 1536, "tensors_sum": 3736}


@pytest.fixture(scope="module")
def small_arch():
    return trace_architecture(_small_net(), (3, 8, 8), name="small")


def test_training_features_match_hand_computed_values(small_arch):
    row = paper_features(small_arch, [2], "training").iloc[0]
    for name, value in EXPECTED_TRAINING_BS2.items():
        assert row[name] == pytest.approx(value), name


def test_inference_features_match_hand_computed_values(small_arch):
    table = paper_features(small_arch, [2], "inference")
    row = table.iloc[0]
    for name, value in EXPECTED_INFERENCE_BS2.items():
        assert row[name] == pytest.approx(value), name
    assert "tensor_weight_grad" not in table.columns
    assert len(table.columns) < len(paper_features(small_arch, [2], "training").columns)


def test_only_conv_layers_count(small_arch):
    conv_only = trace_architecture(nn.Sequential(*list(_small_net())[:4]), (3, 8, 8), name="convs")
    pd.testing.assert_frame_equal(paper_features(conv_only, [2, 8]), paper_features(small_arch, [2, 8]))


def test_features_rise_with_batch_size(h200_dir):
    arch = architecture_from_spec(read_spec(h200_dir / "models" / "resnet18_60.json"))
    sizes = list(range(2, 52, 2))
    table = paper_features(arch, sizes, "training")
    assert table["batch_size"].tolist() == sizes
    values = table.drop(columns="batch_size")
    steps = values.diff().iloc[1:]
    assert (steps >= 0).all().all()
    constant = {"tensor_weights", "fft_weights_fwd", "fft_weights_bwd_x"}
    rising = [c for c in values.columns if c not in constant]
    assert (steps[rising] > 0).all().all()
    assert (steps[sorted(constant)] == 0).all().all()
    # one batch size at a time gives the same rows as all at once
    single = pd.concat([paper_features(arch, [bs]) for bs in (2, 24)], ignore_index=True)
    pd.testing.assert_frame_equal(single, table[table["batch_size"].isin([2, 24])].reset_index(drop=True))


@pytest.mark.parametrize("name", ["resnet18_60", "googlenet_30", "squeezenet_90"])
def test_spec_and_traced_module_give_the_same_features(h200_dir, name):
    spec = read_spec(h200_dir / "models" / f"{name}.json")
    from_spec = architecture_from_spec(spec)
    traced = trace_architecture(build_from_spec(spec, device="meta"), spec["input_size"], name=name)
    assert len(traced.convs) == len(from_spec.convs)
    for stage in ("training", "inference"):
        pd.testing.assert_frame_equal(paper_features(from_spec, [2, 64], stage), paper_features(traced, [2, 64], stage))


def test_registered_as_the_paper_feature_set():
    assert FEATURE_SETS["paper"] is paper_features


def test_bad_inputs_are_refused(small_arch):
    with pytest.raises(ConfigError, match="stage: 'eval' is not one of training, inference"):
        paper_features(small_arch, [2], "eval")
    for sizes in ([0, 2], [1.5], []):  # refused as the whole-network features refuse them
        with pytest.raises(NetworkError, match="batch sizes: (empty list; )?expected positive integers"):
            paper_features(small_arch, sizes)
    mlp = trace_architecture(nn.Sequential(nn.Flatten(), nn.Linear(12, 2)), (3, 2, 2), name="mlp")
    with pytest.raises(NetworkError, match="mlp: no Conv2d"):
        paper_features(mlp, [2])
    assert np.isfinite(paper_features(small_arch, [1, 3, 5]).to_numpy()).all()
