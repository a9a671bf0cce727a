"""int8 layers of QDQ transformers (docs/simulator.md "int8 layers").

``Requantize``: a QuantizeLinear -> DequantizeLinear pair of a QDQ model inside a region. ``q = sat(rne(x / s) + z)`` with x / s in
float32 (MLAS QuantizeLinear, ``int8.quantize``), the output held as its dequantized value
``(q - z) * s`` (an int8 tensor: the codes are stored, so the next int8 layer reads them exactly).

int8 ``BatchMatMul`` (onnxruntime's QLinearMatMul): the codes of both operands (``in_*``, ``in2_*``),
``acc = sum (q_a - z_a)(q_b - z_b)`` exact, ``q_y = sat(rne(fp32(acc) * fp32(fp32(s_a * s_b) / s_y)) + z_y)``
(MLAS's requantization), output ``(q_y - z_y) * s_y``.
"""
from __future__ import annotations

from typing import Mapping, Tuple

import numpy as np

from .int8 import ACC_LIMIT, NATIVE_MIN, QRANGE, centered_codes, fake_quant, quantize
from .int8_native import batch_matmul_native, float_binary_fq_native, qlinear_mul_native, softmax_native
from .matmul import BatchMatMul
from . import ort_reduce

F32 = np.float32
F64 = np.float64


def _q(p: Mapping, side: str):
    q = (float(p[f"{side}_scale"]), int(p[f"{side}_zero_point"]), str(p[f"{side}_dtype"]))
    if q[2] not in QRANGE or not q[0] > 0:
        raise ValueError(f"{side} quantization {q[2]!r} with scale {q[0]} (int8 or uint8, positive scale)")
    return q


def build_requantize(spec, n_inputs: int):
    """The prepared closure of a Requantize layer spec (sim/layers.py)."""
    if n_inputs != 1:
        raise spec.error(f"takes 1 input, the program gives {n_inputs}")
    p: Mapping = spec.params
    try:
        if p.get("precision") != "int8":
            raise ValueError("precision must be int8")
        s, z, dt = float(p["out_scale"]), int(p["out_zero_point"]), str(p["out_dtype"])
        if (float(p["in_scale"]), int(p["in_zero_point"]), str(p["in_dtype"])) != (s, z, dt):
            raise ValueError("in_* and out_* quantization differ (a Requantize keeps one)")
        if dt not in QRANGE or not s > 0:
            raise ValueError(f"quantization {dt!r} with scale {s} (int8 or uint8, positive scale)")
    except (ValueError, KeyError, TypeError) as exc:
        raise spec.error(f"int8 layer: {exc}") from None
    return lambda x: (fake_quant(x, s, z, dt), True)


class Int8BatchMatMul(BatchMatMul):
    """The stored-order handling of BatchMatMul (perms, transpose_b) on integer codes."""

    def __init__(self, params: Mapping, transpose_b: bool, alpha: float, perms: Mapping):
        super().__init__(transpose_b, alpha, **perms)
        if alpha != 1.0:
            raise ValueError(f"alpha {alpha} on an int8 BatchMatMul (its scale is the requantization)")
        self.a, self.b, self.y = _q(params, "in"), _q(params, "in2"), _q(params, "out")
        self.mult = F32(F32(F32(self.a[0]) * F32(self.b[0])) / F32(self.y[0]))
        self.float_path = str(params.get("requant", "qlinear")) == "float"
        if str(params.get("requant", "qlinear")) not in ("qlinear", "float"):
            raise ValueError(f"requant {params.get('requant')!r} of an int8 BatchMatMul (qlinear or float)")

    def _float_sums(self, al: np.ndarray, bl: np.ndarray) -> np.ndarray:
        """onnxruntime's float MatMul on the dequantized operands: per matrix MLAS's SGEMM chains
        (int8_float_conv.fma_chain, K blocks of ``mlas_stride_k(N, K)``)."""
        from .int8_float_conv import fma_chain, mlas_stride_k
        da = (al.astype(F32) * F32(self.a[0])).astype(F32)   # (q - z) s, as DequantizeLinear
        db = (bl.astype(F32) * F32(self.b[0])).astype(F32)
        k, n = db.shape[-2:]
        return fma_chain(da, db, mlas_stride_k(n, k))   # every matrix of the batch at once

    def apply(self, a: np.ndarray, b: np.ndarray):
        shape = self.output_shape(a.shape, b.shape)
        ca = centered_codes(a, *self.a)
        cb = centered_codes(b, *self.b)
        al = np.transpose(ca, [list(self.a_perm).index(i) for i in range(a.ndim)]) if self.a_perm else ca
        pb = self._b_perm(b.ndim)
        bl = np.transpose(cb, [list(pb).index(i) for i in range(b.ndim)]) if pb else cb
        if al.shape[-1] * 255 * 255 >= ACC_LIMIT:
            raise ValueError(f"K={al.shape[-1]} products could overflow the int32 accumulator")
        y = None if self.float_path or np.size(al) + np.size(bl) < NATIVE_MIN else \
            batch_matmul_native(al, bl, self.mult, self.y)
        if y is None:
            y = self.numpy_codes(al, bl)
        if self.out_perm:
            y = np.transpose(y, self.out_perm)
        return np.ascontiguousarray(y).reshape(shape), True

    def numpy_codes(self, al: np.ndarray, bl: np.ndarray) -> np.ndarray:
        """The dequantized output codes of the logical operands' centered codes, in numpy
        (``int8_native.batch_matmul_native`` gives the same bits for the qlinear form)."""
        s, z, dt = self.y
        lo, hi = QRANGE[dt]
        al, bl = al.astype(np.float64), bl.astype(np.float64)
        if self.float_path:
            q = np.clip(np.rint((self._float_sums(al, bl) / F32(s)).astype(F32)) + z, lo, hi)
        else:
            acc = np.matmul(al, bl)                       # exact integers in float64
            q = np.clip(np.rint(acc.astype(F32) * self.mult) + z, lo, hi)
        return ((q - z).astype(F32) * F32(s)).astype(F32)


