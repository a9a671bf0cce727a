"""onnxruntime's fp32 Softmax over the last axis as MLAS computes it on x86 with AVX-512
(``MlasComputeSoftmax``: ``MlasComputeSumExpF32KernelAvx512F``, then ``* (1 / sum)``), bit for bit:
the int8 Softmax that onnxruntime leaves unfused (``DQ -> Softmax -> Q``, requant "float") quantizes
this (docs/simulator.md "Transformers").

Per row: ``x = max(-103.972084, fp32(v - max))``; ``m = fma(x, 1/ln2, 1.5 * 2^23) - 1.5 * 2^23``
(round to integer); ``r = fma(m, ln2_lo, fma(m, ln2_hi, x))``; ``p`` the degree-6 polynomial in
Horner form by fp32 FMAs (poly_0..poly_4, then twice 1.0); ``e = p * 2^m`` (VSCALEFPS). The sum: 16
lanes (lane k takes i = k mod 16, in order), folded ``b_k = l_k + l_k+8``, ``(b0 + b1) + (b2 + b3)``
plus ``(b4 + b5) + (b6 + b7)``; the output ``e * fp32(1 / sum)``. An FMA is its float64 form
rounded to fp32 (a double rounding could differ in the last bit; not seen on 10^6 elements)."""
from __future__ import annotations

import numpy as np

F32 = np.float32
_LOWER = F32(-103.9720840454)
_BIAS = F32(12582912.0)                      # MLAS_ROUNDING_BIAS_MAGIC
_LOG2R, _LN2_HI, _LN2_LO = F32(1.44269504088896341), F32(-6.93145752e-1), F32(-1.42860677e-6)
_POLY = [F32(float.fromhex(h)) for h in ("0x1.694000p-10", "0x1.125edcp-7", "0x1.555b5ap-5", "0x1.555450p-3",
                                          "0x1.fffff6p-2", "0x1.000000p+0", "0x1.000000p+0")]


def _fma(a: np.ndarray, b, c) -> np.ndarray:
    return (a.astype(np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(F32)


def exp_terms(v: np.ndarray) -> np.ndarray:
    """``exp(v - max(v))`` over the last axis as the kernel computes each term."""
    v = np.asarray(v, F32)
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.maximum(_LOWER, (v + (-v.max(axis=-1, keepdims=True)).astype(F32)).astype(F32))
        m = (_fma(x, _LOG2R, _BIAS) - _BIAS).astype(F32)
        x = _fma(m, _LN2_LO, _fma(m, _LN2_HI, x))
        p = np.full_like(x, _POLY[0])
        for c in _POLY[1:]:
            p = _fma(p, x, c)
        return np.ldexp(p, m.astype(np.int32)).astype(F32)


def lane_sum(e: np.ndarray) -> np.ndarray:
    """The kernel's fp32 sum over the last axis (16 lanes, then its fold)."""
    d = e.shape[-1]
    pad = (-d) % 16
    if pad:
        e = np.concatenate([e, np.zeros(e.shape[:-1] + (pad,), F32)], axis=-1)   # masked lanes add nothing
    acc = np.zeros(e.shape[:-1] + (16,), F32)
    for j in range(0, e.shape[-1], 16):
        acc += e[..., j:j + 16]
    b = acc[..., 8:] + acc[..., :8]
    return ((b[..., 0] + b[..., 1]) + (b[..., 2] + b[..., 3])) + ((b[..., 4] + b[..., 5]) + (b[..., 6] + b[..., 7]))


def softmax_last_axis(v: np.ndarray) -> np.ndarray:
    """onnxruntime's fp32 Softmax over the last axis (x86, AVX-512), bit for bit."""
    e = exp_terms(v)
    return (e * (F32(1) / lane_sum(e))[..., None]).astype(F32)
