"""int8-in / fp16-out Conv2D and FC (``precision: "int8_in"``, docs/simulator.md "int8-in layers").

1. the input quantized as ONNX QuantizeLinear (MLAS): ``q = sat(rne(x / s_x) + z_x)``, x / s_x in fp32;
2. ``acc[o] = sum (q_x - z_x) * (q_w[o] - z_w[o])`` exact (int32 on the MAC array, ``z_w`` the optional
   weight zero point subtracted as ``z_w * rowsum``: int8.py; padding holds z_x, real 0); with
   ``int8_sums: "u8s8"`` (onnxruntime sums it in its U8S8 QGemm / MatMulIntegerToFloat) less the
   16-bit pair clamp's deficit where this machine's onnxruntime clamps (mlas_u8s8.py);
3. epilogue in fp32: ``y = fp32(fp32(acc) * m[o]) + b[o]``, ``m[o] = fp32(s_x * s_w[o])``, ``b`` the
   float32 bias (the dequantized value onnxruntime adds), then the activation in float;
3a. ``post_ops`` / ``post_values``: mul / add / sub / div after the activation, each in fp32, by a scalar
   or (``post_sizes``) one value per output channel (legalize qdq_channel_input's per-channel Q);
4a. with ``outq_*`` (a Q -> DQ the layer absorbed, fuse/qdq_int8_in.py): ``(sat(rne(y / s) + z) - z) * s``
   in fp32, as onnxruntime's QuantizeLinear / DequantizeLinear compute it;
4. the output stored fp16 (round to nearest even; overflow -> inf, reported as not finite).

The integer sum runs on the native VNNI kernels when built (``int8_in_native.py``: identity
requantization, bit-identical), else on numpy's exact float64 GEMM; the epilogue is this module's.
"""
from __future__ import annotations

from typing import Mapping, Optional, Tuple

import numpy as np

from .activations import make_activation
from .fp16 import round_fp16_
from .int8 import F32, Int8Conv2D, Int8FC, fake_quant

_CODES_OUT = {"out_scale": 1.0, "out_zero_point": 0, "out_dtype": "int8"}   # unused by this layer's finish


class _Int8In:
    """The epilogue shared by the int8-in Conv2D and FC (the integer part is ``int8.py``'s)."""

    def _setup(self, bias, activation: str, activation_params: Optional[Mapping], slope, params: Mapping) -> None:
        o = self.kernel.shape[1]
        b = np.zeros(o, F32) if bias is None else np.asarray(bias)
        if b.dtype != F32 or b.size != o:
            raise ValueError(f"an int8-in layer's bias must be float32 with {o} values, got {b.dtype} x {b.size}")
        if not np.isfinite(b).all():
            raise ValueError("an int8-in layer's bias is not finite")
        self.fbias = b.reshape(-1).astype(F32)
        self.mult = (F32(self.in_q[0]) * self.weight_scales).astype(F32)
        self.act = make_activation(activation, activation_params, slope)
        self.bias = np.zeros(o, np.int64)   # the integer part adds no bias
        self.outq = None
        self.post = _post(params, o)
        if "outq_dtype" in params:   # step 4a: QuantizeLinear -> DequantizeLinear of the fp32 result
            p = params
            self.outq = (float(p["outq_scale"]), int(p["outq_zero_point"]), str(p["outq_dtype"]))
            if self.outq[2] not in ("int8", "uint8") or not (np.isfinite(self.outq[0]) and self.outq[0] > 0):
                raise ValueError(f"output quantization {self.outq} (a positive scale, int8 or uint8)")

    def finish(self, acc: np.ndarray) -> Tuple[np.ndarray, bool]:
        """acc [..., O] (exact integers in float64) -> fp16-valued float32 output, finite flag."""
        with np.errstate(over="ignore", invalid="ignore"):
            y = ((acc.astype(F32) * self.mult).astype(F32) + self.fbias).astype(F32)
            if self.act is not None:
                y = np.asarray(self.act(y), F32)
            for op, v in self.post:   # step 3a: scalar / per-channel ops after the activation, fp32, in order
                y = {"mul": np.multiply, "add": np.add, "sub": np.subtract, "div": np.divide}[op](y, v).astype(F32)
        if self.outq is not None:
            y = fake_quant(y, *self.outq)
        y = np.ascontiguousarray(y, F32)
        return y, round_fp16_(y)


def _post(params: Mapping, channels: int) -> list:
    """[(op, fp32 value or [O] values)] of ``post_ops`` / ``post_values`` (``post_sizes``: 1 or O per op)."""
    ops, vals = list(params.get("post_ops") or []), np.asarray(params.get("post_values") or [], F32)
    sizes = [int(n) for n in params.get("post_sizes") or [1] * len(ops)]
    if len(sizes) != len(ops) or any(n not in (1, channels) for n in sizes) or sum(sizes) != vals.size:
        raise ValueError(f"post_ops {ops} with {vals.size} post_values and post_sizes {sizes} "
                         f"(one value per op, or {channels}: one per output channel)")
    at, out = 0, []
    for op, n in zip(ops, sizes):
        out.append((op, F32(vals[at]) if n == 1 else vals[at:at + n].copy()))
        at += n
    return out


def _params(params: Mapping) -> dict:
    return dict(params, **_CODES_OUT)


class Int8InConv2D(_Int8In, Int8Conv2D):
    def __init__(self, kernel, bias, weight_scale, params, strides, padding, dilation, groups,
                 activation="none", activation_params=None, slope=None, weight_zero_point=None):
        Int8Conv2D.__init__(self, kernel, None, weight_scale, _params(params), strides, padding, dilation, groups,
                            weight_zero_point=weight_zero_point)
        self.weight_scales = np.asarray(weight_scale, F32).reshape(-1)
        self._setup(bias, activation, activation_params, slope, params)


class Int8InFC(_Int8In, Int8FC):
    def __init__(self, kernel, bias, weight_scale, params, activation="none", activation_params=None, slope=None,
                 weight_zero_point=None):
        Int8FC.__init__(self, kernel, None, weight_scale, _params(params), "none", None, weight_zero_point)
        self.weight_scales = np.asarray(weight_scale, F32).reshape(-1)
        self._setup(bias, activation, activation_params, slope, params)


def build(kind: str, spec):
    """The prepared ``apply`` of an int8-in Conv2D / FC layer spec (sim/layers.py LayerSpec)."""
    act = spec.activation()
    args = (spec.weight("kernel", required=True), spec.weight("bias"), spec.weight("weight_scale", required=True),
            spec.params)
    acts = dict(activation=act["activation"], activation_params=act["activation_params"], slope=act["slope"],
                weight_zero_point=spec.weight("weight_zero_point"))
    try:
        if kind == "Conv2D":
            layer = Int8InConv2D(*args, strides=spec.param("strides", [1, 1], length=2),
                                 padding=spec.param("padding", [0, 0, 0, 0], length=4),
                                 dilation=spec.param("dilation", [1, 1], length=2),
                                 groups=int(spec.param("groups", 1)), **acts)
        else:
            layer = Int8InFC(*args, **acts)
    except (ValueError, KeyError, TypeError) as exc:
        raise spec.error(f"int8-in layer: {exc}") from None
    if spec.params.get("int8_sums") == "u8s8":   # onnxruntime's U8S8 kernel (QGemm, MatMulIntegerToFloat)
        from .mlas_u8s8 import saturates
        layer.u8s8_sat = saturates()
        if layer.u8s8_sat:
            return layer.apply
    from .int8_in_native import prepare     # the VNNI integer kernels (same results), when built
    return prepare(layer) or layer.apply