def build_int8_batch_matmul(spec, transpose_b: int, alpha: float, perms: Mapping):
    try:
        return Int8BatchMatMul(spec.params, bool(transpose_b), alpha, perms).apply
    except (ValueError, KeyError, TypeError) as exc:
        raise spec.error(f"int8 layer: {exc}") from None


class Int8Softmax:
    """onnxruntime's QLinearSoftmax (com.microsoft, opset-13 form) over ``axis``: a table
    ``E[k] = fp32(exp((k - 255 + b) * s_x))``, k = 255 + q - max(q) over the row (b = max(0,
    ln(FLT_MAX / D) - 5) / s_x keeps the fp32 sum finite; the log taken in fp32), ``sum`` of the
    row's E in fp32 in order, ``q_y = sat(rne(E * floor(1 / s_y) / sum) + z_y)`` with the quotient
    in float64 (as measured: rounding it to fp32 first moved a code at an exact fp32 tie, 2 in
    10^7). ``requant`` "float" (a group onnxruntime leaves unfused): its fp32 Softmax of the
    dequantized codes as MLAS computes it (``mlas_softmax.py``, bit for bit), then QuantizeLinear."""

    def __init__(self, params: Mapping, axis: int, mask=None):
        self.x, self.y = _q(params, "in"), _q(params, "out")
        # an fp32 additive mask (fuse/qdq_masked_softmax.py): Softmax(DQ(c) + mask), requant float only
        self.mask = None if mask is None else np.asarray(mask, F32)
        if not (np.isfinite(self.x[0]) and np.isfinite(self.y[0])):
            # onnxruntime's table of an infinite s_x is NaN at 255 and 0 below: a build-dependent
            # cast of NaN (legalize's qdq_infinite_softmax rewrites the form it can reproduce)
            raise ValueError(f"an infinite scale (in {self.x[0]}, out {self.y[0]})")
        self.requant = str(params.get("requant", "qlinear"))
        if self.requant not in ("qlinear", "float"):
            raise ValueError(f"requant {self.requant!r} (qlinear or float)")
        if self.x[2] != self.y[2] and self.requant != "float":
            raise ValueError("an int8 Softmax with input and output of different types")
        if self.mask is not None and self.requant != "float":
            raise ValueError("an int8 Softmax with a mask computes in float (requant float)")
        self.axis = axis
        self.y_scale = F32(np.floor(F32(1.0) / F32(self.y[0])))
        self._tables = {}

    def table(self, d: int) -> np.ndarray:
        if d not in self._tables:
            sx = np.float64(F32(self.x[0]))
            # log of a float: onnxruntime's log(float) overload, in fp32 (its fp64 log moved a code in 10^6)
            shift = max(0.0, float(np.log(F32(F32(np.finfo(F32).max) / F32(d)))) - 5.0) / sx
            self._tables[d] = np.exp((np.arange(256, dtype=np.float64) - 255 + shift) * sx).astype(F32)
        return self._tables[d]

    def apply(self, x: np.ndarray):
        if not -x.ndim <= self.axis < x.ndim:
            raise ValueError(f"axis {self.axis} does not fit an input of shape {list(x.shape)}")
        if self.requant == "qlinear" and self.axis in (-1, x.ndim - 1) and x.size >= NATIVE_MIN:
            y = softmax_native(x, self.table(x.shape[-1]), self.x, self.y_scale, self.y)
            if y is not None:
                return y, True
        c = np.moveaxis(quantize(x, *self.x).astype(np.int64), self.axis, -1)
        if self.requant == "float":   # MLAS's fp32 Softmax of the dequantized codes, then Q
            from .mlas_softmax import softmax_last_axis
            v = ((c - self.x[1]).astype(F32) * F32(self.x[0])).astype(F32)
            if self.mask is not None:   # onnxruntime's float Add of the mask between the DQ and the Softmax
                if self.mask.size != x.size:
                    raise ValueError(f"a mask of {self.mask.size} values for an input of shape {list(x.shape)}")
                with np.errstate(over="ignore", invalid="ignore"):
                    v = (v + np.moveaxis(self.mask.reshape(x.shape), self.axis, -1)).astype(F32)
            y = softmax_last_axis(v)
            return np.ascontiguousarray(np.moveaxis(fake_quant(y, *self.y), -1, self.axis)), True
        e = self.table(c.shape[-1])[255 + c - c.max(axis=-1, keepdims=True)]
        total = np.cumsum(e, axis=-1, dtype=F32)[..., -1:]       # in order, as the kernel sums
        s, z, dt = self.y
        lo, hi = QRANGE[dt]
        # the quotient in float64 (e * floor(1 / s_y) exact there), rounded half to even
        q = np.clip(np.rint(e.astype(np.float64) * np.float64(self.y_scale) / total.astype(np.float64)) + z, lo, hi)
        y = ((q - z).astype(F32) * F32(s)).astype(F32)
        return np.ascontiguousarray(np.moveaxis(y, -1, self.axis)), True


