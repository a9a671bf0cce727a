"""The numba kernels behind ``jit.py`` (imported only through it; see its docstring).

Every kernel is ``nogil`` and works in place or into a caller-provided output, one pass over
memory, and returns whether every value it wrote is finite.
"""
import os

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_CACHE = os.environ.get("ONNX_MRVL_SIM_JIT_CACHE", "1") != "0"   # on-disk cache of compiled code


@intrinsic
def _f32(typingctx, u):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.uint32), codegen


@intrinsic
def _u32(typingctx, f):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.uint32(types.float32), codegen

_FMAX = np.float32(65504.0)
_ABS = np.uint32(0x7FFFFFFF)
_EXP = np.uint32(0x7F800000)           # |bits| >= this: inf or NaN (a uint32 max reduction
                                       # vectorises; a boolean count widens to int64 lanes)
_INF = np.float32(np.inf)
_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)


@njit(inline="always")
def rne16(v):
    """float32 -> nearest-even fp16 value (as float32); beyond 65504 -> +-inf; NaN stays."""
    u = _u32(v)
    a = u & np.uint32(0x7FFFFFFF)
    e = a & np.uint32(0x7F800000)
    e = max(e, np.uint32(0x38800000))
    e = min(e, np.uint32(0x47800000))
    ef = _f32(e + np.uint32(13 << 23))
    r = (_f32(a) + ef) - ef
    if r > _FMAX:
        r = _INF
    return _f32((u & np.uint32(0x80000000)) | _u32(r))


@njit(inline="always")
def act(v, code, p0, p1, s):
    """The piecewise-linear activations of ``activations.py``, formula for formula; a negative
    code leaves ``v`` as it is (the caller applies a transcendental activation afterwards)."""
    if code <= 0:
        return v
    if code == 1:
        return _ZERO if v < _ZERO else v
    if code == 2:                      # min(max(v, lo), hi): numpy's clip, ONNX Clip (hi when lo > hi)
        t = p0 if v < p0 else v
        return p1 if t > p1 else t
    if code == 3 or code == 4:
        neg = v if v < _ZERO else _ZERO
        pos = _ZERO if v < _ZERO else v
        return pos + neg * (p0 if code == 3 else s)
    if code == 7:
        g = v * p0 + p1
        return _ZERO if g < _ZERO else (_ONE if g > _ONE else g)
    g = v * np.float32(1.0 / 6.0) + np.float32(0.5)
    g = _ZERO if g < _ZERO else (_ONE if g > _ONE else g)
    return v * g


@njit(inline="always")
def finish(v, code, p0, p1, s):
    """act then fp16 rounding; code < 0: neither (the caller finishes in numpy)."""
    if code < 0:
        return v
    return rne16(act(v, code, p0, p1, s))


# A code of -1 makes every kernel store the pre-activation float32 value (see ACT_CODES).
# Each kernel body is inlined into its entry point once per common activation code (none,
# relu, clamp) with the code as a literal, so LLVM folds the activation's branches away and
# vectorises the channel loop; any other code takes the generic (branching) copy.


@njit(inline="always")
def _finish_row(src, dst, bias, scale, shift, code, p0, p1, slope, bad):
    """dst[c] = finish(((src[c] + bias[c]) * scale[c]) + shift[c]); returns the running max of |bits|."""
    for c in range(dst.shape[0]):
        o = finish(((src[c] + bias[c]) * scale[c]) + shift[c], code, p0, p1, slope[c])
        dst[c] = o
        bad = max(bad, _u32(o) & _ABS)
    return bad


@njit(inline="always")
def _epilogue_body(y, bias, scale, shift, code, p0, p1, slope):
    bad = np.uint32(0)
    for r in range(y.shape[0]):
        bad = _finish_row(y[r], y[r], bias, scale, shift, code, p0, p1, slope, bad)
    return bad < _EXP


@njit(nogil=True, cache=_CACHE)
def epilogue(y, bias, scale, shift, code, p0, p1, slope):
    """In place on y [rows, C]: act(((y + bias) * scale) + shift) rounded to fp16; all finite?"""
    if code == 0:
        return _epilogue_body(y, bias, scale, shift, 0, p0, p1, slope)
    if code == 1:
        return _epilogue_body(y, bias, scale, shift, 1, p0, p1, slope)
    if code == 2:
        return _epilogue_body(y, bias, scale, shift, 2, p0, p1, slope)
    return _epilogue_body(y, bias, scale, shift, code, p0, p1, slope)


@njit(nogil=True, cache=_CACHE)
def round_flat(x):
    """In place on a 1-D float32 array: fp16 rounding; True when every result is finite."""
    bad = np.uint32(0)
    for i in range(x.shape[0]):
        o = rne16(x[i])
        x[i] = o
        bad = max(bad, _u32(o) & _ABS)
    return bad < _EXP


@njit(inline="always")
def _binary_body(a, b, out, mul, code, p0, p1, slope):
    n_, p_, c_ = out.shape
    bn, bp, bc = b.shape[0] > 1, b.shape[1] > 1, b.shape[2] > 1
    bad = np.uint32(0)
    for n in range(n_):
        for p in range(p_):
            ar = a[n, p]
            br = b[n if bn else 0, p if bp else 0]
            orow = out[n, p]
            if bc:
                for c in range(c_):
                    v = ar[c] * br[c] if mul else ar[c] + br[c]
                    o = finish(v, code, p0, p1, slope[c])
                    orow[c] = o
                    bad = max(bad, _u32(o) & _ABS)
            else:
                bv = br[0]
                for c in range(c_):
                    v = ar[c] * bv if mul else ar[c] + bv
                    o = finish(v, code, p0, p1, slope[c])
                    orow[c] = o
                    bad = max(bad, _u32(o) & _ABS)
    return bad < _EXP


