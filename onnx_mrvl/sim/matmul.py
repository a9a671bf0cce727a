"""BatchMatMul: the product of two activations (attention's Q*K^T and P*V), batched over the
leading axes.

Numerics as the FC layer: fp16 operands (the stored values), products summed in float32, the
float32 sum scaled by ``alpha`` (attention's 1/sqrt(d)), then rounded to fp16 once. Leading axes
broadcast as numpy's matmul does (equal or 1). The operands come in their stored orders
(``a_perm`` / ``b_perm``: stored axis k holds logical axis perm[k]; without ``b_perm``,
``transpose_b`` means B is stored [..., N, K]); the output is written in the order ``out_perm``.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from .fp16 import round_fp16_

F32 = np.float32


def _inv(p: Sequence[int]) -> Tuple[int, ...]:
    return tuple(list(p).index(i) for i in range(len(p)))


class BatchMatMul:
    def __init__(self, transpose_b: bool = False, alpha: float = 1.0, a_perm: Optional[Sequence[int]] = None,
                 b_perm: Optional[Sequence[int]] = None, out_perm: Optional[Sequence[int]] = None):
        self.transpose_b = bool(transpose_b)
        self.alpha = F32(alpha)
        self.a_perm = tuple(int(x) for x in a_perm) if a_perm else None
        self.b_perm = tuple(int(x) for x in b_perm) if b_perm else None
        self.out_perm = tuple(int(x) for x in out_perm) if out_perm else None

    def _b_perm(self, rank: int) -> Optional[Tuple[int, ...]]:
        if self.b_perm is not None:
            return self.b_perm
        return tuple(range(rank - 2)) + (rank - 1, rank - 2) if self.transpose_b else None

    def _logical(self, a_shape, b_shape):
        if len(a_shape) != len(b_shape) or len(a_shape) < 2:
            raise ValueError(f"BatchMatMul operands {list(a_shape)} and {list(b_shape)} are not of one rank >= 2")
        r = len(a_shape)
        for p in (self.a_perm, self._b_perm(r), self.out_perm):
            if p is not None and sorted(p) != list(range(r)):
                raise ValueError(f"BatchMatMul permutation {list(p)} does not fit operands of rank {r}")
        la = [a_shape[i] for i in _inv(self.a_perm)] if self.a_perm else list(a_shape)
        pb = self._b_perm(r)
        lb = [b_shape[i] for i in _inv(pb)] if pb else list(b_shape)
        return la, lb

    def output_shape(self, a_shape, b_shape) -> Tuple[int, ...]:
        """The stored output shape for operands of these stored shapes; ValueError when they do not fit."""
        la, lb = self._logical(a_shape, b_shape)
        if la[-1] != lb[-2]:
            raise ValueError(f"BatchMatMul operands {list(a_shape)} and {list(b_shape)} disagree on the inner "
                             f"dimension")
        lead = np.broadcast_shapes(tuple(la[:-2]), tuple(lb[:-2]))
        out = tuple(int(d) for d in lead) + (int(la[-2]), int(lb[-1]))
        return tuple(out[i] for i in self.out_perm) if self.out_perm else out

    def apply(self, a: np.ndarray, b: np.ndarray) -> Tuple[np.ndarray, bool]:
        """fp16-valued float32 stored operands -> (fp16-valued float32 output as stored, every value finite)."""
        shape = self.output_shape(a.shape, b.shape)
        al = np.transpose(a, _inv(self.a_perm)) if self.a_perm else a
        pb = self._b_perm(b.ndim)
        bl = np.transpose(b, _inv(pb)) if pb else b
        with np.errstate(over="ignore", invalid="ignore"):
            y = np.matmul(al, bl, dtype=F32)
            if self.alpha != 1:
                y *= self.alpha
        if self.out_perm:
            y = np.transpose(y, self.out_perm)
        y = np.ascontiguousarray(y, dtype=F32).reshape(shape)
        return y, round_fp16_(y)