def build_int8_softmax(spec, axis: int):
    try:
        return Int8Softmax(spec.params, axis, spec.weight("mask")).apply
    except (ValueError, KeyError, TypeError) as exc:
        raise spec.error(f"int8 layer: {exc}") from None


def int8_out_quant(spec, side: str = "out"):
    """(scale, zero point, type) of a float layer that writes int8 codes (precision "int8_out":
    its fp32 result is quantized instead of rounded to fp16), or None; ``side`` "in": the
    quantization of the codes it reads (None: it reads fp16 values)."""
    p: Mapping = spec.params
    if p.get("precision") != "int8_out" or f"{side}_dtype" not in p:
        return None
    try:
        return _q(p, side)
    except (ValueError, KeyError, TypeError) as exc:
        raise spec.error(f"int8_out layer: {exc}") from None


def int8_out_binary(op: str, operand, activation: Mapping, out_q, in_q=None, qlinear=None):
    """A float Sum2D / Mul2D (its constant operand fp32, fp32 math, its activation in fp32) whose
    result is quantized to ``out_q`` (no fp16 rounding in between; ``out_q`` None: the fp32 result
    itself, an fp32 chain's layer). ``qlinear``: (requant, in2_q) of a Mul2D that onnxruntime runs
    as its QLinearMul (``qlinear_mul_codes``)."""
    from .activations import make_activation
    ufunc = {"add": np.add, "mul": np.multiply, "div": np.divide}[op]   # div: IEEE, correctly rounded
    const = None if operand is None else np.asarray(operand, F32)
    if qlinear is not None:
        if op != "mul" or in_q is None or qlinear[1] is None or activation.get("activation", "none") != "none":
            raise ValueError("requant qlinear: a Mul2D of int8 codes (in_*) and a second input's or a constant's "
                             "codes (in2_*), no activation")
        return qlinear_mul_codes(const, in_q, qlinear[1], out_q, qlinear[0] == "qlinear_u8")
    act = make_activation(activation.get("activation", "none"), activation.get("activation_params"),
                          activation.get("slope"))

    def run(a: np.ndarray, b=None, out=None):
        other = b if b is not None else const
        if other is None:
            raise ValueError(f"{op} needs a second input or a constant operand")
        if in_q is None and act is None and out_q is not None and np.size(a) >= NATIVE_MIN:
            done = float_binary_fq_native(op, a, other, out_q, out)
            if done is not None:
                return done
        if in_q is not None:
            a = fake_quant(a, *in_q)   # the codes it reads (exact when a already holds them)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            y = np.ascontiguousarray(ufunc(a, other, dtype=F32))
            if act is not None:
                y = act(y)
            ok = bool(np.isfinite(y).all())
        return (y if out_q is None else fake_quant(y, *out_q)), ok
    run.writes_into = True      # the static plan hands it the output's buffer (the native step writes it)
    return run


