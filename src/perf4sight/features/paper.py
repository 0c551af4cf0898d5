"""The paper's analytic features: what each Conv2d allocates and computes, summed over a network.

perf4sight (ICCVW 2021) describes a network by the memory and the work its Conv2d layers
need under the algorithms a library may pick for them: tensor allocations, im2col GEMM
buffers and operation counts, FFT buffers and operation counts, and Winograd F(4,3) and
F(3,2) tile buffers and operation counts. The training stage adds the backward pass
(gradients with respect to inputs and weights); the inference stage has the forward pass
only. Each feature is a per-layer formula summed over all Conv2d layers, for each batch size.

The formulas are the paper's, written for square maps (`ip` the input side, `op` the output
side, `k` the kernel side); for a rectangular map `ip**2` becomes `H*W`, `ip` the geometric
mean of `H` and `W`, and the same for kernels and outputs, so square maps give the paper's
values exactly. Everything is numpy over (batch size, layer), so one call covers every batch
size of a network at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from perf4sight.architecture import Architecture, Detail
from perf4sight.errors import NetworkError
from perf4sight.features.inputs import needs

__all__ = ["paper_features"]

_WINOGRAD_TILES = ((4, 3), (3, 2))


class _Convs:
    """The Conv2d layers of a network as column vectors (one entry per layer)."""

    def __init__(self, arch: Architecture) -> None:
        convs = arch.convs
        if not convs:
            raise NetworkError(f"network {arch.name}: no Conv2d layers, the paper's features need some")
        rows = []
        for layer in convs:
            if len(layer.in_shape) != 3 or len(layer.output) != 3 or len(layer.kernel) != 2:
                raise NetworkError(
                    f"network {arch.name}: Conv2d '{layer.name}' lacks (C, H, W) shapes or a 2-d kernel"
                )
            (c_in, h_in, w_in), (c_out, h_out, w_out) = layer.in_shape, layer.output
            rows.append((c_in, h_in, w_in, c_out, h_out, w_out, *layer.kernel, layer.groups))
        table = np.asarray(rows, dtype=np.float64)
        (self.ic, h_in, w_in, self.oc, h_out, w_out, k_h, k_w, groups) = table.T
        self.eff_ic = self.ic / groups
        self.in_area = h_in * w_in
        self.out_area = h_out * w_out
        self.k_area = k_h * k_w
        self.ip = np.sqrt(self.in_area)
        self.op = np.sqrt(self.out_area)
        # real-input FFT buffers: H rows of (W + 1) values (W/2 + 1 complex numbers)
        self.in_fft = h_in * (w_in + 1)
        self.out_fft = h_out * (w_out + 1)
        self.h_in, self.w_in, self.h_out, self.w_out = h_in, w_in, h_out, w_out
        self.k_h, self.k_w = k_h, k_w

    def tiles_in(self, m: int) -> np.ndarray:
        """Winograd output tiles of side m covering the input map (the paper's ceil(ip/m)**2)."""
        return np.ceil(self.h_in / m) * np.ceil(self.w_in / m)

    def tiles_out(self, m: int) -> np.ndarray:
        """The output map cut in pieces of side m (the paper's ceil(op/m)**2)."""
        return np.ceil(self.h_out / m) * np.ceil(self.w_out / m)

    def kernel_tiles(self, r: int) -> np.ndarray:
        return np.ceil(self.k_h / r) * np.ceil(self.k_w / r)


def _forward(c: _Convs, bs: np.ndarray, training: bool) -> dict[str, np.ndarray]:
    """Features of the forward pass; `bs` is a (B, 1) column, layer vectors broadcast to (B, L)."""
    # training keeps each feature map and its gradient: twice the forward's tensors
    maps = 2.0 if training else 1.0
    weights = c.oc * c.eff_ic * c.k_area
    ifm = maps * bs * c.ic * c.in_area
    ofm = maps * bs * c.oc * c.out_area
    f: dict[str, np.ndarray] = {"tensor_weights": np.broadcast_to(weights, ifm.shape)}
    if training:
        f["tensor_weight_grad"] = bs * weights
    f["tensor_ifm"] = ifm
    f["tensor_ofm"] = ofm
    f["tensors_sum"] = sum(f.values())
    f["gemm_i2c_idx_fwd"] = bs * c.out_area
    f["gemm_i2c_fwd"] = bs * c.out_area * c.k_area * c.ic
    f["gemm_ops_fwd"] = bs * c.oc * c.out_area * c.k_area * c.eff_ic
    f["fft_weights_fwd"] = np.broadcast_to(c.in_fft * c.oc * c.eff_ic, ifm.shape)
    f["fft_ifm_fwd"] = c.in_fft * bs * c.ic
    f["fft_sum_fwd"] = f["fft_ifm_fwd"] + f["fft_weights_fwd"]
    f["fft_ops_fwd"] = (
        c.in_area * np.log2(c.ip) * (bs * c.ic + bs * c.oc + c.oc * c.eff_ic)
        + bs * c.oc * c.ic * c.in_area
    )
    return f


def _training(c: _Convs, bs: np.ndarray) -> dict[str, np.ndarray]:
    """The training stage: the forward features plus both backward passes, in the paper's order."""
    fwd = _forward(c, bs, training=True)
    f = {k: fwd[k] for k in ("tensor_weights", "tensor_weight_grad", "tensor_ifm", "tensor_ofm", "tensors_sum")}
    # im2col buffers and their index arrays
    f["gemm_i2c_idx_fwd"] = fwd["gemm_i2c_idx_fwd"]
    f["gemm_i2c_fwd"] = fwd["gemm_i2c_fwd"]
    f["gemm_i2c_idx_bwd_x"] = bs * c.in_area
    f["gemm_i2c_bwd_x"] = bs * c.in_area * c.k_area * c.ic
    f["gemm_i2c_bwd_w"] = bs * c.out_area * c.k_area * c.eff_ic
    f["gemm_i2c_sum"] = f["gemm_i2c_fwd"] + f["gemm_i2c_bwd_x"] + f["gemm_i2c_bwd_w"]
    f["gemm_i2c_idx_sum"] = 2 * f["gemm_i2c_idx_fwd"] + f["gemm_i2c_idx_bwd_x"]
    # GEMM multiply-accumulates
    f["gemm_ops_fwd"] = fwd["gemm_ops_fwd"]
    f["gemm_ops_bwd"] = bs * c.ic * c.in_area * c.k_area * c.oc
    f["gemm_ops_sum"] = 2 * f["gemm_ops_fwd"] + f["gemm_ops_bwd"]
    # FFT buffers
    f["fft_weights_fwd"] = fwd["fft_weights_fwd"]
    f["fft_ifm_fwd"] = fwd["fft_ifm_fwd"]
    f["fft_ofm_bwd_w"] = c.in_fft * bs * c.oc
    f["fft_weights_bwd_x"] = np.broadcast_to(c.out_fft * c.oc * c.eff_ic, bs.shape[:1] + c.oc.shape)
    f["fft_ofm_bwd_x"] = c.out_fft * bs * c.oc
    f["fft_sum_fwd"] = fwd["fft_sum_fwd"]
    f["fft_sum_bwd_x"] = f["fft_ofm_bwd_x"] + f["fft_weights_bwd_x"]
    f["fft_sum_bwd_w"] = f["fft_ofm_bwd_w"] + f["fft_ifm_fwd"]
    f["fft_sum"] = f["fft_sum_fwd"] + f["fft_sum_bwd_x"] + f["fft_sum_bwd_w"]
    # FFT operations (the paper's weight-gradient term uses ip * log2(ip**2))
    mixed = bs * c.ic + bs * c.oc + c.oc * c.eff_ic
    f["fft_ops_fwd"] = fwd["fft_ops_fwd"]
    f["fft_ops_bwd_x"] = c.out_area * np.log2(c.op) * mixed + bs * c.oc * c.ic * c.out_area
    f["fft_ops_bwd_w"] = c.ip * np.log2(c.in_area) * mixed + bs * c.oc * c.ic * c.in_area
    f["fft_ops_sum"] = f["fft_ops_fwd"] + f["fft_ops_bwd_x"] + f["fft_ops_bwd_w"]
    # Winograd tile buffers (3 copies: input, filter and output transforms)
    for m, r in _WINOGRAD_TILES:
        tile = (m + r - 1) ** 2
        fwd_t = _winograd_fwd_tiles(c, bs, m, r)
        bwd_x = 3 * bs * c.ic * tile * c.tiles_out(m)
        bwd_w = 3 * bs * c.oc * c.eff_ic * tile * c.tiles_in(m)
        f.update(_winograd_sums(f"wino_{m}_{r}", fwd_t, bwd_x, bwd_w))
    # Winograd operations
    for m, r in _WINOGRAD_TILES:
        tile = (m + r - 1) ** 2
        fwd_o = _winograd_fwd_ops(c, bs, m, r)
        bwd_x = bs * c.ic * c.oc * c.tiles_out(m) * c.kernel_tiles(r) * tile
        bwd_w = bs * c.oc * c.eff_ic * c.tiles_in(m) * c.tiles_out(r) * tile
        f.update(_winograd_sums(f"wino_ops_{m}_{r}", fwd_o, bwd_x, bwd_w))
    return f


def _winograd_fwd_tiles(c: _Convs, bs: np.ndarray, m: int, r: int) -> np.ndarray:
    """Forward F(m, r) tile buffers (3 copies: input, filter and output transforms)."""
    return 3 * bs * c.oc * (m + r - 1) ** 2 * c.tiles_in(m)


def _winograd_fwd_ops(c: _Convs, bs: np.ndarray, m: int, r: int) -> np.ndarray:
    return bs * c.oc * c.eff_ic * c.tiles_in(m) * c.kernel_tiles(r) * (m + r - 1) ** 2


def _winograd_sums(prefix: str, fwd: np.ndarray, bwd_x: np.ndarray, bwd_w: np.ndarray) -> dict[str, np.ndarray]:
    return {
        f"{prefix}_fwd": fwd,
        f"{prefix}_bwd_x": bwd_x,
        f"{prefix}_bwd_w": bwd_w,
        f"{prefix}_sum_fwd_bwd_x": fwd + bwd_x,
        f"{prefix}_sum_fwd_bwd_w": fwd + bwd_w,
        f"{prefix}_sum_bwd": bwd_x + bwd_w,
        f"{prefix}_sum": fwd + bwd_x + bwd_w,
    }


def _inference(c: _Convs, bs: np.ndarray) -> dict[str, np.ndarray]:
    """The inference stage: the forward pass only."""
    f = _forward(c, bs, training=False)
    for m, r in _WINOGRAD_TILES:
        f[f"wino_{m}_{r}_fwd"] = _winograd_fwd_tiles(c, bs, m, r)
    for m, r in _WINOGRAD_TILES:
        f[f"wino_ops_{m}_{r}_fwd"] = _winograd_fwd_ops(c, bs, m, r)
    return f


_STAGE_FEATURES = {"training": _training, "inference": _inference}


@needs(Detail.LAYER_TABLE)
def paper_features(arch: Architecture, batch_sizes: Sequence[int], stage: str = "training") -> pd.DataFrame:
    """One row per batch size: `batch_size` and the paper's features summed over the Conv2d layers.

    Needs only the Conv2d layers' shapes, so an incomplete Architecture (from a spec) will do.
    """
    bs = np.asarray(batch_sizes, dtype=float)
    per_layer = _STAGE_FEATURES[stage](_Convs(arch), bs.reshape(-1, 1))
    columns = {"batch_size": bs.astype(np.int64)}
    columns.update({name: values.sum(axis=1) for name, values in per_layer.items()})
    return pd.DataFrame(columns)

