"""int8 element-wise add and multiply as onnxruntime's QLinearAdd / QLinearMul compute them on x86
(MLAS; docs/simulator.md "int8 layers"). Codes in, codes out (int32 arrays), no clamps but the type's.

QLinearAdd (``MlasQLinearAddKernelAvx2``, the kernel MLAS dispatches on AVX2 and AVX-512 CPUs;
built by GCC, which contracts ``a * b + c`` into a fused multiply-add):

* ``r_a = fp32(s_a / s_c)``, ``r_b = fp32(s_b / s_c)``;
* ``F = fp32(z_c - fma(r_a, z_a, fp32(r_b * z_b)))`` (the zero points folded into one constant);
* ``v = fma(q_a, r_a, fma(q_b, r_b, F))`` on the raw codes (b one code of a broadcast span:
  ``F' = fma(q_b, r_b, F)`` once, then ``fma(q_a, r_a, F')``: the same operations);
* ``q_c = sat(rne(v))`` (``cvtps2dq``: an out-of-range v gives INT_MIN, i.e. the type's minimum).

QLinearMul (``qlmul.cpp``, the SSE2 kernel: no FMA): ``r = fp32(fp32(s_a * s_b) / s_c)``,
``q_c = sat(rne(fp32(fp32(fp32((q_a - z_a)(q_b - z_b)) * r) + z_c)))``, the product exact in int32.

onnxruntime's broadcast looper (``qlinear_binary_op.cc``) hands MLAS the span operand first: when
its input 0 is the single code of a span, the kernel's a is input 1 (with its scale and zero point)
and its b input 0 (``qlinear_add_broadcast``)."""
from __future__ import annotations

from typing import Tuple

import numpy as np

F32, F64 = np.float32, np.float64
QRANGE = {"int8": (-128, 127), "uint8": (0, 255)}
Quant = Tuple[float, int]          # (scale, zero point)


def fma32(a, b, c) -> np.ndarray:
    """fp32 ``fma(a, b, c)``: one rounding. The product of two fp32 is exact in float64; the sum is
    taken rounded to odd (float64 two-sum, then the last bit set when inexact), which rounds to fp32
    as the exact sum would."""
    a, b, c = (np.asarray(v, F32).astype(F64) for v in (a, b, c))
    p = a * b
    s = p + c
    bp = s - c
    err = (p - bp) + (c - (s - bp))
    s = np.asarray(s)
    odd = (s.view(np.int64) & 1) == 1
    s = np.where((err != 0) & ~odd, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(F32)


def _saturate(v: np.ndarray, dtype: str) -> np.ndarray:
    lo, hi = QRANGE[dtype]
    with np.errstate(invalid="ignore"):
        r = np.where(np.abs(v) < F32(2 ** 31), np.rint(v), lo)          # cvtps2dq: NaN / overflow -> INT_MIN
    return np.clip(r, lo, hi).astype(np.int32)


def add_constants(a: Quant, b: Quant, c: Quant) -> Tuple[np.float32, np.float32, np.float32]:
    """(r_a, r_b, F) of QLinearAdd (the module docstring)."""
    ra = F32(F32(a[0]) / F32(c[0]))
    rb = F32(F32(b[0]) / F32(c[0]))
    inner = fma32(ra, F32(a[1]), F32(rb * F32(b[1])))
    return ra, rb, F32(F32(c[1]) - inner)


def qlinear_add(qa: np.ndarray, qb: np.ndarray, a: Quant, b: Quant, c: Quant, dtype: str) -> np.ndarray:
    """MLAS QLinearAdd of codes ``qa`` and ``qb`` (one shape, or ``qb`` broadcast: its scalar path
    ``F' = fma(q_b, r_b, F)`` is the same operation as the per-element one)."""
    ra, rb, fixed = add_constants(a, b, c)
    qa, qb = np.broadcast_arrays(np.asarray(qa).astype(F32), np.asarray(qb).astype(F32))
    return _saturate(fma32(qa, ra, fma32(qb, rb, fixed)), dtype)


def qlinear_mul(qa: np.ndarray, qb: np.ndarray, a: Quant, b: Quant, c: Quant, dtype: str) -> np.ndarray:
    """MLAS QLinearMul (SSE2 kernel) of codes of one shape or broadcastable (the kernel is element-wise)."""
    return qlinear_mul_centered((np.asarray(qa, np.int64) - a[1]).astype(F32), (np.asarray(qb, np.int64) - b[1]).astype(F32),
                                a[0], b[0], c, dtype)


def qlinear_mul_centered(ca: np.ndarray, cb: np.ndarray, sa: float, sb: float, c: Quant, dtype: str) -> np.ndarray:
    """``qlinear_mul`` of the codes less their zero points, as float32 (``int8.centered_codes``): their
    product, rounded once to fp32 (exact below 2^24), times ``r``, plus ``z_c``, saturated."""
    r = F32(F32(F32(sa) * F32(sb)) / F32(c[0]))
    with np.errstate(over="ignore", invalid="ignore"):
        prod = np.multiply(ca, cb, dtype=F32)
        prod *= r
        prod += F32(c[1])
    return _saturate(prod, dtype)


def qlinear_add_broadcast(qa: np.ndarray, qb: np.ndarray, a: Quant, b: Quant, c: Quant, dtype: str) -> np.ndarray:
    """QLinearAdd with numpy broadcasting as onnxruntime's looper splits it: input 0 a single code
    (the whole tensor, or per span: the innermost axes that are not 1 in both are 1 in input 0
    only) makes MLAS's a input 1 and its b input 0; otherwise a is input 0."""
    qa, qb = np.asarray(qa), np.asarray(qb)
    shape = np.broadcast_shapes(qa.shape, qb.shape)
    sa = (1,) * (len(shape) - qa.ndim) + qa.shape
    sb = (1,) * (len(shape) - qb.ndim) + qb.shape
    inner = next(((da, db) for da, db in zip(reversed(sa), reversed(sb)) if not da == db == 1), (1, 1))
    a_scalar = qa.size == 1 or (inner[0] == 1 and qb.size != 1)
    if a_scalar:
        return qlinear_add(np.broadcast_to(qb, shape), np.broadcast_to(qa, shape), b, a, c, dtype)
    return qlinear_add(np.broadcast_to(qa, shape), np.broadcast_to(qb, shape), a, b, c, dtype)