def qlinear_mul_codes(const, in_q, const_q, out_q, u8: bool):
    """A Mul2D as onnxruntime's QLinearMul (sim/int8_eltwise.qlinear_mul) of the codes it reads
    (``in_q``) and the codes of its second input or dequantized constant (``const_q``), giving
    ``out_q`` codes, dequantized. ``u8``: int8 codes that onnxruntime's S8 -> U8 rewrite turned to
    uint8 (codes and zero points + 128): the kernel runs on those, its result shifted back."""
    from .int8_eltwise import qlinear_mul_centered
    shift = 128 if u8 else 0
    dtype = "uint8" if u8 else out_q[2]
    # the constant's codes less their zero point (not clamped: as onnxruntime's initializer codes)
    fixed = None if const is None else np.rint(np.asarray(const, F64) / F64(F32(const_q[0]))).astype(F32)

    def run(a: np.ndarray, b=None, out=None):
        if (b is None) == (fixed is None):
            raise ValueError("requant qlinear: a Mul2D of two inputs or of an input and a constant")
        cb = fixed if b is None else centered_codes(b, *const_q)   # the shift cancels in q - z
        if np.size(a) >= NATIVE_MIN:
            y = qlinear_mul_native(a, cb, in_q, const_q[0], out_q, u8, out)
            if y is not None:
                return y, True
        qc = qlinear_mul_centered(centered_codes(a, *in_q), cb, in_q[0], const_q[0], (out_q[0], out_q[1] + shift),
                                  dtype) - shift
        y = np.ascontiguousarray(((qc - out_q[1]).astype(F32) * F32(out_q[0])).astype(F32))
        return y, True
    run.writes_into = True      # the static plan hands it the output's buffer (the native step writes it)
    return run


def layernorm_inner(x: np.ndarray, axis: int, eps: float, gamma: np.ndarray, beta, points,
                    mean_strided: bool = False, mean_muls=None) -> Tuple[np.ndarray, bool]:
    """A LayerNorm with interior quantization points (a QDQ export's decomposed layer norm, as
    onnxruntime runs it in fp32): m = mean(x) -> DQ(Q(.)) at "mean"; d = x - m -> at "diff"; d * d ->
    at "square"; v = mean(.) -> at "var"; + eps -> at "vareps"; sqrt -> at "std"; n = d / . -> at
    "norm"; * gamma -> at "scaled"; + beta. ``points``: eight (scale, zero point, type) or None in
    that order, or four (var, vareps, norm, scaled). Both means are onnxruntime's ReduceMean over the
    last axis (``ort_reduce``); ``mean_strided``: the first over a strided axis (its in-order sum; the
    centering ``center_before_transpose`` moved back after a Transpose); ``mean_muls``: [k_mean, k_var],
    each mean times its constant (an fp32 product) before its point. The fp32 result, unrounded."""
    if len(points) == 4:
        points = [None, None, None, points[0], points[1], None, points[2], points[3]]

    def fq(v, k):
        return v if points[k] is None else fake_quant(v, *points[k])
    shape = (-1,) + (1,) * (-axis - 1)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x = np.asarray(x, F32)
        km, kv = (F32(1), F32(1)) if mean_muls is None else (F32(k) for k in mean_muls)
        m = (ort_reduce.mean(x, axis, strided=mean_strided) * km).astype(F32)
        d = fq((x - fq(m, 0)).astype(F32), 1)
        v = fq((ort_reduce.mean(fq((d * d).astype(F32), 2), axis) * kv).astype(F32), 3)
        ve = fq((v + F32(eps)).astype(F32), 4)
        y = fq((d / fq(np.sqrt(ve).astype(F32), 5)).astype(F32), 6)
        y = fq((y * np.asarray(gamma, F32).reshape(shape)).astype(F32), 7)
        if beta is not None:
            y = (y + np.asarray(beta, F32).reshape(shape)).astype(F32)
    return y, bool(np.isfinite(y).all())


