"""Native kernel of the float-path int8 Conv2D (``_native_i8float.c``; int8_float_conv.py).

The layer onnxruntime runs as a float Conv between DequantizeLinear and QuantizeLinear follows
MLAS's SGEMM: per output a chain of single-rounding fp32 FMAs over k in im2col order, in K blocks
of ``mlas_stride_k``. The numpy path (``FloatPathConv2D.apply``) emulates each FMA with a float64
product and sum rounded to fp32, a Python loop over K; the C kernel uses the FMA instruction itself
(the numpy emulation can round twice where the FMA rounds once: never seen, tests/test_int8_float_native.py).
A conv with one output channel per group is MLAS's M1 kernel, no FMA (``m1_chain``): a depthwise one
in C too (``m1_sums``: a 5x5 depthwise of PP-OCRv4's rec, Quark XINT8, 390 ms in numpy), other grouped
ones numpy's; one with one output pixel its M1 transposed-B kernel: numpy's ``m1t_chain``.

``prepare_float(layer)`` returns the layer's native ``apply`` or None (native kernels off, also
``ONNX_MRVL_SIM_INT8_NATIVE=0``; a CPU with neither AVX-512 BW/VL nor AVX2 + FMA + F16C, whose
build runs the same code on pairs of 256-bit registers, the same bits; the build failed:
``why_disabled()``),
and then the numpy ``apply`` runs. Like the VNNI kernels it reads and writes int8 codes buffers of
the static plan (``int8_io``) and runs its parts on the fp16 kernels' worker pool.
"""
from __future__ import annotations

import ctypes
import logging
import os
from typing import Callable, Optional

import numpy as np

from . import native
from .int8 import QRANGE
from .int8_float_conv import STRIDE_K, FloatPathConv2D, FloatPathFC, conv_segments, fc_segments, mlas_stride_k
from .native_loader import OnceLibrary
from .int8_native import (code_offset, conv_out_size, empty_result, keep_call, load_library, mark_staged,
                          reciprocal, run_checked, source_buffer, target_buffer)

log = logging.getLogger(__name__)
F32 = np.float32
_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native_i8float.c")


class FDesc(ctypes.Structure):
    """``f8desc`` of _native_i8float.c."""
    _fields_ = ([(k, ctypes.c_long) for k in (
        "n", "h", "w", "c", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl", "groups", "ig", "og", "o",
        "k", "stride_k", "ldw", "depthwise", "in_codes", "in_zp", "in_lo", "in_hi", "in_off",
        "out_codes", "out_zp", "out_off", "raw", "in_exact", "out_exact", "m1")]
        + [(k, ctypes.c_float) for k in ("in_scale", "out_scale", "lo", "hi", "in_rcp", "out_rcp")]
        + [(k, ctypes.c_void_p) for k in ("wt", "bias")])


def _load() -> ctypes.CDLL:
    if native.variant() == "avx2":      # the AVX-512 operations on 256-bit pairs (_native_avx2.h)
        so = load_library(_SRC, "f8_set_runner", ("avx2", "fma", "f16c"), "AVX2 + FMA + F16C")
    else:
        so = load_library(_SRC, "f8_set_runner", ("avx512bw", "avx512vl"), "AVX-512 BW/VL")
    so.f8_conv.restype = so.f8_panel.restype = ctypes.c_int
    so.f8_panel.argtypes = []
    so.f8_conv.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    return so


_LIBRARY = OnceLibrary(_load, "native float-path int8 kernel", "numpy", log)
lib, why_disabled = _LIBRARY.get, _LIBRARY.reason      # the loaded library or None; why not


def _padded(a: np.ndarray, cols: int) -> np.ndarray:
    """a [..., n] float32 zero-padded to [..., cols], 64-byte aligned."""
    out = native.empty(a.shape[:-1] + (cols,))
    out[...] = 0
    out[..., :a.shape[-1]] = a
    return out


