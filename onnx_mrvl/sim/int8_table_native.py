"""Native int8 Lookup, channel Concat and nearest Resize (``_native_int8.c`` ``i8_lookup``),
bit-exact with int8_lookup.py / int8_concat.py / int8.py.

Both map an input code to an output code: a Lookup by its table, each Concat input by its
requantization ``Q_out(DQ_in(q))`` (a function of the code alone). So both are a gather from a
256-entry table per input (per channel for a per-channel Lookup) of the output value -- or of
the output byte when the static plan keeps the tensor as codes (``int8_io``). The tables are
those the numpy layers compute with (the Concat's is the numpy formula applied to the 256 codes),
so the results are the same bits. A Concat along another axis than the channels runs in numpy.
"""
from __future__ import annotations

import ctypes
from typing import Callable, Optional

import numpy as np

from .int8 import F32, QRANGE, fake_quant
from .int8_concat import Int8Concat
from .int8_lookup import Int8Lookup
from . import int8_native, native, parallel
from .int8_native import code_offset, keep_call, mark_staged, source_buffer, target_buffer, unless_nhwc


class LkDesc(ctypes.Structure):
    """``lkdesc`` of _native_int8.c."""
    _fields_ = ([(k, ctypes.c_long) for k in ("rows", "c", "ldo", "o_off", "per_channel", "in_codes", "out_codes")]
                + [(k, ctypes.c_void_p) for k in ("prm", "values", "codes")])


def _tables(values: np.ndarray, out_q):
    """(float32 values, int32 output bytes) of a table of dequantized outputs [rows, 256]."""
    v = np.ascontiguousarray(values, F32)
    codes = np.rint(v.astype(np.float64) / F32(out_q[0])) + out_q[1] + code_offset(out_q)
    return v, np.ascontiguousarray(codes.astype(np.int32))


def _requant_table(in_q, out_q) -> np.ndarray:
    """The numpy Concat's output of each input code (index u = q - lo), [1, 256]."""
    s, z, dt = in_q
    lo, hi = QRANGE[dt]
    q = np.full(256, hi, np.int32)
    q[:hi - lo + 1] = np.arange(lo, hi + 1, dtype=np.int32)
    real = ((q - z).astype(F32) * F32(s)).astype(F32)
    return fake_quant(real, *out_q).reshape(1, 256)


def _check_codes(values: np.ndarray, codes: np.ndarray, out_q) -> None:
    """The bytes must give back the values (the table holds codes of out_q)."""
    back = ((codes - code_offset(out_q) - out_q[1]).astype(F32) * F32(out_q[0])).astype(F32)
    if not np.array_equal(back, values):
        raise ValueError("an int8 table whose values are not codes of its output quantization")


def prepare_lookup(layer: Int8Lookup) -> Optional[Callable]:
    """The native ``apply`` of an int8 Lookup, or None (numpy's ``layer.apply`` then)."""
    lib = int8_native.lib()
    if lib is None:
        return None
    values, codes = _tables(layer.values, layer.out_q)
    _check_codes(values, codes, layer.out_q)
    prm = np.array(int8_native.qparams(layer.in_q), F32)
    per_channel = values.shape[0] > 1
    fn = lib.i8_lookup

    def stage(x: np.ndarray, out=None, codes_in=(False,), codes_out=False):
        if x.ndim == 0 or x.size == 0 or (per_channel and x.shape[-1] != values.shape[0]):
            if codes_in[0] or codes_out:
                raise ValueError("an int8 Lookup of codes needs a non-empty tensor of its channels")
            return None, layer.apply(x)                  # its error, or an empty result
        if codes_out and out is None:
            raise ValueError("codes out need the output buffer")
        src = source_buffer(x, codes_in[0])
        y = native.empty(x.shape) if out is None else target_buffer(out, x.size)
        d = LkDesc(x.size // x.shape[-1], x.shape[-1], x.shape[-1], 0, int(per_channel), int(codes_in[0]),
                   int(codes_out), prm.ctypes.data, values.ctypes.data, codes.ctypes.data)
        call = keep_call(fn, (ctypes.byref(d), src.ctypes.data, y.ctypes.data), (d, src, y, prm, values, codes))
        return call, y.reshape(x.shape)
    return mark_staged(stage, layer, [layer.in_q])