def rmsnorm_inner(x: np.ndarray, axis: int, eps: float, gamma: np.ndarray, beta, points) -> Tuple[np.ndarray, bool]:
    """An RMSNorm with its interior quantization points (fuse/qdq_layernorm.py; onnxruntime runs it
    in fp32): s = x * x -> DQ(Q(.)) at "square"; v = mean(s) -> at "var"; + eps -> at "vareps";
    r = 1 / sqrt(.) -> at "inv" and y = x * r, or y = x / sqrt(.) when "inv" has no pair; y -> at
    "norm"; * gamma; + beta. ``points``: five (scale, zero point, type) or None. The fp32 result, unrounded."""
    def fq(v, k):
        return v if points[k] is None else fake_quant(v, *points[k])
    shape = (-1,) + (1,) * (-axis - 1) if axis < 0 else (-1,) + (1,) * (np.ndim(x) - axis - 1)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x = np.asarray(x, F32)
        v = fq(np.mean(fq((x * x).astype(F32), 0), axis=axis, keepdims=True, dtype=F32), 1)
        sd = np.sqrt(fq((v + F32(eps)).astype(F32), 2)).astype(F32)
        y = (x * fq((F32(1) / sd).astype(F32), 3)) if points[3] is not None else x / sd
        y = fq(y.astype(F32), 4)
        y = (y * np.asarray(gamma, F32).reshape(shape)).astype(F32)
        if beta is not None:
            y = (y + np.asarray(beta, F32).reshape(shape)).astype(F32)
    return y, bool(np.isfinite(y).all())


AFFINE_FORMS = ("keras3", "tf")


def affine_inner(x: np.ndarray, axis: int, eps: float, gamma: np.ndarray, beta, points, form: str) -> Tuple[np.ndarray, bool]:
    """A layer norm written as ``x * inv + c`` (fuse/qdq_norm_affine.py, tf2onnx's Keras forms) with
    its interior points (mean, negmean, diff, square, var, vareps, rstd, inv, xinv, minv, res), as
    onnxruntime runs it in fp32: m = mean(x); v = mean((x - m)^2) + eps; inv = 1 / sqrt(v) * gamma;
    "keras3": c = -m * inv [+ beta]; "tf": c = beta - m * inv (-(m * inv) without beta); y = x * inv + c."""
    def fq(v, k):
        return np.asarray(v, F32) if points[k] is None else fake_quant(np.asarray(v, F32), *points[k])
    shape = (-1,) + (1,) * (-axis - 1)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x = np.asarray(x, F32)
        m = fq(np.mean(x, axis=axis, keepdims=True, dtype=F32), 0)
        d = fq(x - m, 2)
        v = fq(np.mean(fq(d * d, 3), axis=axis, keepdims=True, dtype=F32), 4)
        r = fq(F32(1) / np.sqrt(fq(v + F32(eps), 5)), 6)
        inv = fq(r * np.asarray(gamma, F32).reshape(shape), 7)
        xa = fq(x * inv, 8)
        b = None if beta is None else np.asarray(beta, F32).reshape(shape)
        if form == "keras3":
            c = fq(fq(-m, 1) * inv, 9)
            c = c if b is None else fq(c + b, 10)
        else:
            mb = fq(m * inv, 9)
            c = fq(-mb if b is None else b - mb, 10)
        y = (xa + c).astype(F32)
    return y, bool(np.isfinite(y).all())


def inner_points(spec, count=4):
    """The ``count`` (a number or a tuple of the numbers allowed) interior quantization points of a
    LayerNorm spec (None each: no pair there; 4 or 8 for a LayerNorm: var, vareps, norm, scaled or
    mean, diff, square, var, vareps, std, norm, scaled; 5 for an RMSNorm: square, var, vareps, inv,
    norm), or None."""
    p: Mapping = spec.params
    if not p.get("inner_scales"):
        return None
    try:
        out = []
        for s, z, t in zip(p["inner_scales"], p["inner_zero_points"], p["inner_types"]):
            out.append(None if float(s) == 0 else _q({"x_scale": s, "x_zero_point": z, "x_dtype": t}, "x"))
        if len(out) not in (count if isinstance(count, tuple) else (count,)):
            raise ValueError(f"{len(out)} interior points, {count} expected")
        return out
    except (ValueError, KeyError, TypeError) as exc:
        raise spec.error(f"LayerNorm interior quantization: {exc}") from None
