"""BatchMatMul: the product of two activations (attention's Q*K^T and P*V), batched over the
leading axes.

Numerics as the FC layer: fp16 operands (the stored values), products summed in float32, the
float32 sum scaled by ``alpha`` (attention's 1/sqrt(d)), then rounded to fp16 once. Leading axes
broadcast as numpy's matmul does (equal or 1). ``transpose_b`` reads B [..., N, K] as its
transpose (K's rows, the FC kernel's OI order).
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

from .fp16 import round_fp16_

F32 = np.float32


class BatchMatMul:
    def __init__(self, transpose_b: bool = False, alpha: float = 1.0):
        self.transpose_b = bool(transpose_b)
        self.alpha = F32(alpha)

    def output_shape(self, a_shape, b_shape) -> Tuple[int, ...]:
        """The output shape for operands of these shapes; ValueError when they do not fit."""
        if len(a_shape) != len(b_shape) or len(a_shape) < 2:
            raise ValueError(f"BatchMatMul operands {list(a_shape)} and {list(b_shape)} are not of one rank >= 2")
        k, n = (b_shape[-1], b_shape[-2]) if self.transpose_b else (b_shape[-2], b_shape[-1])
        if a_shape[-1] != k:
            raise ValueError(f"BatchMatMul operands {list(a_shape)} and {list(b_shape)} disagree on the inner "
                             f"dimension (transpose_b={int(self.transpose_b)})")
        lead = np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2]))
        return tuple(int(d) for d in lead) + (int(a_shape[-2]), int(n))

    def apply(self, a: np.ndarray, b: np.ndarray) -> Tuple[np.ndarray, bool]:
        """fp16-valued float32 ``a`` [..., M, K], ``b`` [..., K, N] (or [..., N, K] with
        transpose_b) -> (fp16-valued float32 [..., M, N], every value finite)."""
        shape = self.output_shape(a.shape, b.shape)
        bb = np.swapaxes(b, -1, -2) if self.transpose_b else b
        with np.errstate(over="ignore", invalid="ignore"):
            y = np.matmul(a, bb, dtype=F32)
            if self.alpha != 1:
                y *= self.alpha
        y = np.ascontiguousarray(y, dtype=F32).reshape(shape)
        return y, round_fp16_(y)