def prepare_concat(layer: Int8Concat) -> Optional[Callable]:
    """The native ``apply`` of an int8 Concat along the channels (axis 3 or -1), or None."""
    lib = int8_native.lib()
    if lib is None or layer.axis not in (3, -1):
        return None
    tables = []
    for q in layer.ins:
        values, codes = _tables(_requant_table(q, layer.out_q), layer.out_q)
        _check_codes(values, codes, layer.out_q)
        tables.append((np.array(int8_native.qparams(q), F32), values, codes))
    fn = _address_of(lib.i8_lookup)

    def stage(*xs, out=None, codes_in=None, codes_out=False):
        codes_in = codes_in or (False,) * len(xs)
        shapes = {x.shape[:-1] for x in xs}
        if len(xs) != len(tables) or len(shapes) != 1 or xs[0].ndim < 2 or any(x.size == 0 for x in xs):
            if any(codes_in) or codes_out:
                raise ValueError("an int8 Concat of codes needs non-empty inputs of one shape but the channels")
            return None, layer.apply(*xs)               # its error, or numpy's result
        if codes_out and out is None:
            raise ValueError("codes out need the output buffer")
        lead = xs[0].shape[:-1]
        ldo = sum(x.shape[-1] for x in xs)
        shape = lead + (ldo,)
        rows = int(np.prod(lead))
        y = native.empty(shape) if out is None else target_buffer(out, rows * ldo)
        descs, srcs, at = [], [], 0
        for x, cin, (prm, values, codes) in zip(xs, codes_in, tables):
            src = source_buffer(x, cin)
            descs.append(LkDesc(rows, x.shape[-1], ldo, at, 0, int(cin), int(codes_out), prm.ctypes.data,
                                values.ctypes.data, codes.ctypes.data))
            srcs.append(src)
            at += x.shape[-1]

        def call() -> int:
            nthreads = parallel.workers()
            for d, src in zip(descs, srcs):
                lib.i8_lookup(ctypes.byref(d), src.ctypes.data, y.ctypes.data, nthreads)
            return 1
        call.keep = (descs, srcs, y, tables)
        call.native = [(0, fn, ctypes.addressof(d), src.ctypes.data, y.ctypes.data, 0, 0)
                       for d, src in zip(descs, srcs)]
        return call, y.reshape(shape)
    return mark_staged(stage, layer, layer.ins)


def _address_of(cfn) -> int:
    return ctypes.cast(cfn, ctypes.c_void_p).value


def prepare_resize(pool) -> Optional[Callable]:
    """The native ``apply`` of an int8 nearest Resize (``Int8Pool`` kind "Resize", integer
    scales): each input code's output code (``Q_out(DQ_in(q))``, the numpy layer's formula on
    the 256 codes) by ``i8_lookup`` into a byte buffer, then replicated ``sh`` x ``sw`` times (as
    bytes, or as their values)."""
    lib = int8_native.lib()
    if lib is None or pool.kind != "Resize" or pool.geometry.get("mode") == "linear":
        return None                                     # bilinear: numpy (int8.Int8Pool)
    sh, sw = (int(s) for s in pool.geometry.get("scales", (0, 0)))
    if sh < 1 or sw < 1:
        return None                                     # numpy's error
    values, codes = _tables(_requant_table(pool.in_q, pool.out_q), pool.out_q)
    _check_codes(values, codes, pool.out_q)
    prm = np.array(int8_native.qparams(pool.in_q), F32)
    byte_values = np.zeros(256, F32)                    # the value of each output byte
    byte_values[codes[0]] = values[0]

    def stage(x: np.ndarray, out=None, codes_in=(False,), codes_out=False):
        fallback = unless_nhwc(pool, "an int8 Resize", x, codes_in, codes_out)
        if fallback:
            return fallback
        n, h, w, c = x.shape
        shape = (n, h * sh, w * sw, c)
        if codes_out and out is None:
            raise ValueError("codes out need the output buffer")
        src = source_buffer(x, codes_in[0])
        y = native.empty(shape) if out is None else target_buffer(out, n * h * sh * w * sw * c)
        small = np.empty(x.size, np.uint8)
        d = LkDesc(x.size // c, c, c, 0, 0, int(codes_in[0]), 1, prm.ctypes.data, values.ctypes.data,
                   codes.ctypes.data)
        grid = (n, h, sh, w, sw, c)
        dst = y.reshape(-1).view(np.uint8)[:y.size].reshape(grid) if codes_out else y.reshape(grid)

        def call() -> int:
            lib.i8_lookup(ctypes.byref(d), src.ctypes.data, small.ctypes.data, parallel.workers())
            b = small.reshape(n, h, 1, w, 1, c)
            dst[...] = b if codes_out else byte_values[b]
            return 1
        call.keep = (d, src, y, small, prm, values, codes)
        return call, y.reshape(shape)
    return mark_staged(stage, pool, [pool.in_q])
