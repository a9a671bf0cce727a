"""int8 layers: Conv2D and FC with integer semantics (docs/simulator.md "int8 layers").

An int8 tensor is held as its dequantized float32 value ``(q - z) * s``; a reading int8 layer
recovers ``q`` exactly (``|q - z| <= 255``). Per layer:

1. quantize the input as ONNX QuantizeLinear on onnxruntime's CPU (MLAS): ``q = sat(rne(x / s_x) + z_x)``,
   x / s_x in float32;
2. ``acc[o] = sum (q_x - z_x) * (q_w[o] - z_w[o]) + bias_q[o]``, exact integers (``z_w`` the
   optional per-channel weight zero point ``weight_zero_point``, else 0; the MAC array sums
   ``(q_x - z_x) * q_w`` and subtracts ``z_w[o] * rowsum(q_x - z_x)``, docs/fusion.md), then the
   int32 accumulator's value: modulo 2**32 (two's complement adders; onnxruntime's MLAS kernels wrap
   the same way, e.g. PP-OCR's SE convs whose quantized bias sits at the int32 limit; the layer is
   refused only when K * 255 * (128 + max|z_w|) >= 2**31, the products alone); padding holds z_x
   (real 0, nothing in the row sum either);
3. requantize as MLAS does (QLinearConv / QGemm): ``m[o] = fp32(fp32(s_x * s_w[o]) / s_y)``,
   ``q_y = sat(rne(fp32(acc) * m[o]) + z_y)``, rne = round half to even, fp32 products;
4. relu / clamp as clamps of q_y in the quantized domain (``max(q_y, z_y)``, ``[Q(lo), Q(hi)]``);
5. the output is ``(q_y - z_y) * s_y`` (float32).
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence, Tuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .int8_eltwise import qlinear_add

F32 = np.float32
QRANGE = {"int8": (-128, 127), "uint8": (0, 255)}
IN_ACTIVATIONS = ("relu", "hard_sigmoid", "hard_swish")   # a float mean's: bit-exact with onnxruntime's fp32 kernels
ACC_LIMIT = 2 ** 31


def wrap_int32(acc: np.ndarray) -> np.ndarray:
    """The int32 accumulator's value of exact integer sums: two's complement, modulo 2^32 (the MAC
    array's adders; MLAS's vpdpbusd / vpaddd, so onnxruntime's QLinearConv / QGemm wrap alike)."""
    return ((np.asarray(acc, np.int64) + 2 ** 31) & 0xFFFFFFFF) - 2 ** 31


def quantize(x: np.ndarray, scale: float, zp: int, dtype: str) -> np.ndarray:
    """QuantizeLinear (MLAS): sat(rne(x / scale) + zp) as int32 codes; x / scale in float32."""
    lo, hi = QRANGE[dtype]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        q = np.rint(np.asarray(x, F32) / F32(scale))
        q += F32(zp)               # exact below 2^24 - 255; beyond, the clamp saturates either way
        np.fmax(q, F32(lo), out=q)     # MLAS clamps NaN to the minimum (max(NaN, lo) = lo); -inf too
        np.minimum(q, F32(hi), out=q)
    return q.astype(np.int32)


NATIVE_MIN = 2048      # values from which fake_quant / centered_codes take the native pass (int8_native,
                       # imported in the call: it imports this module)


def fake_quant(x: np.ndarray, scale: float, zp: int, dtype: str) -> np.ndarray:
    """DequantizeLinear(QuantizeLinear(x)): what the host hands an int8 region input (qscale)."""
    if np.size(x) >= NATIVE_MIN:
        from .int8_native import fake_quant_native
        y = fake_quant_native(x, (scale, zp, dtype))
        if y is not None:
            return y
    return numpy_fake_quant(x, scale, zp, dtype)


def numpy_fake_quant(x: np.ndarray, scale: float, zp: int, dtype: str) -> np.ndarray:
    """``fake_quant`` in numpy (the native pass gives the same bits)."""
    return ((quantize(x, scale, zp, dtype) - zp).astype(F32) * F32(scale)).astype(F32)


def centered_codes(x: np.ndarray, scale: float, zp: int, dtype: str) -> np.ndarray:
    """``quantize(x) - zp`` as float32 (exact: |q - z| <= 255)."""
    if np.size(x) >= NATIVE_MIN:
        from .int8_native import fake_quant_native
        y = fake_quant_native(x, (scale, zp, dtype), centered=True)
        if y is not None:
            return y
    return (quantize(x, scale, zp, dtype) - zp).astype(F32)



def activation_clamp(out_q, activation: str, activation_params=None) -> Tuple[int, int]:
    """The output codes an activation leaves, as a clamp in the quantized domain: the type's range,
    relu from the zero point, clip between Q(min) and Q(max) (exact: Q is monotone)."""
    s, z, dt = out_q
    lo, hi = QRANGE[dt]
    if activation == "relu":
        lo = max(lo, z)
    elif activation == "clamp":
        ap = dict(activation_params or {})
        lo = max(lo, int(quantize(np.array([ap["min"]], F32), s, z, dt)[0]))
        hi = min(hi, int(quantize(np.array([ap["max"]], F32), s, z, dt)[0]))
    elif activation != "none":
        raise ValueError(f"activation {activation!r} on an int8 layer (none, relu or clamp)")
    return lo, hi

def weight_zero_points(zp, channels: int) -> Optional[np.ndarray]:
    """The per-output-channel weight zero points as int64 (None when absent or all 0): int32
    values in the int8 range (uint8 weights are stored as ``q - 128`` with ``z - 128``)."""
    if zp is None:
        return None
    z = np.asarray(zp)
    if z.dtype != np.int32 or z.size != channels:
        raise ValueError(f"weight zero points must be int32 with {channels} values, got {z.dtype} x {z.size}")
    z = z.reshape(-1).astype(np.int64)
    if z.min() < -128 or z.max() > 127:
        raise ValueError(f"weight zero points {z.min()}..{z.max()} are outside the int8 range")
    return z if np.any(z) else None


class Int8Layer:
    """The quantization shared by the int8 Conv2D and FC (see the module docstring)."""

    def __init__(self, kernel: np.ndarray, bias, weight_scale, params: Mapping, activation: str,
                 activation_params: Optional[Mapping], weight_zero_point=None):
        if kernel.dtype != np.int8:
            raise ValueError(f"an int8 layer needs an int8 kernel, the binary holds {kernel.dtype}")
        o = kernel.shape[0]
        self.in_q = (float(params["in_scale"]), int(params["in_zero_point"]), str(params["in_dtype"]))
        self.out_q = (float(params["out_scale"]), int(params["out_zero_point"]), str(params["out_dtype"]))
        for dt in (self.in_q[2], self.out_q[2]):
            if dt not in QRANGE:
                raise ValueError(f"quantization type {dt!r} (int8 or uint8)")
        ws = np.asarray(weight_scale, F32).reshape(-1)
        if ws.size != o:
            raise ValueError(f"{ws.size} weight scales for {o} output channels")
        self.bias = np.zeros(o, np.int64) if bias is None else np.asarray(bias).reshape(-1).astype(np.int64)
        if bias is not None and (np.asarray(bias).dtype != np.int32 or self.bias.size != o):
            raise ValueError(f"an int8 layer's bias must be int32 with {o} values")
        self.weight_zp = weight_zero_points(weight_zero_point, o)
        zmax = 0 if self.weight_zp is None else int(np.abs(self.weight_zp).max())
        k = int(np.prod(kernel.shape[1:]))
        if k * 255 * (128 + zmax) >= ACC_LIMIT:   # the products alone (float64 sums stay exact far beyond)
            raise ValueError(f"K={k} products could overflow the int32 accumulator")
        self.mult = ((F32(self.in_q[0]) * ws).astype(F32) / F32(self.out_q[0])).astype(F32)
        self.lo, self.hi = activation_clamp(self.out_q, activation, activation_params)
        codes = kernel.reshape(o, k).astype(np.float64)
        if self.weight_zp is not None:   # q_w - z_w (|.| <= 255): the same exact integer sums as
            codes -= self.weight_zp.reshape(o, 1)   # sum (q_x - z_x) q_w - z_w rowsum(q_x - z_x)
        self.kernel = codes.T.copy()   # [K, O], exact products in float64
        self.u8s8_sat = False   # build(): onnxruntime's U8S8 kernel here clamps pair sums to int16 (mlas_u8s8.py)

    def sums(self, cols: np.ndarray, lo: int = 0, hi: Optional[int] = None) -> np.ndarray:
        """``cols @ kernel[:, lo:hi]`` (exact), less what MLAS's 16-bit pair clamp takes off when ``u8s8_sat``."""
        kernel = self.kernel[:, lo:hi]
        acc = cols @ kernel
        if self.u8s8_sat:
            from .mlas_u8s8 import deficit, raw_zero_point
            zw = None if self.weight_zp is None else self.weight_zp[lo:hi]
            acc = acc + deficit(cols, kernel, raw_zero_point(self.in_q[2], self.in_q[1]), zw)
        return acc

    def codes(self, x: np.ndarray) -> np.ndarray:
        s, z, dt = self.in_q
        return (quantize(x, s, z, dt) - z).astype(np.float64)

    def finish(self, acc: np.ndarray) -> Tuple[np.ndarray, bool]:
        """acc [..., O] (exact integers in float64) -> dequantized output, always finite."""
        acc = wrap_int32(acc.astype(np.int64) + self.bias)
        s, z, _ = self.out_q
        q = np.rint(acc.astype(F32) * self.mult) + z
        q = np.clip(q, self.lo, self.hi)
        return ((q - z).astype(F32) * F32(s)).astype(F32), True


class Int8Conv2D(Int8Layer):
    def __init__(self, kernel, bias, weight_scale, params, strides, padding, dilation, groups,
                 activation="none", activation_params=None, weight_zero_point=None):
        super().__init__(kernel, bias, weight_scale, params, activation, activation_params, weight_zero_point)
        self.o, self.kh, self.kw, self.ig = kernel.shape
        self.strides, self.padding, self.dilation, self.groups = list(strides), list(padding), list(dilation), int(groups)
        if self.groups < 1 or self.o % self.groups:
            raise ValueError(f"groups={groups} does not divide {self.o} output channels")

    def apply(self, x: np.ndarray) -> Tuple[np.ndarray, bool]:
        n, h, w, c = x.shape
        if c != self.ig * self.groups:
            raise ValueError(f"input has {c} channels, the kernel takes {self.ig} x {self.groups} groups")
        xq = self.codes(x)
        pt, pl, pb, pr = self.padding
        xp = np.pad(xq, ((0, 0), (pt, pb), (pl, pr), (0, 0)))   # zero codes = the zero point (real 0)
        (sh, sw), (dh, dw) = self.strides, self.dilation
        win = sliding_window_view(xp, ((self.kh - 1) * dh + 1, (self.kw - 1) * dw + 1), axis=(1, 2))
        win = win[:, ::sh, ::sw, :, ::dh, ::dw]                 # [N, OH, OW, C, KH, KW]
        oh, ow = win.shape[1], win.shape[2]
        og = self.o // self.groups
        out = np.empty((n, oh, ow, self.o), np.float64)
        for gi in range(self.groups):
            cols = win[:, :, :, gi * self.ig:(gi + 1) * self.ig].transpose(0, 1, 2, 4, 5, 3)
            cols = cols.reshape(n * oh * ow, self.kh * self.kw * self.ig)   # (kh, kw, i) as the OHWI kernel
            out[..., gi * og:(gi + 1) * og] = self.sums(cols, gi * og, (gi + 1) * og).reshape(n, oh, ow, og)
        return self.finish(out)


class Int8FC(Int8Layer):
    def apply(self, x: np.ndarray) -> Tuple[np.ndarray, bool]:
        if x.ndim != 2 or x.shape[1] != self.kernel.shape[0]:
            raise ValueError(f"input of shape {list(x.shape)} does not fit the kernel K={self.kernel.shape[0]}")
        return self.finish(self.sums(self.codes(x)))


def build(kind: str, spec, geometry: Optional[Sequence] = None):
    """The prepared ``apply`` of an int8 Conv2D / FC layer spec (sim/layers.py LayerSpec)."""
    act = spec.activation()
    args = (spec.weight("kernel", required=True), spec.weight("bias"), spec.weight("weight_scale", required=True),
            spec.params)
    zp = dict(weight_zero_point=spec.weight("weight_zero_point"))
    try:
        if kind == "Conv2D":
            geo = dict(strides=spec.param("strides", [1, 1], length=2),
                       padding=spec.param("padding", [0, 0, 0, 0], length=4),
                       dilation=spec.param("dilation", [1, 1], length=2), groups=int(spec.param("groups", 1)),
                       activation=act["activation"], activation_params=act["activation_params"], **zp)
            if spec.params.get("requant") == "float":   # onnxruntime's float Conv (int8_float_conv.py)
                from .int8_float_conv import FloatPathConv2D
                layer = FloatPathConv2D(*args, bias_scale=spec.weight("bias_scale"),
                                        gemm=str(spec.params.get("float_gemm", "conv")), **geo)
            else:
                layer = Int8Conv2D(*args, **geo)
        elif spec.params.get("requant") == "float":   # onnxruntime's float MatMul (int8_float_conv.py)
            from .int8_float_conv import FloatPathFC
            layer = FloatPathFC(*args, activation=act["activation"], activation_params=act["activation_params"],
                                bias_scale=spec.weight("bias_scale"), **zp)
        else:
            layer = Int8FC(*args, activation=act["activation"], activation_params=act["activation_params"], **zp)
    except (ValueError, KeyError, TypeError) as exc:
        raise spec.error(f"int8 layer: {exc}") from None
    if type(layer) in (Int8Conv2D, Int8FC) and spec.params.get("int8_sums") != "exact" \
            and not (kind == "Conv2D" and layer.ig == 1 and layer.o == layer.groups):
        from .mlas_u8s8 import saturates    # onnxruntime's QLinearConv / QGemm (not its depthwise kernel)
        layer.u8s8_sat = saturates()
    from .int8_native import prepare        # the native kernels (same results, saturated or not), when built
    return prepare(layer) or layer.apply


class Int8Pool:
    """int8 MaxPool2D / GlobalMaxPool2D / GlobalAvgPool2D (docs/simulator.md "int8 layers").

    Max: the window maximum of the input codes, requantized as ``Q_out(DQ_in(max))`` (the codes
    themselves when input and output share scale and zero point, as onnxruntime's int8 MaxPool);
    padding never wins (-inf). Global average (MLAS QLinearGlobalAveragePool):
    ``acc = sum(q_x) - z_x * HW`` (int32), ``q_y = sat(rne(fp32(acc) * fp32(s_x / fp32(s_y * HW))) + z_y)``;
    ``requant`` "float" (a QDQ ReduceMean, which onnxruntime runs in float): the fp32 mean of the
    dequantized values, then QuantizeLinear (onnxruntime's summation order is not followed); with
    ``in_activation`` (relu, hard_sigmoid, hard_swish) the mean of the activated values, the
    activation in fp32 as onnxruntime's kernels compute it; with ``out_mul`` c (requant float) the
    quantized value is ``fp32(mean * c)`` (AMD Quark's ``GlobalAveragePool -> Mul(c) -> Q``)."""

    def __init__(self, kind: str, params: Mapping, geometry: Optional[Mapping] = None):
        self.kind, self.geometry = kind, dict(geometry or {})
        self.requant = str(params.get("requant", "qlinear"))
        if self.requant not in ("qlinear", "float"):
            raise ValueError(f"requant {self.requant!r} (qlinear or float)")
        self.in_q = (float(params["in_scale"]), int(params["in_zero_point"]), str(params["in_dtype"]))
        self.out_q = (float(params["out_scale"]), int(params["out_zero_point"]), str(params["out_dtype"]))
        for dt in (self.in_q[2], self.out_q[2]):
            if dt not in QRANGE:
                raise ValueError(f"quantization type {dt!r} (int8 or uint8)")
        self.in_activation = None
        self.mean_sum = params.get("mean_sum")
        name = params.get("in_activation")
        if name is not None:
            if kind != "GlobalAvgpool2D" or self.requant != "float" or name not in IN_ACTIVATIONS:
                raise ValueError(f"in_activation {name!r} (an int8 GlobalAvgpool2D with requant float: "
                                 f"{', '.join(IN_ACTIVATIONS)})")
            from .activations import make_activation
            self.in_activation = make_activation(name, params.get("in_activation_params"))
        self.out_mul = None
        if params.get("out_mul") is not None:   # Quark's GlobalAveragePool -> Mul(c) -> Q (fuse/qdq_pool_activation.py)
            if kind != "GlobalAvgpool2D" or self.requant != "float" or not np.isfinite(float(params["out_mul"])):
                raise ValueError(f"out_mul {params['out_mul']!r} (a finite number, of an int8 GlobalAvgpool2D with "
                                 f"requant float)")
            self.out_mul = F32(params["out_mul"])

    def apply(self, x: np.ndarray) -> Tuple[np.ndarray, bool]:
        from .pooling import global_maxpool2d, maxpool2d
        from .tensor_ops import resize_nearest
        s, z, dt = self.in_q
        so, zo, dto = self.out_q
        codes = quantize(x, s, z, dt)
        if self.kind == "Avgpool2D":
            # QLinearAveragePool rounds fp32(y / s_y + z_y): the zero point is added before the
            # rounding, in the uint8 domain (onnxruntime's x86 QDQ rewrite runs int8 activations
            # as uint8 with z + 128; the fp32 sum then rounds like onnxruntime's near ties)
            if self.requant == "float":   # onnxruntime left DQ -> AveragePool -> Q unfused: the fp32
                # mean, then QuantizeLinear rne(y / s_y) + z_y (docs/simulator.md)
                return fake_quant(self._average(codes - z, s), so, zo, dto), True
            shift = 128 if dto == "int8" else 0
            lo, hi = QRANGE[dto]
            t = ((self._average(codes - z, s) / F32(so)).astype(F32) + F32(zo + shift)).astype(F32)
            q = np.clip(np.rint(t) - shift, lo, hi)
            return ((q - zo).astype(F32) * F32(so)).astype(F32), True
        if self.kind == "Resize":
            real = ((codes - z).astype(F32) * F32(s)).astype(F32)
            geo = self.geometry
            if geo.get("mode") == "linear":   # onnxruntime leaves DQ -> Resize -> Q in float: its
                # fp32 bilinear of the dequantized values, then QuantizeLinear
                from .resize_linear import bilinear_4tap
                y = bilinear_4tap(real, geo["sizes"], geo["coordinate_mode"], geo.get("linear_scales"))
                return fake_quant(y, so, zo, dto), True
            return fake_quant(resize_nearest(real, geo["scales"]), so, zo, dto), True
        if self.kind == "GlobalAvgpool2D" and self.requant == "float":
            # onnxruntime's float ReduceMean between DQ and Q: the dequantized
            # values fp32((q - z) s) summed in fp32, divided by H*W, then QuantizeLinear
            real = ((codes - z).astype(F32) * F32(s)).astype(F32)
            if self.in_activation is not None:   # onnxruntime's fp32 activation of the DQ values
                real = self.in_activation(real)
            n_, h_, w_, c_ = real.shape
            if self.mean_sum == "rows":   # onnxruntime's KR path: each channel's H*W values, Eigen row sums
                from .ort_reduce import sum_last
                rows = np.ascontiguousarray(real.transpose(0, 3, 1, 2)).reshape(n_ * c_, h_ * w_)
                total = sum_last(rows).reshape(n_, 1, 1, c_)
            else:                          # its RK path (a strided mean): an in-order fp32 sum
                total = np.sum(real, axis=(1, 2), keepdims=True, dtype=F32)
            mean = (total / F32(h_ * w_)).astype(F32)
            if self.out_mul is not None:   # onnxruntime's fp32 Mul of the mean before the Q
                mean = (mean * self.out_mul).astype(F32)
            return fake_quant(mean, so, zo, dto), True
        if self.kind == "GlobalAvgpool2D":
            n, h, w, c = codes.shape
            acc = codes.astype(np.int64).sum(axis=(1, 2), keepdims=True) - z * h * w
            scale = F32(F32(s) / (F32(so) * F32(h * w)))
            lo, hi = QRANGE[dto]
            q = np.clip(np.rint(acc.astype(F32) * scale) + zo, lo, hi)
            return ((q - zo).astype(F32) * F32(so)).astype(F32), True
        real = ((codes - z).astype(F32) * F32(s)).astype(F32)
        m = maxpool2d(real, **self.geometry) if self.kind == "Maxpool2D" else global_maxpool2d(real)
        return fake_quant(m, so, zo, dto), True

    def _average(self, codes: np.ndarray, s: float) -> np.ndarray:
        """The window mean as onnxruntime's QLinearAveragePool computes it: the dequantized values
        ``fp32(s * (q - z))`` summed in fp32 in window order (rows, then columns; the padding adds
        exact zeros), divided by the count in fp32."""
        from .pooling import pool_geometry, window_counts
        geo = self.geometry
        (kh, kw), (sh, sw), (dh, dw), (t, l, b, r), (oh, ow) = pool_geometry(
            codes, geo["kernel_size"], geo["strides"], geo["padding"], geo.get("dilation", (1, 1)), geo["ceil_mode"])
        n, h, w, c = codes.shape
        ph, pw = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
        xp = np.zeros((n, max(ph, h + t), max(pw, w + l), c), F32)
        xp[:, t:t + h, l:l + w] = (F32(s) * codes.astype(F32)).astype(F32)
        acc = np.zeros((n, oh, ow, c), F32)
        for i in range(kh):
            for j in range(kw):
                acc += xp[:, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
        inc = bool(geo.get("count_include_pad", 0))
        div = np.outer(window_counts(h, oh, kh, sh, t, b, dh, inc), window_counts(w, ow, kw, sw, l, r, dw, inc))
        return (acc / div.astype(F32)[None, :, :, None]).astype(F32)


def build_pool(kind: str, spec, geometry: Optional[Mapping] = None):
    """The prepared ``apply`` of an int8 pool layer spec."""
    try:
        pool = Int8Pool(kind, spec.params, geometry)
    except (ValueError, KeyError, TypeError) as exc:
        raise spec.error(f"int8 layer: {exc}") from None
    from .int8_pool_native import prepare_avgpool, prepare_pool   # the native kernels (same results), when built
    from .int8_table_native import prepare_resize
    return prepare_pool(pool) or prepare_avgpool(pool) or prepare_resize(pool) or pool.apply


class Int8Add:
    """int8 Sum2D as onnxruntime computes it (docs/simulator.md "int8 layers"; ``requant``):
    "qlinear" (the default): MLAS QLinearAdd on the codes (int8_eltwise.py); "qlinear_u8": the same on
    the codes and zero points + 128 as uint8 (onnxruntime's x86 S8 -> U8 rewrite), 128 subtracted
    after; "float" (a group onnxruntime leaves unfused, operands of different types, a constant
    operand without ``in2_*``): ``v = fp32(s_a (q_a - z_a)) + fp32(s_b (q_b - z_b))``,
    ``q_c = sat(rne(v / s_c) + z_c)`` in fp32. A constant operand with ``in2_*`` holds the dequantized
    codes ``fp32((q_b - z_b) s_b)``, from which q_b is recovered. Relu / clamp as clamps of q_c.
    ``subtract`` (a QDQ Sub, float only: onnxruntime has no QLinearSub): ``v = va - vb`` (1) or
    ``vb - va`` (2), b the second tensor or the constant."""

    def __init__(self, params: Mapping, activation: str, activation_params: Optional[Mapping], operand=None):
        self.a = (float(params["in_scale"]), int(params["in_zero_point"]), str(params["in_dtype"]))
        # b: a second int8 tensor (in2_*), or a float32 constant (a dequantized bias) added as it is
        self.operand = None if operand is None else np.asarray(operand, F32)
        coded = "in2_dtype" in params                 # b's quantization (a constant's codes, with operand)
        self.b = (float(params["in2_scale"]), int(params["in2_zero_point"]), str(params["in2_dtype"])) if coded \
            else self.a
        self.c = (float(params["out_scale"]), int(params["out_zero_point"]), str(params["out_dtype"]))
        for dt in (self.a[2], self.b[2], self.c[2]):
            if dt not in QRANGE:
                raise ValueError(f"quantization type {dt!r} (int8 or uint8)")
        self.lo, self.hi = activation_clamp(self.c, activation, activation_params)
        mode = str(params.get("requant", "qlinear"))
        if mode not in ("qlinear", "qlinear_u8", "float"):
            raise ValueError(f"requant {mode!r} of an int8 Sum2D (qlinear, qlinear_u8 or float)")
        one_type = self.a[2] == self.b[2] == self.c[2]
        if mode == "qlinear_u8" and not (one_type and self.a[2] == "int8"):
            raise ValueError("requant qlinear_u8 needs int8 operands and output")
        self.mode = "float" if (operand is not None and not coded) or not one_type else mode
        self.subtract = int(params.get("subtract", 0) or 0)
        if self.subtract not in (0, 1, 2) or (self.subtract and self.mode != "float"):
            raise ValueError(f"subtract {params.get('subtract')!r} of an int8 Sum2D (1 or 2, requant float)")
        if operand is not None and self.mode != "float":   # the constant's codes, recovered exactly
            self.operand_q = quantize(self.operand, *self.b)
        self.shift = 128 if self.mode == "qlinear_u8" else 0   # int8 codes run as uint8 (q + 128)

    def apply(self, xa: np.ndarray, xb: Optional[np.ndarray] = None) -> Tuple[np.ndarray, bool]:
        if self.operand is not None:
            if xb is not None:
                raise ValueError("an int8 Sum2D with a constant operand takes one input")
            vb = self.operand_as(self.operand, xa)
        elif xb is None or (xa.shape != xb.shape and not _broadcasts(xb.shape, xa.shape)):
            raise ValueError(f"int8 add of shapes {list(xa.shape)} and {None if xb is None else list(xb.shape)}")
        s, z, _ = self.c
        if self.mode == "float":
            va = (F32(self.a[0]) * (quantize(xa, *self.a) - self.a[1]).astype(F32)).astype(F32)
            if self.operand is None:
                vb = np.broadcast_to((F32(self.b[0]) * (quantize(xb, *self.b) - self.b[1]).astype(F32)).astype(F32),
                                     xa.shape)
            v = va + vb if not self.subtract else (va - vb if self.subtract == 1 else vb - va)
            q = np.rint((v.astype(F32) / F32(s)).astype(F32)) + z
        else:
            k = self.shift
            a, b, c = ((q[0], q[1] + k) for q in (self.a, self.b, self.c))
            qb = np.broadcast_to(quantize(xb, *self.b), xa.shape) if self.operand is None else self._operand_codes(xa)
            q = qlinear_add(quantize(xa, *self.a) + k, qb + k, a, b, c, "uint8" if k else self.c[2]) - k
        q = np.clip(q, self.lo, self.hi)
        return ((q - z).astype(F32) * F32(s)).astype(F32), True

    def _operand_codes(self, xa: np.ndarray) -> np.ndarray:
        """The constant's codes broadcast to ``xa``'s shape (its trailing axes, as the float operand)."""
        return self.operand_as(self.operand_q, xa)

    @staticmethod
    def operand_as(c: np.ndarray, xa: np.ndarray) -> np.ndarray:
        """The constant ``c`` (values or codes) broadcast to ``xa``'s shape: its trailing axes (a
        read-only view; int8_native tiles the values once per shape)."""
        return np.broadcast_to(c.reshape(c.shape[-xa.ndim:] if c.ndim > xa.ndim else c.shape), xa.shape)


def _broadcasts(b, a) -> bool:
    """Shape ``b`` broadcasts to ``a`` (a second operand along the first's leading axes)."""
    return len(b) <= len(a) and all(db in (1, da) for da, db in zip(reversed(a), reversed(b)))


def build_add(spec, n_inputs: int = 2):
    act = spec.activation()
    try:
        operand = spec.weight("operand", required=True) if n_inputs == 1 else None
        layer = Int8Add(spec.params, act["activation"], act["activation_params"], operand)
    except (ValueError, KeyError, TypeError) as exc:
        raise spec.error(f"int8 layer: {exc}") from None
    from .int8_native import prepare_add    # the native kernel (same results), when built
    native_apply = prepare_add(layer)
    if native_apply is None:
        return layer.apply
    if spec.params.get("broadcast"):        # a second operand broadcast (emit): float tensors in and
        def apply(*xs):                     # out, the operand copied to the first's shape per run
            return native_apply(*xs)        # (no int8_io / bind: the static plan keeps a float step)
        return apply
    return native_apply
