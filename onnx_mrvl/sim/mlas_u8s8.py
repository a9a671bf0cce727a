"""onnxruntime's U8S8 integer kernels on x86 without VNNI: 16-bit saturated pairs (docs/simulator.md "int8 layers").

A QDQ Conv / MatMul / Gemm that onnxruntime fuses into QLinearConv / QLinearMatMul / QGemm runs on
MLAS's U8S8 kernels: uint8 activations (int8 ones after its S8 -> U8 rewrite: ``q + 128`` with zero
point ``z + 128``) times int8 weights. Where the CPU has no VNNI nor AMX (AVX2 / AVX-512 core, the
``QgemmU8S8KernelAvx2`` / ``ConvSymKernelAvx2`` kernels), MLAS multiplies with ``vpmaddubsw``: the
products of two adjacent K values are added into an int16 **with saturation** (clamped to
[-32768, 32767]), then ``vpmaddwd`` widens pairs of those into int32 exactly. K runs as onnxruntime's
NHWC im2col orders it, (kernel row, kernel column, input channel) within a group -- the OHWI order of
the int8 layers' kernels -- padded with zeros to a multiple of 4; both the QGEMM path and ConvSym (input
channels a multiple of 4: blocks of 4 channels per kernel position) pair the same K values. The zero
points' terms (``z_x * colsum(w)``, ``z_w * rowsum(x)``) are added exactly outside the kernel, so the
layer's sum is the exact one plus the clamp's deficit ``sum_j clip(p_j) - p_j`` over the raw-code pair
sums ``p_j = x_2j w_2j + x_2j+1 w_2j+1``. Depthwise convs (MLAS's depthwise kernel widens to 32 bits)
and VNNI / AMX machines (``vpdpbusd`` sums four products in int32) sum exactly.

The simulator follows the onnxruntime of the machine it runs on, as for its thread count
(int8_float_conv.ort_threads): ``saturates()`` reads the CPU's flags; ``ONNX_MRVL_ORT_U8S8_SAT``
(``1`` / ``0``) overrides (an onnxruntime reference computed on another machine)."""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

from .native_loader import cpu_flags

EXACT_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")   # MLAS's U8S8 kernels that sum in int32
LIMIT = 32767
_CHUNK = 1 << 22   # elements of one block of pair sums


def saturates() -> bool:
    """True when this machine's onnxruntime runs U8S8 with ``vpmaddubsw`` (x86 AVX2 without VNNI / AMX)."""
    env = os.environ.get("ONNX_MRVL_ORT_U8S8_SAT")
    if env in ("0", "1"):
        return env == "1"
    have = set(cpu_flags().split())
    return "avx2" in have and not have.intersection(EXACT_FLAGS)


def raw_zero_point(dtype: str, zp: int) -> int:
    """The uint8 zero point MLAS's kernel sees: ``z`` for uint8 activations, ``z + 128`` for int8 ones."""
    return int(zp) + (128 if dtype == "int8" else 0)


def deficit(cols: np.ndarray, kernel: np.ndarray, x_zp: int, w_zp: Optional[np.ndarray]) -> np.ndarray:
    """``sum_j clip(p_j) - p_j`` [rows, O]: what the 16-bit clamp takes off the exact sums.

    ``cols`` [rows, K] the input codes minus their zero point (the int8 layers' float64 columns),
    ``kernel`` [K, O] the weight codes minus theirs, ``x_zp`` the raw uint8 zero point, ``w_zp`` the
    weights' (None: 0): the kernel multiplies the raw codes ``cols + x_zp`` and ``kernel + w_zp``."""
    rows, k = cols.shape
    w = kernel if w_zp is None else kernel + np.asarray(w_zp, np.float64).reshape(1, -1)
    if k % 2:
        cols = np.concatenate([cols, np.full((rows, 1), -float(x_zp))], 1)   # raw 0: the zero padding
        w = np.concatenate([w, np.zeros((1, w.shape[1]))], 0)
    we, wo = w[0::2], w[1::2]
    out = np.zeros((rows, w.shape[1]), np.float64)
    j, o = np.nonzero(np.abs(we) + np.abs(wo) > LIMIT / 255.0)   # pairs that can leave the int16 range
    if j.size == 0:
        return out
    xe, xo = cols[:, 0::2] + x_zp, cols[:, 1::2] + x_zp
    cw, cwo = we[j, o], wo[j, o]
    step = max(1, _CHUNK // max(rows, 1))
    for a in range(0, j.size, step):
        s = slice(a, a + step)
        p = xe[:, j[s]] * cw[s] + xo[:, j[s]] * cwo[s]     # [rows, pairs]
        d = np.clip(p, -LIMIT - 1, LIMIT) - p
        np.add.at(out.T, o[s], d.T)
    return out
