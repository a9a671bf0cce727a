"""Native int8 pools: Maxpool2D / GlobalAvgpool2D (``i8_maxpool`` / ``i8_global_avgpool``) and
Avgpool2D (``_native_int8.c`` ``i8_avgpool``), bit-exact with ``Int8Pool`` of
int8.py (both requantizations: onnxruntime's QLinearAveragePool, ``requant: "qlinear"``, and its
float AveragePool between DQ and Q, ``"float"``): the same fp32 dequantized values, window sums
in the same order, the same divisor and rounding. Codes in and out like the other int8 kernels."""
from __future__ import annotations

import ctypes
from typing import Callable, Optional

import numpy as np

from . import int8_native, native
from .int8 import F32, QRANGE, Int8Pool
from .int8_native import (Desc, code_offset, keep_call, mark_staged, qparams, reciprocal, source_buffer,
                          target_buffer, unless_nhwc)
from .pooling import pool_geometry, window_counts


class ApDesc(ctypes.Structure):
    """``apdesc`` of _native_int8.c."""
    _fields_ = ([(k, ctypes.c_long) for k in ("n", "h", "w", "c", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw",
                                             "pt", "pl", "in_codes", "out_codes", "qlinear")]
                + [(k, ctypes.c_void_p) for k in ("in_prm", "out_prm", "div")])


def prepare_avgpool(pool: Int8Pool) -> Optional[Callable]:
    """The native ``apply`` of an int8 Avgpool2D, or None (numpy's ``pool.apply`` then)."""
    lib = int8_native.lib()
    if lib is None or pool.kind != "Avgpool2D":
        return None
    in_prm, out_prm = np.array(qparams(pool.in_q), F32), np.array(qparams(pool.out_q), F32)
    geo = pool.geometry
    inc = bool(geo.get("count_include_pad", 0))
    fn = lib.i8_avgpool
    divs = {}

    def stage(x: np.ndarray, out=None, codes_in=(False,), codes_out=False):
        fallback = unless_nhwc(pool, "an int8 pool", x, codes_in, codes_out)
        if fallback:
            return fallback
        n, h, w, c = x.shape
        (kh, kw), (sh, sw), (dh, dw), (t, l, b, r), (oh, ow) = pool_geometry(
            x, geo["kernel_size"], geo["strides"], geo["padding"], geo.get("dilation", (1, 1)), geo["ceil_mode"])
        if (h, w) not in divs:
            divs[(h, w)] = np.ascontiguousarray(np.outer(window_counts(h, oh, kh, sh, t, b, dh, inc),
                                                         window_counts(w, ow, kw, sw, l, r, dw, inc)), F32)
        div = divs[(h, w)]
        if not div.all():                                    # a window of padding alone: numpy's 0 / 0
            if codes_in[0] or codes_out:
                raise ValueError("an int8 average pool with an empty window")
            return None, pool.apply(x)
        if codes_out and out is None:
            raise ValueError("codes out need the output buffer")
        d = ApDesc(n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, t, l, int(codes_in[0]), int(codes_out),
                   int(pool.requant == "qlinear"), in_prm.ctypes.data, out_prm.ctypes.data, div.ctypes.data)
        src = source_buffer(x, codes_in[0])
        y = native.empty((n, oh, ow, c)) if out is None else target_buffer(out, n * oh * ow * c)
        call = keep_call(fn, (ctypes.byref(d), src.ctypes.data, y.ctypes.data), (d, src, y, div, in_prm, out_prm))
        return call, y.reshape(n, oh, ow, c)
    return mark_staged(stage, pool, [pool.in_q])


def quant_fields(d: Desc, in_q, out_q) -> None:
    """The input quantization (quantize_u8) and output fields of a descriptor."""
    s_x, z_x, dt_x = in_q
    s_y, z_y, dt_y = out_q
    d.in_scale, (d.in_rcp, d.in_exact) = F32(s_x), reciprocal(s_x)
    d.in_zp, (d.in_lo, d.in_hi), d.in_off = z_x, QRANGE[dt_x], code_offset(in_q)
    d.out_scale, (d.out_rcp, d.out_exact) = F32(s_y), reciprocal(s_y)
    d.out_zp, (d.out_lo, d.out_hi), d.out_off = z_y, QRANGE[dt_y], code_offset(out_q)


def prepare_pool(pool: Int8Pool) -> Optional[Callable]:
    """The native ``apply`` of an int8 Maxpool2D / GlobalAvgpool2D, or None."""
    lib = int8_native.lib()
    if lib is None or pool.kind not in ("Maxpool2D", "GlobalAvgpool2D"):
        return None
    mean = pool.requant == "float"           # onnxruntime's fp32 ReduceMean between DQ and Q
    if mean and (pool.kind != "GlobalAvgpool2D" or pool.in_activation is not None):
        return None                          # (an fp32 activation first: numpy)
    base = Desc()
    quant_fields(base, pool.in_q, pool.out_q)
    base.requant = int(tuple(pool.in_q) != tuple(pool.out_q))
    geo = pool.geometry
    fn = lib.i8_maxpool if pool.kind == "Maxpool2D" else lib.i8_global_avgpool_float if mean else lib.i8_global_avgpool

    def stage(x: np.ndarray, out=None, codes_in=(False,), codes_out=False):
        fallback = unless_nhwc(pool, "an int8 pool", x, codes_in, codes_out)
        if fallback:
            return fallback
        n, h, w, c = x.shape
        d = Desc.from_buffer_copy(base)
        d.n, d.h, d.w, d.c = n, h, w, c
        d.in_codes, d.out_codes = int(codes_in[0]), int(codes_out)
        if pool.kind == "Maxpool2D":
            (d.kh, d.kw), (d.sh, d.sw), (d.dh, d.dw), (d.pt, d.pl, _, _), (d.oh, d.ow) = pool_geometry(
                x, geo["kernel_size"], geo["strides"], geo["padding"], geo.get("dilation", (1, 1)), geo["ceil_mode"])
            m = None
        else:
            d.oh = d.ow = 1
            if mean:                         # the fp32 Mul before the Q (1: none); the sum order (1: Eigen's rows)
                m = np.array([F32(1) if pool.out_mul is None else pool.out_mul, float(pool.mean_sum == "rows")], F32)
            else:
                m = np.array([F32(F32(pool.in_q[0]) / (F32(pool.out_q[0]) * F32(h * w)))], F32)
            d.mult = m.ctypes.data
        shape = (n, d.oh, d.ow, c)
        if codes_out and out is None:
            raise ValueError("codes out need the output buffer")
        out = native.empty(shape) if out is None else target_buffer(out, n * d.oh * d.ow * c)
        src = source_buffer(x, codes_in[0])
        return keep_call(fn, (ctypes.byref(d), src.ctypes.data, out.ctypes.data), (d, m, src, out)), out.reshape(shape)
    return mark_staged(stage, pool, [pool.in_q])
