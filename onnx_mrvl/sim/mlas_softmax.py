"""onnxruntime's fp32 Softmax over the last axis as MLAS computes it on x86 with AVX-512
(``MlasComputeSoftmax``: ``MlasComputeSumExpF32KernelAvx512F``, then ``* (1 / sum)``), bit for bit:
the int8 Softmax that onnxruntime leaves unfused (``DQ -> Softmax -> Q``, requant "float") quantizes
this (docs/simulator.md "Transformers").

Per row: ``x = max(-103.972084, fp32(v - max))``; ``m = fma(x, 1/ln2, 1.5 * 2^23) - 1.5 * 2^23``
(round to integer); ``r = fma(m, ln2_lo, fma(m, ln2_hi, x))``; ``p`` the degree-6 polynomial in
Horner form by fp32 FMAs (poly_0..poly_4, then twice 1.0); ``e = p * 2^m`` (VSCALEFPS). The sum: 16
lanes (lane k takes i = k mod 16, in order), folded ``b_k = l_k + l_k+8``, ``(b0 + b1) + (b2 + b3)``
plus ``(b4 + b5) + (b6 + b7)``; the output ``e * fp32(1 / sum)``. An FMA is its float64 form
rounded to fp32 (a double rounding could differ in the last bit; not seen on 10^6 elements).

Without AVX-512F (platform.cpp dispatches ``MlasComputeSumExpF32KernelFma3``, TransKernelFma3.S): the
same polynomial from ``x = max(-88.3762626647949, fp32(v - max))``, ``2^m`` built on the integer bits
(``(bits(fma(x, 1/ln2, bias)) << 23) + bits(1.0)``), the sum in 8 lanes (lane k takes i = k mod 8),
reduced ``((l4 + l5) + (l6 + l7)) + ((l0 + l1) + (l2 + l3))`` (two ``vhaddps``, the halves added)."""
from __future__ import annotations

import functools

import numpy as np

from .native_loader import cpu_flags

F32 = np.float32
_LOWER = F32(-103.9720840454)
_LOWER_FMA3 = F32(-88.3762626647949)          # MlasExpConstants.LowerRangeSumExp
_BIAS = F32(12582912.0)                      # MLAS_ROUNDING_BIAS_MAGIC
_LOG2R, _LN2_HI, _LN2_LO = F32(1.44269504088896341), F32(-6.93145752e-1), F32(-1.42860677e-6)
_POLY = [F32(float.fromhex(h)) for h in ("0x1.694000p-10", "0x1.125edcp-7", "0x1.555b5ap-5", "0x1.555450p-3",
                                          "0x1.fffff6p-2", "0x1.000000p+0", "0x1.000000p+0")]


def _fma(a: np.ndarray, b, c) -> np.ndarray:
    return (a.astype(np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(F32)


@functools.lru_cache(maxsize=1)
def avx512() -> bool:
    """Whether this machine's MLAS runs its AVX-512F softmax kernel (else the FMA3 one)."""
    return "avx512f" in cpu_flags().split()


def exp_terms(v: np.ndarray, wide: bool = None) -> np.ndarray:
    """``exp(v - max(v))`` over the last axis as the kernel computes each term (``wide``: AVX-512F's)."""
    wide = avx512() if wide is None else wide
    v = np.asarray(v, F32)
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.maximum(_LOWER if wide else _LOWER_FMA3, (v + (-v.max(axis=-1, keepdims=True)).astype(F32)).astype(F32))
        biased = _fma(x, _LOG2R, _BIAS)
        m = (biased - _BIAS).astype(F32)
        x = _fma(m, _LN2_LO, _fma(m, _LN2_HI, x))
        p = np.full_like(x, _POLY[0])
        for c in _POLY[1:]:
            p = _fma(p, x, c)
        if wide:
            return np.ldexp(p, m.astype(np.int32)).astype(F32)
        scale = ((biased.view(np.uint32) << np.uint32(23)) + np.uint32(0x3F800000)).view(F32)   # vpslld, vpaddd
        return (p * scale).astype(F32)


def lane_sum(e: np.ndarray, wide: bool = None) -> np.ndarray:
    """The kernel's fp32 sum over the last axis (16 lanes and its fold; FMA3: 8 lanes, two hadds)."""
    lanes = 16 if (avx512() if wide is None else wide) else 8
    d = e.shape[-1]
    pad = (-d) % lanes
    if pad:
        e = np.concatenate([e, np.zeros(e.shape[:-1] + (pad,), F32)], axis=-1)   # masked lanes add nothing
    acc = np.zeros(e.shape[:-1] + (lanes,), F32)
    for j in range(0, e.shape[-1], lanes):
        acc += e[..., j:j + lanes]
    b = acc[..., 8:] + acc[..., :8] if lanes == 16 else acc
    return ((b[..., 0] + b[..., 1]) + (b[..., 2] + b[..., 3])) + ((b[..., 4] + b[..., 5]) + (b[..., 6] + b[..., 7]))


def softmax_last_axis(v: np.ndarray) -> np.ndarray:
    """onnxruntime's fp32 Softmax over the last axis (x86: AVX-512F or FMA3 kernel), bit for bit."""
    e = exp_terms(v)
    return (e * (F32(1) / lane_sum(e))[..., None]).astype(F32)
