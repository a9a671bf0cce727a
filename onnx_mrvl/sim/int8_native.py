"""Native int8 Conv2D / FC / depthwise kernels (``_native_int8.c``: AVX512-VNNI, or AVX2 with
``vpdpbusd`` emulated by ``_native_int8_avx2.h``, exactly or as MLAS's saturating U8S8 pairs when the
layer's ``u8s8_sat``), bit-exact with the numpy path of ``int8.py`` (docs/simulator.md "int8 kernels").

``prepare(layer)`` returns the layer's native ``apply`` or None (native kernels off -- also
``ONNX_MRVL_SIM_INT8_NATIVE=0`` for these alone --, an AVX-512 CPU without VNNI, a kernel the C code
does not cover);
the numpy ``apply`` then runs, with the same results. The
library is built and cached like ``_native_conv.c`` (``native.build_shared``) and its parallel
parts run on the fp16 kernels' worker pool (``mrvl_run_parts``).
"""
from __future__ import annotations

import ctypes
import functools
import logging
import os
from typing import Callable, Optional, Tuple

import numpy as np

from ..errors import MrvlRuntimeError
from . import native, parallel
from .native_loader import OnceLibrary, cpu_has
from .int8 import QRANGE, Int8Add, Int8Conv2D, Int8FC, Int8Layer, numpy_fake_quant
from .int8_eltwise import add_constants, qmul_scale
from .tensor_ops import npc_dims

log = logging.getLogger(__name__)
F32 = np.float32
_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native_int8.c")

ENABLED = os.environ.get("ONNX_MRVL_SIM_INT8_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


class Desc(ctypes.Structure):
    """``i8desc`` of _native_int8.c."""
    _fields_ = ([(k, ctypes.c_long) for k in (
        "n", "h", "w", "c", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl", "groups", "ig", "og", "o",
        "k", "k4", "cb", "in_zp", "in_lo", "in_hi", "in_off", "in_exact", "in_codes", "out_codes", "out_zp", "out_off",
        "requant", "out_lo", "out_hi", "out_exact")]
        + [(k, ctypes.c_float) for k in ("in_scale", "out_scale", "lo_r", "hi_r", "in_rcp", "out_rcp")]
        + [(k, ctypes.c_void_p) for k in ("wpack", "corr", "mult", "add_prm", "add_other")]
        + [("add_slot", ctypes.c_long), ("small_mult", ctypes.c_long), ("sat", ctypes.c_long),
           ("wzp", ctypes.c_void_p), ("wsplit", ctypes.c_long)])


def load_library(source: str, set_runner: str, cpu_flags: Tuple[str, ...], cpu_name: str) -> ctypes.CDLL:
    """An int8 kernel library (``source``, its ``set_runner``: ``native.load_on_pool``) unless
    ``ONNX_MRVL_SIM_INT8_NATIVE=0``, the CPU lacks ``cpu_flags`` or the native kernels are off."""
    if not ENABLED:
        raise RuntimeError("disabled by ONNX_MRVL_SIM_INT8_NATIVE=0")
    if not cpu_has(*cpu_flags):
        raise RuntimeError(f"the CPU has no {cpu_name}")
    return native.load_on_pool(source, set_runner)


def reciprocal(s: float) -> Tuple[np.float32, int]:
    """(fp32(1 / s), 1 when it is not a normal float: the kernels then always divide)."""
    with np.errstate(over="ignore", divide="ignore"):
        rcp = F32(1) / F32(s)
    return rcp, int(not (np.isfinite(rcp) and rcp >= np.finfo(F32).tiny))


def _load() -> ctypes.CDLL:
    if native.variant() == "avx2":      # vpdpbusd emulated (_native_int8_avx2.h)
        so = load_library(_SRC, "i8_set_runner", ("avx2",), "AVX2")
    else:
        so = load_library(_SRC, "i8_set_runner", ("avx512_vnni",), "AVX512-VNNI")
    for fn in (so.i8_conv, so.i8_depthwise, so.i8_maxpool, so.i8_global_avgpool, so.i8_global_avgpool_float):
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    so.i8_add.restype = None
    so.i8_add.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long, ctypes.c_void_p, ctypes.c_int]
    so.i8_fake_quant.restype = None
    so.i8_fake_quant.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_long, ctypes.c_void_p, ctypes.c_int]
    so.i8_bmm.restype = ctypes.c_int
    so.i8_bmm.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long] * 4 + [ctypes.c_void_p]
    so.i8_qmul.restype = None
    so.i8_qmul.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long] * 6 + [ctypes.c_void_p, ctypes.c_int]
    so.i8_float_binary_fq.restype = ctypes.c_int
    so.i8_float_binary_fq.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long] * 6 + [ctypes.c_void_p] + [ctypes.c_int] * 2
    so.i8_softmax.restype = ctypes.c_int
    so.i8_softmax.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_long] * 2 + [ctypes.c_void_p] * 2
    so.i8_avgpool.restype = ctypes.c_int
    so.i8_avgpool.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    so.i8_lookup.restype = ctypes.c_int
    so.i8_lookup.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    so.i8_run_calls.restype = ctypes.c_long
    so.i8_run_calls.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_int]
    return so