@njit(nogil=True, cache=_CACHE)
def binary(a, b, out, mul, code, p0, p1, slope):
    """out[n, p, c] = act(a[n,p,c] (+|*) b[n?, p?, c?]), rounded; b's size-1 axes broadcast."""
    if mul:
        if code == 0:
            return _binary_body(a, b, out, True, 0, p0, p1, slope)
        if code == 1:
            return _binary_body(a, b, out, True, 1, p0, p1, slope)
        return _binary_body(a, b, out, True, code, p0, p1, slope)
    if code == 0:
        return _binary_body(a, b, out, False, 0, p0, p1, slope)
    if code == 1:
        return _binary_body(a, b, out, False, 1, p0, p1, slope)
    return _binary_body(a, b, out, False, code, p0, p1, slope)


@njit(inline="always")
def _dw_pixel(x, w, o_, n, y0, x0, dh, dw):
    """One output pixel's taps, skipping those in the zero padding (row-major tap order)."""
    h_, w_ = x.shape[1], x.shape[2]
    first = True
    for i in range(w.shape[0]):
        yy = y0 + i * dh
        if yy < 0 or yy >= h_:
            continue
        for j in range(w.shape[1]):
            xx = x0 + j * dw
            if xx < 0 or xx >= w_:
                continue
            xr = x[n, yy, xx]
            wr = w[i, j]
            if first:
                for c in range(o_.shape[0]):
                    o_[c] = xr[c] * wr[c]
                first = False
            else:
                for c in range(o_.shape[0]):
                    o_[c] += xr[c] * wr[c]
    if first:
        o_[:] = _ZERO


@njit(inline="always")
def _dw_row_3x3(x, w, orow, n, y0, lo, hi, sw, pl, dh, dw):
    """Interior pixels [lo, hi) of one output row of a 3x3 depthwise conv, taps unrolled."""
    w0, w1, w2, w3, w4, w5, w6, w7, w8 = w[0, 0], w[0, 1], w[0, 2], w[1, 0], w[1, 1], w[1, 2], w[2, 0], w[2, 1], w[2, 2]
    r0, r1, r2 = x[n, y0], x[n, y0 + dh], x[n, y0 + 2 * dh]
    for ox in range(lo, hi):
        x0 = ox * sw - pl
        a0, a1, a2 = r0[x0], r0[x0 + dw], r0[x0 + 2 * dw]
        b0, b1, b2 = r1[x0], r1[x0 + dw], r1[x0 + 2 * dw]
        c0, c1, c2 = r2[x0], r2[x0 + dw], r2[x0 + 2 * dw]
        o_ = orow[ox]
        for c in range(o_.shape[0]):
            s = a0[c] * w0[c]
            s += a1[c] * w1[c]
            s += a2[c] * w2[c]
            s += b0[c] * w3[c]
            s += b1[c] * w4[c]
            s += b2[c] * w5[c]
            s += c0[c] * w6[c]
            s += c1[c] * w7[c]
            s += c2[c] * w8[c]
            o_[c] = s


@njit(nogil=True, cache=_CACHE)
def depthwise(x, w, out, oy0, oy1, sh, sw, pt, pl, dh, dw):
    """Raw depthwise sums for rows [oy0, oy1) of out [N,OH,OW,C] from unpadded NHWC x, w [KH,KW,C].

    Taps are summed in row-major order starting from the first in-range tap; taps in the padding
    contribute nothing (zero padding). Interior pixels of 3x3 convs take an unrolled loop of their
    own. The epilogue is a separate pass (``epilogue``): fused into these loops it stopped LLVM
    vectorising them (2-4x slower, measured), as did border checks inside the interior loop.
    """
    n_, oh_, ow_, c_ = out.shape
    h_, w_ = x.shape[1], x.shape[2]
    kh, kw = w.shape[0], w.shape[1]
    # interior columns: ox * sw - pl >= 0 and ox * sw - pl + (kw - 1) * dw < w_
    lo = min(ow_, max(0, -(-pl // sw)))
    hi = max(lo, min(ow_, (w_ - 1 - (kw - 1) * dw + pl) // sw + 1))
    for n in range(n_):
        for oy in range(oy0, oy1):
            y0 = oy * sh - pt
            orow = out[n, oy]
            if kh == 3 and kw == 3 and y0 >= 0 and y0 + 2 * dh < h_ and lo < hi:
                _dw_row_3x3(x, w, orow, n, y0, lo, hi, sw, pl, dh, dw)
                for ox in range(lo):
                    _dw_pixel(x, w, orow[ox], n, y0, ox * sw - pl, dh, dw)
                for ox in range(hi, ow_):
                    _dw_pixel(x, w, orow[ox], n, y0, ox * sw - pl, dh, dw)
            else:
                for ox in range(ow_):
                    _dw_pixel(x, w, orow[ox], n, y0, ox * sw - pl, dh, dw)
    return True