def prepare_float(layer: FloatPathConv2D, stride_k: Optional[int] = None) -> Optional[Callable]:
    """The native ``apply`` of a float-path int8 Conv2D, or None (numpy's ``layer.apply`` then).
    ``stride_k``: MLAS's K block when it is not the conv's (a MatMul's, prepare_float_fc)."""
    m1 = layer.o == layer.groups and layer.gemm == "conv"     # MLAS's M1 sums (int8_float_conv.m1_chain)
    if lib() is None or (m1 and (layer.ig != 1 or stride_k)):  # only a depthwise conv's in C (m1_sums)
        return None
    if stride_k is None and layer.gemm == "conv_transpose":   # onnxruntime's ConvTranspose SGEMM (A transposed)
        stride_k = STRIDE_K
    o, g, ig, kh, kw = layer.o, layer.groups, layer.ig, layer.kh, layer.kw
    og, k = o // g, layer.ig * kh * kw
    depthwise = ig == 1 and og == 1
    nch = o if depthwise else og                    # channels side by side in a tile
    ldw, pw = -(-nch // 64) * 64, lib().f8_panel()   # panels of pw channels: 64 (AVX-512), 16 (AVX2)
    wg = layer.wd.reshape(k, 1 if depthwise else g, nch).transpose(1, 0, 2)       # [groups][K][nch]
    w = _padded(np.ascontiguousarray(wg), ldw).reshape(-1, k, ldw // pw, pw).transpose(0, 2, 1, 3)
    w = _padded(np.ascontiguousarray(w).reshape(-1), w.size)        # [groups][ldw / pw][K][pw], aligned
    bias = _padded(layer.bd.reshape(-1, nch), ldw)
    d = FDesc()
    d.kh, d.kw, (d.sh, d.sw), (d.dh, d.dw) = kh, kw, layer.strides, layer.dilation
    d.pt, d.pl = layer.padding[0], layer.padding[1]
    d.groups, d.ig, d.og, d.o, d.k, d.ldw, d.depthwise, d.m1 = g, ig, og, o, k, ldw, int(depthwise), int(m1)
    s_x, z_x, dt_x = layer.in_q
    s_y, z_y, _ = layer.out_q
    d.in_scale, d.in_zp, (d.in_lo, d.in_hi), d.in_off = F32(s_x), z_x, QRANGE[dt_x], code_offset(layer.in_q)
    d.out_scale, d.out_zp, d.out_off = F32(s_y), z_y, code_offset(layer.out_q)
    d.lo, d.hi = float(layer.lo), float(layer.hi)
    d.in_rcp, d.in_exact = reciprocal(s_x)
    d.out_rcp, d.out_exact = reciprocal(s_y)
    d.wt, d.bias = w.ctypes.data, bias.ctypes.data
    fn = lib().f8_conv

    def stage(x: np.ndarray, out=None, codes_in=(False,), codes_out=False, raw=False):
        n, h, wd, c = x.shape
        oh, ow = conv_out_size(layer, x)
        if oh < 1 or ow < 1 or n == 0:
            return empty_result(layer, x, out, codes_in, codes_out)
        if codes_out and out is None:
            raise ValueError("codes out need the output buffer")
        if oh * ow == 1 and not stride_k and layer.gemm == "conv" and not m1:   # one output pixel: MLAS's M1
            return None, _numpy_result(layer, x, out, codes_in[0], codes_out, raw)   # transposed-B, numpy's m1t_chain
        blocks = {k} if m1 else {stride_k} if stride_k else {sk for _, _, sk in conv_segments(layer, n, oh, ow)}
        if len(blocks) > 1:      # MLAS's threads' pixel parts of different K blocks: numpy's sums
            return None, _numpy_result(layer, x, out, codes_in[0], codes_out, raw)
        dd = FDesc.from_buffer_copy(d)               # per call: thread safe
        dd.n, dd.h, dd.w, dd.c, dd.oh, dd.ow = n, h, wd, c, oh, ow
        dd.stride_k = blocks.pop()
        dd.in_codes, dd.out_codes, dd.raw = int(codes_in[0]), int(codes_out), int(raw)
        src = source_buffer(x, codes_in[0])
        y = native.empty((n, oh, ow, o)) if out is None else target_buffer(out, n * oh * ow * o)
        call = keep_call(fn, (ctypes.byref(dd), src.ctypes.data, y.ctypes.data), (dd, src, y, w, bias))
        return call, y.reshape(n, oh, ow, o)
    apply = mark_staged(stage, layer, [layer.in_q])

    def sums(x: np.ndarray) -> np.ndarray:
        """``layer.sums(x)`` computed by the kernel: fp32(conv + bias) before the quantization."""
        call, y = stage(x, raw=True)
        if call is None:
            return y
        run_checked(call)
        return y
    apply.sums = sums
    apply.stage = stage
    return apply


def _numpy_result(layer: FloatPathConv2D, x: np.ndarray, out, codes_in: bool, codes_out: bool, raw: bool):
    """The numpy path's result in the kernel's forms: input codes (code + offset bytes) dequantized
    first; the output as sums (``raw``), values, or codes written into ``out``."""
    if codes_in:
        s, z, _ = layer.in_q
        codes = np.ascontiguousarray(x).reshape(-1).view(np.uint8)[:x.size].reshape(x.shape)
        x = ((codes.astype(np.int32) - code_offset(layer.in_q) - z).astype(F32) * F32(s)).astype(F32)
    if raw:
        return layer.sums(x)
    y, ok = layer.apply(x)
    if codes_out:
        s, z, _ = layer.out_q
        codes = (np.rint(y / F32(s)) + z + code_offset(layer.out_q)).astype(np.uint8)
        out.reshape(-1).view(np.uint8)[:codes.size] = codes.reshape(-1)
        return out, ok
    if out is not None:
        np.copyto(out.reshape(y.shape), y)
        return out.reshape(y.shape), ok
    return y, ok


def prepare_float_fc(layer: FloatPathFC) -> Optional[Callable]:
    """The native ``apply`` of a float-path FC (onnxruntime's float MatMul): its 1x1 conv
    (``layer.conv``) on the [M, K] rows as the pixels of one 1 x M image, with a MatMul's K block
    ``mlas_stride_k(N, K)`` (N: the output features); None: numpy's ``layer.apply``."""
    if getattr(layer, "c", None) is not None:   # a float Gemm's C before the sums: numpy's path
        return None
    conv = layer.conv
    block = mlas_stride_k(conv.o, conv.ig)
    prepared = prepare_float(conv, stride_k=block)
    if prepared is None:
        return None
    inner, k = prepared.stage, conv.ig

    def stage(x: np.ndarray, out=None, codes_in=(False,), codes_out=False):
        if x.ndim != 2 or x.shape[1] != k:
            raise ValueError(f"input of shape {list(x.shape)} does not fit the kernel K={k}")
        if any(sk != block for _, _, sk in fc_segments(x.shape[0], conv.o, k)):
            # MLAS's threads' column parts with K blocks other than the kernel's: numpy's sums
            return None, _numpy_result(layer, x, out, codes_in[0], codes_out, False)
        call, y = inner(x.reshape(1, 1, x.shape[0], k), out=out, codes_in=codes_in, codes_out=codes_out)
        return call, y.reshape(x.shape[0], -1)
    apply = mark_staged(stage, layer, [layer.in_q])

    def sums(x: np.ndarray) -> np.ndarray:
        if any(sk != block for _, _, sk in fc_segments(x.shape[0], conv.o, k)):
            return layer.sums(x)
        return prepared.sums(x.reshape(1, 1, x.shape[0], k)).reshape(x.shape[0], -1)
    apply.sums = sums
    return apply
