"""Rounding float32 values to fp16 (round to nearest even), kept in float32 containers.

``np.ndarray.astype(np.float16)`` is exact but slow (~6 ns per element here, no SIMD path), and
every layer output goes through it. ``round_fp16_`` does the same rounding with float32
arithmetic on the array itself: adding and subtracting ``c = 2**(e+13)``, where ``e`` is the
exponent of ``x`` clamped to [-14, 16], leaves exactly the 11 significant bits fp16 keeps (or,
under 2**-14, the multiples of 2**-24 fp16 subnormals can hold); the float32 adder rounds the
dropped bits to nearest even. Magnitudes that round beyond 65504 become inf, NaN stays NaN.
The result is bit-identical to ``x.astype(np.float16).astype(np.float32)`` for every float32 input
(checked exhaustively over all 2**32 bit patterns while writing it; the tests re-check a sample).
The same arithmetic runs as one compiled pass in the native kernel library when it is loaded
(``copy_round`` of ``_native_conv.c``), else in numba (``jit.round_flat``) when numba is present.
"""
from __future__ import annotations

import threading

import numpy as np

from . import jit, native

FP16_MAX = 65504.0
_ABS = np.uint32(0x7FFFFFFF)
_EXP = np.uint32(0x7F800000)
_SIGN = np.uint32(0x80000000)
_MIN_NORMAL_EXP = np.uint32(0x38800000)   # 2**-14, the smallest normal fp16
_MAX_EXP = np.uint32(0x47800000)         # 2**16: anything this large becomes inf anyway
_SHIFT = np.uint32(13 << 23)               # 2**13: 23 - 10 mantissa bits
_CHUNK = 1 << 17                           # elements per pass (512 KB): cache-resident, few calls
_scratch = threading.local()               # per-thread work buffers, allocated once (no page faults)


def _buffers():
    bufs = getattr(_scratch, "bufs", None)
    if bufs is None:
        bufs = _scratch.bufs = (np.empty(_CHUNK, np.uint32), np.empty(_CHUNK, np.uint32))
    return bufs


def _round_block(u: np.ndarray, a: np.ndarray, e: np.ndarray) -> None:
    np.bitwise_and(u, _ABS, out=a)
    np.bitwise_and(u, _EXP, out=e)
    np.maximum(e, _MIN_NORMAL_EXP, out=e)
    np.minimum(e, _MAX_EXP, out=e)         # keep 2**(e+13) finite
    e += _SHIFT
    af = a.view(np.float32)
    ef = e.view(np.float32)
    af += ef                               # the float32 adder rounds to the fp16 grid (RNE)
    af -= ef
    u &= _SIGN
    u |= a


def round_fp16_(x: np.ndarray) -> bool:
    """Round the C-contiguous float32 array ``x`` to fp16 values in place.

    Returns True when every result is finite (no overflow to inf, no NaN), so callers get the
    finiteness check for free.
    """
    if x.dtype != np.float32 or not x.flags.c_contiguous:
        raise TypeError("round_fp16_ needs a C-contiguous float32 array")
    flat = x.reshape(-1)
    n = flat.size
    if n == 0:
        return True
    if native.on():                           # in place: each block is loaded before it is stored
        a = native.address(flat)
        return bool(native.lib().copy_round(a, a, n) & 2)
    round_flat = jit.kernel("round_flat")     # compiled on first use; None: numpy
    if round_flat is not None:
        return bool(round_flat(flat))
    u = flat.view(np.uint32)
    a, e = _buffers()
    with np.errstate(all="ignore"):
        for s in range(0, n, _CHUNK):
            uu = u[s:s + _CHUNK]
            k = uu.size
            _round_block(uu, a[:k], e[:k])
        hi = flat.max()
        lo = flat.min()
        if hi <= FP16_MAX and lo >= -FP16_MAX:
            return True
        big = np.abs(flat) > FP16_MAX      # NaN compares False and stays NaN
        flat[big] = np.copysign(np.float32(np.inf), flat[big])
    return False


def to_fp16_values(x) -> np.ndarray:
    """A new C-contiguous float32 array holding ``x`` rounded to fp16."""
    arr = np.asarray(x)
    if arr.dtype == np.float16:
        return arr.astype(np.float32)
    out = np.array(arr, dtype=np.float32, order="C", copy=True)
    round_fp16_(out)
    return out


def fp16_source(x) -> np.ndarray:
    """``x`` rounded to fp16, as a float16 array (half the bytes of ``to_fp16_values``, the same
    values): a read-only float16 array (a weight of the binary) is returned as it is, anything else
    is copied, so a caller's later writes do not reach it."""
    arr = np.asarray(x)
    if arr.dtype == np.float16:
        return arr if not arr.flags.writeable else arr.copy()
    return to_fp16_values(arr).astype(np.float16)


def is_fp16_exact(x: np.ndarray) -> bool:
    """True when every value of ``x`` is representable in fp16 (NaN counts as representable)."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(all="ignore"):
        r = x.astype(np.float16).astype(np.float32)
    return bool(np.all((r == x) | (np.isnan(r) & np.isnan(x))))


def fp16_ulp(x) -> np.ndarray:
    """The spacing of fp16 values at |x| (2**-24 in the subnormal range), as float64."""
    a = np.abs(np.asarray(x, dtype=np.float64))
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    e = np.maximum(e, -14.0)
    return np.where(np.isfinite(a), 2.0 ** (e - 10), np.inf)