_LIBRARY = OnceLibrary(_load, "native int8 kernels", "numpy", log)
lib, why_disabled = _LIBRARY.get, _LIBRARY.reason      # the loaded library or None; why not


def _aligned(nbytes: int) -> np.ndarray:
    buf = np.zeros(nbytes + 64, np.uint8)
    off = -buf.ctypes.data % 64
    return buf[off:off + nbytes]


class _Prepared:
    """The packed weights and per-channel vectors of one layer, and its ``apply``."""

    def __init__(self, layer: Int8Layer, geometry: Tuple, groups: int, depthwise: bool):
        self.layer, self.depthwise = layer, depthwise
        wd = np.rint(layer.kernel.T).astype(np.int64)        # q_w - z_w [O, K] (K in (kh, kw, i) order)
        o, k = wd.shape
        zw = getattr(layer, "weight_zp", None)               # per output channel, or None
        zw = None if zw is None else np.broadcast_to(np.asarray(zw, np.int64).reshape(-1), (o,))
        raw = wd if zw is None else wd + zw[:, None]         # the codes q_w
        if raw.size and (raw.min() < -128 or raw.max() > 127):
            raise ValueError("weight codes outside int8")
        w = raw.astype(np.int8)
        og = o // groups
        s_x, z_x, dt_x = layer.in_q
        lo_x, hi_x = QRANGE[dt_x]
        off = 128 if dt_x == "int8" else 0
        s_y, z_y, _ = layer.out_q
        d = Desc()
        (d.kh, d.kw, d.sh, d.sw, d.dh, d.dw, d.pt, d.pl) = geometry
        d.groups, d.og, d.o, d.k = groups, og, o, k
        d.in_zp, d.in_lo, d.in_hi, d.in_off = z_x, lo_x, hi_x, off
        d.out_zp, d.out_off = z_y, code_offset(layer.out_q)
        d.in_scale, d.out_scale = F32(s_x), F32(s_y)
        d.in_rcp, d.in_exact = reciprocal(s_x)
        d.lo_r, d.hi_r = float(layer.lo - z_y), float(layer.hi - z_y)
        mult = np.asarray(layer.mult, F32)
        if depthwise:
            cpad, kh, kw = -(-o // 16) * 16, geometry[0], geometry[1]
            g4 = -(-kw // 4)
            parts, rest = [], wd                                # q_w - z_w (|.| <= 255) as int8 terms
            while not parts or rest.any():
                parts.append(np.clip(rest, -128, 127))
                rest = rest - parts[-1]
            w4 = np.zeros((len(parts) * kh, g4 * 4, cpad), np.int8)    # [ky][kx padded to 4s][channels]
            for i, part in enumerate(parts):                    # kh weight rows per term
                w4[i * kh:(i + 1) * kh, :kw, :o] = part.T.reshape(kh, kw, o)
            self.w = _aligned(w4.size).view(np.int8)
            self.w[:] = w4.reshape(-1, g4, 4, cpad).transpose(0, 1, 3, 2).reshape(-1)   # [ky][g][c][4]
            d.wsplit = len(parts)
            corr = np.zeros(cpad, np.int64)
            corr[:o] = layer.bias - (z_x + off) * wd.sum(axis=1)
            self.corr = (corr & 0xFFFFFFFF).astype(np.uint32).view(np.int32).copy()     # mod 2**32
            self.mult = self._f32(np.pad(mult, (0, cpad - o)))
            d.ig, d.k4, d.cb = 1, k, 0
        else:
            k4, cb = -(-k // 4) * 4, -(-og // 64)
            packed = _aligned(groups * cb * (k4 // 4) * 256).view(np.int8)
            corr = np.zeros((groups, cb * 64), np.int64)
            mults = np.zeros((groups, cb * 64), F32)
            wzp = np.zeros((groups, cb * 64), np.int64)
            colsum = w.astype(np.int64).sum(axis=1)
            for g in range(groups):
                wg = np.zeros((cb * 64, k4), np.int8)
                wg[:og, :k] = w[g * og:(g + 1) * og]
                base = g * cb * (k4 // 4) * 256
                for b in range(cb):
                    nv = min(4, -(-(og - b * 64) // 16))
                    blk = wg[b * 64:b * 64 + nv * 16].reshape(nv * 16, k4 // 4, 4).transpose(1, 0, 2)
                    start = base + b * (k4 // 4) * 256
                    packed[start:start + blk.size] = blk.reshape(-1)
                sl = slice(g * og, (g + 1) * og)
                corr[g, :og] = layer.bias[sl] - (z_x + off) * colsum[sl]
                if zw is not None:   # sum (u - c)(q_w - z_w) = sum u q_w - c colsum + z_w (K c - sum u)
                    corr[g, :og] += zw[sl] * (k * (z_x + off))
                    wzp[g, :og] = zw[sl]
                mults[g, :og] = mult[sl]
            self.w = packed
            self.corr = (corr & 0xFFFFFFFF).astype(np.uint32).view(np.int32).reshape(-1).copy()   # mod 2**32
            self.mult = mults.reshape(-1).copy()
            if zw is not None:       # the kernel subtracts z_w[o] * (each row's byte sum)
                self.wzp = (wzp & 0xFFFFFFFF).astype(np.uint32).view(np.int32).reshape(-1).copy()
                d.wzp = self.wzp.ctypes.data
            d.ig, d.k4, d.cb = k // (d.kh * d.kw), k4, cb
        d.wpack, d.corr, d.mult = self.w.ctypes.data, self.corr.ctypes.data, self.mult.ctypes.data
        d.small_mult = int(bool(np.all(np.abs(self.mult) < 0.5)))   # |acc * m| < 2^30: int32 clamps are safe
        d.sat = int(bool(getattr(layer, "u8s8_sat", False)) and not depthwise)   # MLAS's 16-bit pair sums
        self.desc = d
        self.fn = lib().i8_depthwise if depthwise else lib().i8_conv

    @staticmethod
    def _f32(a: np.ndarray) -> np.ndarray:
        out = native.empty(a.shape)
        out[...] = a
        return out

    def stage(self, x4: np.ndarray, oh: int, ow: int, out: Optional[np.ndarray] = None, codes_in: bool = False,
              codes_out: bool = False, fused=None):
        """(call, y): ``call()`` runs x4 float32 [N, H, W, C] (C-contiguous) -> y float32
        [N, OH, OW, O] (``out`` when given) and returns 0 when out of memory. ``codes_in`` /
        ``codes_out``: that buffer holds the bytes q + off instead (static_plan.py)."""
        d = Desc.from_buffer_copy(self.desc)                 # per call: thread safe
        d.n, d.h, d.w, d.c = x4.shape
        d.oh, d.ow = oh, ow
        d.in_codes, d.out_codes = int(codes_in), int(codes_out)
        if codes_out and out is None:
            raise ValueError("codes out need the output buffer")
        size = x4.shape[0] * oh * ow * d.o
        out = native.empty((x4.shape[0], oh, ow, d.o)) if out is None else target_buffer(out, size)
        if fused is not None:                               # (prm, slot, other): a Sum2D on this output
            if self.depthwise:
                raise ValueError("a Sum2D fuses into a GEMM conv only")
            prm, slot, other = fused
            if other.size != out.size or not other.flags.c_contiguous:
                raise ValueError("the fused Sum2D's operand does not match the conv output")
            d.add_prm, d.add_slot, d.add_other = prm.ctypes.data, slot, other.ctypes.data
        return keep_call(self.fn, (ctypes.byref(d), x4.ctypes.data, out.ctypes.data), (d, x4, out, self, fused)), out


def keep_call(fn, args, keep) -> Callable[[], int]:
    """``fn(*args, workers)``; ``keep``: what the arguments point into, alive as long as the call."""
    def call() -> int:
        return fn(*args, parallel.workers())
    call.keep = keep
    call.native = (0, ctypes.cast(fn, ctypes.c_void_p).value, *[_address(a) for a in args], 0, 0)
    return call


def _address(arg) -> int:
    """The address a ctypes argument (an int, or ``byref`` of a structure) passes."""
    return arg if isinstance(arg, int) else ctypes.addressof(arg._obj) + getattr(arg, "_offset", 0)


def run_checked(call) -> None:
    if not call():
        raise MrvlRuntimeError("the native int8 kernel could not allocate its scratch buffer",
                               hint="free memory, or set ONNX_MRVL_SIM_INT8_NATIVE=0 (numpy kernels)")


def code_offset(q) -> int:
    """The byte of code q is q + 128 for int8, q for uint8 (both unsigned, as VNNI reads them)."""
    return 128 if q[2] == "int8" else 0


def target_buffer(out: np.ndarray, size: int) -> np.ndarray:
    if out.dtype != F32 or not out.flags.c_contiguous or out.size != size:
        raise ValueError(f"output buffer {out.dtype} {list(out.shape)} for {size} float32 values")
    return out


def unless_nhwc(layer, what: str, x: np.ndarray, codes_in, codes_out):
    """None when ``x`` is a non-empty NHWC tensor (the C kernel's input), else ``(None, y)``: the
    numpy path's result or error (``layer.apply``); codes, which it cannot take, are refused."""
    if x.ndim == 4 and x.size:
        return None
    if codes_in[0] or codes_out:
        raise ValueError(f"{what} of codes needs a non-empty NHWC tensor")
    return None, layer.apply(x)


def source_buffer(x: np.ndarray, codes: bool) -> np.ndarray:
    if codes:                                                # an arena view: C-contiguous, its bytes the codes
        if not x.flags.c_contiguous:
            raise ValueError("int8 codes in a non-contiguous buffer")
        return x
    return np.ascontiguousarray(x, F32)


def mark_staged(stage: Callable, layer, in_quants) -> Callable:
    """The ``apply`` of a staged kernel. ``stage(*xs, out=, codes_in=, codes_out=)`` returns
    ``(call, y)`` (``call`` None: y is already the result, the numpy path's). Its attributes, read
    by the static plan: ``writes_into`` (takes ``out=``), ``int8_io`` (the input and output
    quantizations: a tensor between two such kernels with the same quantization can stay in
    codes, ``codes_in`` / ``codes_out``) and ``bind(*views, out=, codes_in=, codes_out=)``: the
    ``call`` for fixed buffers, made once (no per-run Python beyond the ctypes call)."""
    def apply(*xs, out: Optional[np.ndarray] = None, codes_in=None, codes_out: bool = False):
        call, y = stage(*xs, out=out, codes_in=codes_in or (False,) * len(xs), codes_out=codes_out)
        if call is None:
            return y
        run_checked(call)
        return y, True

    def bind(*xs, out: np.ndarray, codes_in, codes_out: bool) -> Optional[Callable[[], int]]:
        return stage(*xs, out=out, codes_in=codes_in, codes_out=codes_out)[0]
    apply.writes_into = True
    apply.bind = bind
    apply.int8_io = (tuple(tuple(q) for q in in_quants), tuple(layer.out_q if hasattr(layer, "out_q") else layer.c))
    return apply


def conv_out_size(layer, x: np.ndarray) -> Tuple[int, int]:
    """(oh, ow) of an int8 Conv2D ``layer`` (int8.Int8Conv2D, int8_float_conv.FloatPathConv2D) on
    the NHWC ``x``; a channel count that does not fit raises."""
    _, h, w, c = x.shape
    if c != layer.ig * layer.groups:
        raise ValueError(f"input has {c} channels, the kernel takes {layer.ig} x {layer.groups} groups")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = layer.strides, layer.dilation, layer.padding
    return ((h + pt + pb - (layer.kh - 1) * dh - 1) // sh + 1,
            (w + pl + pr - (layer.kw - 1) * dw - 1) // sw + 1)


def empty_result(layer, x: np.ndarray, out, codes_in, codes_out):
    """``(None, (y, ok))``: the numpy path's result of a conv with an empty output (copied into
    ``out`` when given); codes, which it cannot take, are refused."""
    if codes_in[0] or codes_out:
        raise ValueError("an empty int8 tensor in codes")
    y, ok = layer.apply(x)
    if out is not None:
        np.copyto(out, y)
    return None, (y, ok)


def _conv_apply(layer: Int8Conv2D, prep: _Prepared) -> Callable:
    def stage(x: np.ndarray, out=None, codes_in=(False,), codes_out=False, fused=None):
        oh, ow = conv_out_size(layer, x)
        if oh < 1 or ow < 1 or x.shape[0] == 0:
            return empty_result(layer, x, out, codes_in, codes_out)
        call, y = prep.stage(source_buffer(x, codes_in[0]), oh, ow, out, codes_in[0], codes_out, fused)
        return call, y.reshape(x.shape[0], oh, ow, -1)
    apply = mark_staged(stage, layer, [layer.in_q])
    if not prep.depthwise:
        def bind_fused(x, *, out, codes_in, add_prm, slot, other):
            """The call of this conv followed by a Sum2D reading only its output (static plan):
            the conv's codes go straight into the sum, ``out`` is the Sum2D's output, ``other``
            its other operand; ``add_prm``: the Sum2D's ``i8_add`` parameters with codes flags."""
            return stage(x, out=out, codes_in=codes_in, fused=(add_prm, slot, other))[0]
        apply.bind_fused = bind_fused
    return apply


def _fc_apply(layer: Int8FC, prep: _Prepared) -> Callable:
    k = layer.kernel.shape[0]

    def stage(x: np.ndarray, out=None, codes_in=(False,), codes_out=False):
        if x.ndim != 2 or x.shape[1] != k:
            raise ValueError(f"input of shape {list(x.shape)} does not fit the kernel K={k}")
        if x.shape[0] == 0:
            if codes_in[0] or codes_out:
                raise ValueError("an empty int8 tensor in codes")
            return None, layer.apply(x)
        x4 = source_buffer(x, codes_in[0]).reshape(x.shape[0], 1, 1, k)
        call, y = prep.stage(x4, 1, 1, out, codes_in[0], codes_out)
        return call, y.reshape(x.shape[0], -1)
    return mark_staged(stage, layer, [layer.in_q])


def prepared(layer: Int8Layer, geometry: Tuple, groups: int, depthwise: bool) -> Optional[_Prepared]:
    """The packed layer, or None when its weight codes do not fit int8 (the numpy path then)."""
    try:
        return _Prepared(layer, geometry, groups, depthwise)
    except ValueError:                      # weight codes outside int8: the numpy path
        return None


def prepare(layer: Int8Layer) -> Optional[Callable]:
    """The native ``apply`` of an int8 Conv2D / FC layer, or None (numpy's ``layer.apply`` then).
    A float-path Conv2D (int8_float_conv.py) gets the fp32 kernel of int8_float_native.py."""
    if getattr(layer, "float_path", False):     # onnxruntime's float Conv: its own kernel, never the VNNI one
        from .int8_float_native import prepare_float, prepare_float_fc
        return prepare_float(layer) if isinstance(layer, Int8Conv2D) else prepare_float_fc(layer)
    if lib() is None:
        return None
    if getattr(layer, "u8s8_sat", False) and native.variant() != "avx2":
        return None   # the saturating pairs are built and tested on the AVX2 build only
    if isinstance(layer, Int8Conv2D):
        geometry = (layer.kh, layer.kw, *layer.strides, *layer.dilation, layer.padding[0], layer.padding[1])
        depthwise = layer.groups == layer.o and layer.ig == 1
        prep = prepared(layer, geometry, layer.groups, depthwise)
        return prep and _conv_apply(layer, prep)
    if isinstance(layer, Int8FC):
        prep = prepared(layer, (1, 1, 1, 1, 1, 1, 0, 0), 1, False)
        return prep and _fc_apply(layer, prep)
    return None


def qparams(q, lo=None, hi=None):
    """[s, 1/s, exact, z, lo, hi, byte offset, codes] of a quantization (s, z, dtype) for ``i8_add``."""
    s, z, dt = q
    rcp, exact = reciprocal(s)
    qlo, qhi = QRANGE[dt]
    return [F32(s), rcp, float(exact), z, qlo if lo is None else lo, qhi if hi is None else hi, code_offset(q), 0]


def _qladd(layer: Int8Add):
    """i8_add's [mode, r_a, r_b, F, shift, 0, 0, 0] (prm[24:32]): MLAS QLinearAdd's constants of the
    shifted quantizations (int8_eltwise.add_constants), or mode 0 (the float form)."""
    if layer.mode == "float":
        return [0.0] * 8
    k = layer.shift
    ra, rb, f = add_constants(*((q[0], q[1] + k) for q in (layer.a, layer.b, layer.c)))
    return [1.0, ra, rb, f, float(k), 0.0, 0.0, 0.0]


def prepare_add(layer: Int8Add) -> Optional[Callable]:
    """The native ``apply`` of an int8 Sum2D of two int8 tensors, or of one and its coded constant
    operand (a QDQ bias add: onnxruntime's QLinearAdd with an initializer), or None."""
    if lib() is None or layer.subtract:
        return None
    if layer.operand is not None and layer.mode == "float" and not _on_grid(layer.operand, layer.b):
        return None                      # a float constant off b's grid: added as it is (numpy)
    base = np.array(qparams(layer.a) + qparams(layer.b) + qparams(layer.c, layer.lo, layer.hi), F32)
    fn = lib().i8_add
    base = np.concatenate([base, np.array(_qladd(layer), F32)])   # prm[24:32]: MLAS QLinearAdd's constants
    tiled: dict = {}

    def tiled_operand(xa: np.ndarray) -> np.ndarray:
        """The constant's dequantized values broadcast to ``xa``'s shape as one C-contiguous array
        (made once per shape): the kernel quantizes them back to the constant's codes, and each
        element's QLinearAdd is the same whether b is broadcast or not (numpy path: ``_operand_codes``)."""
        b = tiled.get(xa.shape)
        if b is None:
            b = tiled[xa.shape] = np.ascontiguousarray(layer.operand_as(layer.operand, xa), F32)
        return b

    def stage(xa: np.ndarray, xb: Optional[np.ndarray] = None, out=None, codes_in=(False, False), codes_out=False):
        if layer.operand is not None:
            if xb is not None or (codes_in[1:] and codes_in[1]):
                raise ValueError("an int8 Sum2D with a constant operand takes one input")
            try:
                xb, codes_in = tiled_operand(xa), (codes_in[0], False)
            except ValueError:
                return None, layer.apply(xa)                 # its error
        if xb is None or xa.shape != xb.shape:
            if any(codes_in) or codes_out:
                raise ValueError("int8 add of codes needs two tensors of one shape")
            both = _broadcast_pair(xa, xb)                   # (an attention mask over the scores)
            if both is None:
                return None, layer.apply(xa, xb)             # its error
            xa, xb = both
        a, b = source_buffer(xa, codes_in[0]), source_buffer(xb, codes_in[1])
        if codes_out and out is None:
            raise ValueError("codes out need the output buffer")
        out = native.empty(a.shape) if out is None else target_buffer(out, a.size).reshape(a.shape)
        prm = base
        if any(codes_in) or codes_out:
            prm = base.copy()
            prm[7], prm[15], prm[23] = float(codes_in[0]), float(codes_in[1]), float(codes_out)

        def call() -> int:
            fn(a.ctypes.data, b.ctypes.data, out.ctypes.data, a.size, prm.ctypes.data, parallel.workers())
            return 1
        call.keep = (a, b, out, prm)
        call.native = (1, ctypes.cast(fn, ctypes.c_void_p).value, a.ctypes.data, b.ctypes.data, out.ctypes.data,
                       a.size, prm.ctypes.data)
        return call, out
    apply = mark_staged(stage, layer, [layer.a, layer.b])
    bind_same = apply.bind

    def bind(*xs, out, codes_in, codes_out):
        """None for a broadcast operand: its copy is made per run, not once (a Python step)."""
        if len(xs) == 2 and xs[0].shape != xs[1].shape:
            return None
        return bind_same(*xs, out=out, codes_in=codes_in, codes_out=codes_out)
    apply.bind = bind
    apply.add_prm = base                                     # for a conv that fuses this Sum2D
    return apply


def _on_grid(values: np.ndarray, q) -> bool:
    """Whether every value is ``fp32(s (q - z))`` of its own code under ``q`` = (s, z, type): the
    kernel's float form recovers the code and computes that product, the numpy layer adds the value
    (a QDQ bias constant onnxruntime adds in fp32: its DequantizeLinear's output)."""
    from .int8 import quantize
    s, z, dt = q
    recon = (F32(s) * (quantize(values, s, z, dt) - z).astype(F32)).astype(F32)
    return bool(np.array_equal(recon.view(np.uint32), np.asarray(values, F32).view(np.uint32)))


def _broadcast_pair(xa: np.ndarray, xb: Optional[np.ndarray]):
    """``xa`` and the float ``xb`` broadcast to its shape along its leading axes (a C-contiguous
    copy), as the layer takes them: each element's sum is the same broadcast or not; None when
    they do not fit."""
    if xb is None or xb.ndim > xa.ndim or 0 in xa.shape:
        return None
    try:
        if np.broadcast_shapes(xa.shape, xb.shape) != xa.shape:
            return None
    except ValueError:
        return None
    return xa, np.ascontiguousarray(np.broadcast_to(np.asarray(xb, F32), xa.shape))


def fake_quant_into(a: np.ndarray, out: np.ndarray, q) -> None:
    """``out[...] = int8.fake_quant(a, *q)`` (a region input quantized on the host), natively when built."""
    if lib() is None or out.dtype != F32 or not out.flags.c_contiguous or a.shape != out.shape:
        out[...] = numpy_fake_quant(a, *q)
        return
    if not (a.dtype == F32 and a.flags.c_contiguous):
        a = np.ascontiguousarray(a, F32)
    lib().i8_fake_quant(a.ctypes.data, out.ctypes.data, a.size, _fq_params(tuple(q))[1], parallel.workers())


def _on() -> bool:
    """The int8 library is wanted and loads (not tried while the native kernels are off, so a
    failure is not remembered for the process): the per-call passes below."""
    return ENABLED and native.on() and lib() is not None


def fake_quant_native(a, q, centered: bool = False) -> Optional[np.ndarray]:
    """``int8.fake_quant(a, *q)`` in one native pass (``centered``: ``int8.centered_codes``, the codes
    less the zero point as float32), or None without the library. numpy's five to seven passes took
    ~65 us on a [50, 384] tensor, and an int8 MiniLM runs ~80 of them."""
    if not _on():
        return None
    a = np.ascontiguousarray(a, F32)
    out = np.empty(a.shape, F32)
    lib().i8_fake_quant(native.address(a), native.address(out), a.size, _fq_params(tuple(q), centered)[1],
                        parallel.workers())
    return out


@functools.lru_cache(maxsize=128)
def _fq_params(q, centered: bool = False) -> Tuple[np.ndarray, int]:
    """i8_fake_quant's [s, 1/s, exact, z, lo, hi, m] of a quantization, m = s (or 1: ``centered``),
    and its address (made once: ~20 us of Python a run)."""
    prm = np.array(qparams(q)[:6] + [1.0 if centered else q[0]], F32)
    prm.flags.writeable = False
    return prm, prm.ctypes.data


Prepared = _Prepared   # int8_in_native.py: the same packing and kernels, identity requantization


def batch_matmul_native(al: np.ndarray, bl: np.ndarray, mult, out_q) -> Optional[np.ndarray]:
    """int8_transformer.Int8BatchMatMul's qlinear result (the dequantized output codes) of the logical
    operands' centered codes ``al`` [..., M, K], ``bl`` [..., K, N] (float32, equal leading axes) in
    ``i8_bmm``, or None (no library, broadcast leading axes: numpy computes it)."""
    m, k, n = al.shape[-2], al.shape[-1], bl.shape[-1]
    if al.shape[:-2] != bl.shape[:-2] or not m * k * n or not _on():
        return None
    s, z, dt = out_q
    lo, hi = QRANGE[dt]
    a = np.ascontiguousarray(al, F32)
    b = np.ascontiguousarray(bl, F32)
    out = np.empty(al.shape[:-1] + (n,), F32)
    prm = np.array([mult, z, lo, hi, s], F32)
    if not lib().i8_bmm(native.address(a), native.address(b), native.address(out), a.size // (m * k), m, k, n,
                        native.address(prm)):
        raise MrvlRuntimeError("the native int8 BatchMatMul ran out of memory")
    return out


def qlinear_mul_native(a: np.ndarray, cb: np.ndarray, in_q, s_b: float, out_q, u8: bool,
                       out: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
    """int8_transformer.qlinear_mul_codes' result (the dequantized output codes) of the float input
    ``a`` and the second operand's centered codes ``cb`` (float32, broadcast onto ``a`` as [N, P, C]
    runs: tensor_ops.npc_dims) in ``i8_qmul``, or None (no library, other shapes: numpy). Written into
    ``out`` when it is a C-contiguous float32 array of a's shape (it may be ``a``: each value is read
    before it is written)."""
    if a.dtype != F32 or not a.flags.c_contiguous or not _on():
        return None
    dims = _broadcast_dims(a.shape, cb.shape)
    if dims is None or a.size == 0:
        return None
    b = np.ascontiguousarray(cb, F32)
    out = _writable_like(out, a)
    lib().i8_qmul(native.address(a), native.address(b), native.address(out), *dims,
                  _qmul_params(tuple(in_q), float(s_b), tuple(out_q), bool(u8))[1], parallel.workers())
    return out


def _writable_like(out: Optional[np.ndarray], a: np.ndarray) -> np.ndarray:
    """``out`` when the kernel can write a's shape into it (C-contiguous float32), else a new array."""
    if out is None or out.dtype != F32 or not out.flags.c_contiguous or out.shape != a.shape:
        return np.empty(a.shape, F32)
    return out


@functools.lru_cache(maxsize=256)
def _broadcast_dims(a_shape, b_shape) -> Optional[Tuple[int, ...]]:
    """npc_dims of b broadcast onto a, flattened (N, P, C, BN, BP, BC), or None; made once per shape
    pair (a QDQ classifier's ~40 small gates: the per-call shape logic was a third of each call)."""
    if np.broadcast_shapes(a_shape, b_shape) != a_shape:
        return None
    dims = npc_dims(a_shape, b_shape)
    return None if dims is None else tuple(dims[0]) + tuple(dims[1])


@functools.lru_cache(maxsize=256)
def _qmul_params(in_q, s_b: float, out_q, u8: bool) -> Tuple[np.ndarray, int]:
    """i8_qmul's parameters of a layer's quantizations and their address, made once."""
    shift = 128 if u8 else 0
    lo, hi = QRANGE["uint8" if u8 else out_q[2]]
    prm = np.array(qparams(in_q)[:6] + [qmul_scale(in_q[0], s_b, out_q[0]), out_q[1] + shift, lo, hi, shift,
                                        out_q[1], out_q[0]], F32)
    prm.flags.writeable = False
    return prm, prm.ctypes.data


FLOAT_BINARY_OPS = {"add": 0, "mul": 1, "div": 2}


def float_binary_fq_native(op: str, a: np.ndarray, b: np.ndarray, out_q,
                           out: Optional[np.ndarray] = None) -> Optional[Tuple[np.ndarray, bool]]:
    """int8_transformer.int8_out_binary's step without input codes or activation: (fake_quant(fp32(a op
    b), *out_q), every a op b finite), ``b`` broadcast onto ``a`` as [N, P, C] runs (tensor_ops.npc_dims),
    in ``i8_float_binary_fq``; or None (no library, other shapes: numpy). Written into ``out`` when it
    is a C-contiguous float32 array of a's shape (the static plan's output buffer; it may be ``a``
    itself: each value is read before it is written). An S8 squeeze-excite gate's Mul of [1, 160,
    160, 96] took 7 ms in numpy's broadcast multiply, finiteness test and quantization, 0.6 ms here."""
    if a.dtype != F32 or not a.flags.c_contiguous or not _on() or op not in FLOAT_BINARY_OPS:
        return None
    b = np.asarray(b)
    dims = _broadcast_dims(a.shape, b.shape) if b.dtype == F32 else None
    if dims is None or a.size == 0:
        return None
    b = np.ascontiguousarray(b)
    out = _writable_like(out, a)
    ok = lib().i8_float_binary_fq(native.address(a), native.address(b), native.address(out), *dims,
                                  _fq_params(tuple(out_q))[1], FLOAT_BINARY_OPS[op], parallel.workers())
    return out, bool(ok)


def softmax_native(x: np.ndarray, table: np.ndarray, in_q, y_scale, out_q) -> Optional[np.ndarray]:
    """int8_transformer.Int8Softmax's qlinear result over the last axis of float32 ``x`` (its input
    codes quantized here) in ``i8_softmax``, or None (no library, another layout: numpy)."""
    if x.dtype != F32 or not x.flags.c_contiguous or x.ndim < 1 or not _on():
        return None
    d = x.shape[-1]
    if d == 0:
        return None
    lo_x, hi_x = QRANGE[in_q[2]]
    lo_y, hi_y = QRANGE[out_q[2]]
    prm = np.array([in_q[0], in_q[1], lo_x, hi_x, y_scale, out_q[1], lo_y, hi_y, out_q[0]], F32)
    tab = np.ascontiguousarray(table, F32)
    out = np.empty(x.shape, F32)
    if not lib().i8_softmax(native.address(x), native.address(out), x.size // d, d, native.address(tab),
                            native.address(prm)):
        raise MrvlRuntimeError("the native int8 Softmax ran out of memory")
    return out
