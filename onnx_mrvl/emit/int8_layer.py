"""The int8 fields of a Conv2D / FC node (docs/json-format.md "int8 layers") -> program params
and weights (docs/program.md): quantization of the input and output, per-channel weight scales."""
from __future__ import annotations

import numpy as np

from .json_attrs import NodeAttrs

QRANGE = {"int8": (-128, 127), "uint8": (0, 255)}
ACTIVATIONS = ("none", "relu", "clamp")


def is_int8(a: NodeAttrs) -> bool:
    return a.has("precision") and a.str("precision").lower() == "int8"


def is_int8_in(a: NodeAttrs) -> bool:
    """int8 in, fp16 out (Conv2D / FC): int8 kernel, float32 bias, no output quantization."""
    return a.has("precision") and a.str("precision").lower() == "int8_in"


def side_qparams(a: NodeAttrs, side: str, what: str, params: dict) -> None:
    """Checks ``<side>_dtype`` / ``_scale`` / ``_zero_point`` of ``a`` and copies them into ``params``."""
    dtype = a.str(f"{side}_dtype", "int8")
    if dtype not in QRANGE:
        a.fail(f"{side}_dtype '{dtype}' of {what} is not int8 or uint8")
    scale, zp = a.float(f"{side}_scale"), a.int(f"{side}_zero_point", 0)
    if not (np.isfinite(scale) and scale > 0):
        a.fail(f"{side}_scale {scale} must be positive and finite")
    lo, hi = QRANGE[dtype]
    if not lo <= zp <= hi:
        a.fail(f"{side}_zero_point {zp} is outside the {dtype} range [{lo}, {hi}]")
    params.update({f"{side}_scale": float(np.float32(scale)), f"{side}_zero_point": zp, f"{side}_dtype": dtype})


def int8_params(a: NodeAttrs, ctx, lname: str, channels: int, params: dict, weights: dict,
                has_weights: bool = True) -> None:
    """Checks and copies the quantization fields; the weight scales (Conv2D / FC) become a float32 weight."""
    from .layer_common import vector
    sides = ("in", "out", "in2") if a.has("in2_dtype") else ("in", "out")
    for side in sides:
        side_qparams(a, side, "an int8 layer", params)
    params["precision"] = "int8"
    if not has_weights:
        return
    ws = vector(a, ctx, "weight_scale_const_name", channels, "weight scale")
    if not (np.isfinite(ws).all() and np.all(ws > 0)):
        a.fail("weight scales must be positive and finite")
    weights["weight_scale"] = ctx.weight(a, f"{lname}.weight_scale", ws, "O", fp16=False)
    weight_zero_points(a, ctx, lname, channels, weights)
    if a.has("int8_sums"):   # onnxruntime's S8S8 / U8U8 kernel: exact sums on any CPU (sim/mlas_u8s8.py)
        if a.str("int8_sums") != "exact":
            a.fail(f"int8_sums '{a.str('int8_sums')}' of an int8 Conv2D / FC (exact)")
        params["int8_sums"] = "exact"
    if a.has("requant"):   # a Conv2D / FC that onnxruntime runs in float (docs/simulator.md)
        if a.str("requant") != "float":
            a.fail(f"requant '{a.str('requant')}' of an int8 Conv2D / FC (float)")
        params["requant"] = "float"
        if a.has("float_gemm"):   # sums as onnxruntime's float ConvTranspose (sim/int8_float_conv.py)
            if a.str("float_gemm") not in ("conv", "conv_transpose"):
                a.fail(f"float_gemm '{a.str('float_gemm')}' (conv or conv_transpose)")
            params["float_gemm"] = a.str("float_gemm")
        if a.has("bias_scale_const_name"):
            bs = vector(a, ctx, "bias_scale_const_name", channels, "bias scale")
            if not (np.isfinite(bs).all() and np.all(bs > 0)):
                a.fail("bias scales must be positive and finite")
            weights["bias_scale"] = ctx.weight(a, f"{lname}.bias_scale", bs, "O", fp16=False)
    if params.get("activation", "none") not in ACTIVATIONS:
        a.fail(f"activation '{params['activation']}' on an int8 layer (none, relu or clamp)")


def weight_zero_points(a: NodeAttrs, ctx, lname: str, channels: int, weights: dict) -> None:
    """The optional per-channel weight zero points of an int8 / int8-in Conv2D / FC (asymmetric
    weights, docs/json-format.md "int8 layers"): int32 in [-128, 127] -> weight ``weight_zero_point``."""
    from .layer_common import vector
    if not a.has("weight_zero_point_const_name"):
        return
    zp = vector(a, ctx, "weight_zero_point_const_name", channels, "weight zero point", "int32").astype(np.int32)
    if zp.min() < -128 or zp.max() > 127:
        a.fail(f"weight zero points {zp.min()}..{zp.max()} are outside the int8 range [-128, 127] "
               f"(uint8 weights are stored as q - 128 with z - 128)")
    weights["weight_zero_point"] = ctx.weight(a, f"{lname}.weight_zero_point", zp, "O", fp16=False)


def int8_in_params(a: NodeAttrs, ctx, lname: str, channels: int, params: dict, weights: dict) -> None:
    """An int8-in / fp16-out Conv2D / FC: checks and copies ``in_*`` and the weight scales; the
    output is fp16 (``out_dtype`` float16 or absent), any activation (applied in float), optionally
    ``outq_*``: a QuantizeLinear -> DequantizeLinear of the fp32 result before the fp16 storage."""
    from .layer_common import vector
    if a.str("out_dtype", "float16") not in ("float16", "float32") or a.has("out_scale"):
        a.fail("an int8_in layer writes fp16 (out_dtype float16, no out_scale): use precision int8 for int8 codes")
    side_qparams(a, "in", "an int8_in layer", params)
    if a.has("outq_dtype"):   # its output quantized and dequantized in the epilogue (fp16 storage)
        side_qparams(a, "outq", "an int8_in layer's output quantization", params)
        if a.has("post_ops"):
            ops, vals = a.str("post_ops").split(","), a.floats("post_values")
            sizes = a.ints("post_sizes", [1] * len(ops))   # 1 (scalar) or one value per output channel
            if len(ops) != len(sizes) or any(n not in (1, channels) for n in sizes) or sum(sizes) != len(vals) or \
                    any(o not in POST_OPS for o in ops) or not np.isfinite(vals).all():
                a.fail(f"post_ops {ops} / post_values ({len(vals)}) / post_sizes {sizes}: one finite value per op "
                       f"of {POST_OPS}, or {channels} (one per output channel)")
            params.update(post_ops=ops, post_values=[float(np.float32(v)) for v in vals])
            if any(n != 1 for n in sizes):
                params["post_sizes"] = sizes
    params["precision"] = "int8_in"
    if a.has("int8_sums"):   # onnxruntime's U8S8 integer kernel: int16 pair sums without VNNI (sim/mlas_u8s8.py)
        if a.str("int8_sums") != "u8s8":
            a.fail(f"int8_sums '{a.str('int8_sums')}' of an int8_in Conv2D / FC (u8s8)")
        params["int8_sums"] = "u8s8"
    ws = vector(a, ctx, "weight_scale_const_name", channels, "weight scale")
    if not (np.isfinite(ws).all() and np.all(ws != 0)):   # s_w times a folded BN factor: either sign
        a.fail("weight scales of an int8_in layer must be finite and non-zero")
    weights["weight_scale"] = ctx.weight(a, f"{lname}.weight_scale", ws, "O", fp16=False)
    weight_zero_points(a, ctx, lname, channels, weights)


SUM_REQUANT = ("qlinear", "qlinear_u8", "float")
POST_OPS = ("mul", "add", "sub", "div")   # an int8_in layer's scalar epilogue ops (fuse/qdq_int8_in.py)
IN_ACTIVATIONS = ("relu", "hard_sigmoid", "hard_swish")   # bit-exact with onnxruntime's fp32 kernels   # int8 Sum2D: docs/simulator.md "int8 layers"
WEIGHTLESS = ("Maxpool2D", "Avgpool2D", "GlobalAvgpool2D", "GlobalMaxpool2D", "Resize", "Sum2D", "Requantize",
              "BatchMatMul", "Softmax", "Lookup", "Concat")


def _operand_shape(a, b) -> bool:
    """An int8 Sum2D's second input: the first's shape, or broadcast to it along its leading axes
    with the same innermost axis (a padding mask [B, 1, 1, T] on attention scores [B, H, T, T])."""
    a, b = list(a), list(b)
    return a == b or (0 < len(b) <= len(a) and b[-1] == a[-1] > 1 and
                      all(db in (1, da) for da, db in zip(reversed(a), reversed(b))))


def int8_other(a: NodeAttrs, ctx, lname: str, layer_name: str, in_shapes, params: dict, weights: dict) -> None:
    """The int8 fields of a layer without weights (pools, nearest and bilinear Resize, Sum2D of two tensors)."""
    if layer_name not in WEIGHTLESS:
        a.fail(f"{layer_name} has no int8 mode (int8: Conv2D, FC, {', '.join(WEIGHTLESS)})")
    if layer_name == "Resize" and params.get("mode") not in ("nearest", "linear"):
        a.fail("an int8 Resize is nearest or linear")
    two = len(in_shapes) == 2 and not weights and _operand_shape(in_shapes[0], in_shapes[1]) and a.has("in2_dtype")
    one = len(in_shapes) == 1 and "operand" in weights    # in2_*: the constant's codes' quantization
    if layer_name == "Sum2D" and not (two or one):
        a.fail("an int8 Sum2D adds two tensors of one shape (or the second broadcast along the first's leading "
               "axes), each with its quantization (in_*, in2_*), or a tensor and a float constant")
    if layer_name == "Sum2D" and two and list(in_shapes[0]) != list(in_shapes[1]):
        params["broadcast"] = 1   # the second input broadcast along the first's leading axes
    if layer_name == "Sum2D" and a.has("requant"):
        if not a.has("in2_dtype") or a.str("requant") not in SUM_REQUANT:
            a.fail(f"requant '{a.str('requant')}' of an int8 Sum2D (with in2_*: {', '.join(SUM_REQUANT)})")
        params["requant"] = a.str("requant")
    if layer_name == "BatchMatMul" and a.has("requant"):   # onnxruntime's float MatMul
        if a.str("requant") not in ("qlinear", "float"):
            a.fail(f"requant '{a.str('requant')}' of an int8 BatchMatMul (qlinear or float)")
        params["requant"] = a.str("requant")
    if layer_name == "Sum2D" and a.has("subtract"):   # a QDQ Sub: A - B (1) or B - A (2), in float
        sub = a.int("subtract", 0)
        if sub not in (1, 2) or (a.has("in2_dtype") and a.str("requant", "qlinear") != "float"):
            a.fail(f"subtract {sub} of an int8 Sum2D (1 or 2; with in2_* only with requant float)")
        params["subtract"] = sub
    if layer_name == "Concat":
        _concat_inputs(a, len(in_shapes), params)
    if layer_name == "Softmax" and a.has("requant"):
        if a.str("requant") != "float":
            a.fail(f"requant '{a.str('requant')}' of an int8 Softmax (float)")
        params["requant"] = "float"
    if layer_name in ("Avgpool2D", "GlobalAvgpool2D") and a.has("requant"):
        if a.str("requant") not in ("qlinear", "float"):
            a.fail(f"requant '{a.str('requant')}' of an int8 {layer_name} (qlinear or float)")
        params["requant"] = a.str("requant")
    if a.has("mean_sum"):   # the float mean's fp32 summation order (sim/ort_reduce.py)
        if layer_name != "GlobalAvgpool2D" or a.str("requant", "qlinear") != "float" or a.str("mean_sum") != "rows":
            a.fail(f"mean_sum '{a.str('mean_sum')}' (of an int8 GlobalAvgpool2D with requant float: rows)")
        params["mean_sum"] = "rows"
    if a.has("in_activation"):   # a float mean of activated dequantized values (fuse/qdq_pool_activation.py)
        if layer_name != "GlobalAvgpool2D" or a.str("requant", "qlinear") != "float" \
                or a.str("in_activation") not in IN_ACTIVATIONS:
            a.fail(f"in_activation '{a.str('in_activation')}' (of an int8 GlobalAvgpool2D with requant float: "
                   f"{', '.join(IN_ACTIVATIONS)})")
        params["in_activation"] = a.str("in_activation")
        if a.str("in_activation") == "hard_sigmoid":
            params["in_activation_params"] = {"alpha": a.float("in_activation_alpha", 0.2),
                                              "beta": a.float("in_activation_beta", 0.5)}
    if a.has("out_mul"):   # the float mean times a constant before the Q (fuse/qdq_pool_activation.py)
        if layer_name != "GlobalAvgpool2D" or a.str("requant", "qlinear") != "float" \
                or not np.isfinite(a.float("out_mul", 1.0)):
            a.fail(f"out_mul {a.float('out_mul', 1.0)} (a finite number, of an int8 GlobalAvgpool2D with requant float)")
        params["out_mul"] = a.float("out_mul", 1.0)
    int8_params(a, ctx, lname, 0, params, weights, has_weights=False)


INT8_OUT = ("LayerNorm", "Mul2D")
MUL_REQUANT = ("qlinear", "qlinear_u8")   # int8_out Mul2D: docs/simulator.md "int8 layers"


def int8_out(a: NodeAttrs, layer_name: str, params: dict) -> None:
    """A float layer that writes int8 codes (precision "int8_out"): checks and copies ``out_*``."""
    if layer_name not in INT8_OUT:
        a.fail(f"{layer_name} has no int8 output mode (int8_out: {', '.join(INT8_OUT)})")
    for side in ("out", "in") if a.has("in_dtype") else ("out",):   # in_*: it reads int8 codes
        side_qparams(a, side, "an int8_out layer", params)
    if a.has("requant"):   # a Mul2D of codes and a constant's codes (in2_*) as onnxruntime's QLinearMul
        if layer_name != "Mul2D" or not (a.has("in_dtype") and a.has("in2_dtype")) \
                or a.str("requant") not in MUL_REQUANT:
            a.fail(f"requant '{a.str('requant')}' of an int8_out {layer_name} (Mul2D with in_* and in2_*: "
                   f"{', '.join(MUL_REQUANT)})")
        side_qparams(a, "in2", "an int8_out layer", params)
        params["requant"] = a.str("requant")
    params["precision"] = "int8_out"


FP32 = ("Mul2D", "Sum2D", "Lookup", "Softmax")   # layers of an fp32 chain (fuse/qdq_f32chain.py)


def fp32_layer(a: NodeAttrs, layer_name: str, params: dict) -> None:
    """A float Mul2D / Sum2D computed in fp32, or a Lookup of int8 codes (``in_*``) giving fp32
    values (precision "fp32"): its output is a float32 tensor."""
    if layer_name not in FP32:
        a.fail(f"{layer_name} has no fp32 mode (fp32: {', '.join(FP32)})")
    if layer_name == "Lookup":
        side_qparams(a, "in", "an fp32 Lookup", params)
    params["precision"] = "fp32"


def _concat_inputs(a: NodeAttrs, n: int, params: dict) -> None:
    """An int8 Concat's per-input quantization (in_scales, in_zero_points: one per input)."""
    if "const_positions" in params:
        a.fail("an int8 Concat takes no constant operands")
    scales = [float(v) for v in a.floats("in_scales")] if a.has("in_scales") else []
    zps = a.ints("in_zero_points") if a.has("in_zero_points") else []
    if len(scales) != n or len(zps) != n:
        a.fail(f"an int8 Concat of {n} inputs needs {n} in_scales and in_zero_points")
    lo, hi = QRANGE.get(a.str("in_dtype", "int8"), (0, -1))
    if not all(np.isfinite(s) and s > 0 for s in scales) or not all(lo <= z <= hi for z in zps):
        a.fail(f"int8 Concat input scales {scales} / zero points {zps} (positive; in the type's range)")
    params.update(in_scales=[float(np.float32(s)) for s in scales], in_zero_points=[int(z) for z in zps])


def lookup(a: NodeAttrs, ctx, lname: str, in_shape, params: dict, weights: dict):
    """An int8 Lookup (docs/json-format.md "int8 layers"): its int32 table [channels, 256] of output
    codes, one row per channel of the last axis (or one row); or (precision "fp32", an fp32 chain's
    one-input function of int8 codes) its float32 table of output values; returns the output shape."""
    from .json_attrs import decode_const
    values = a.has("precision") and a.str("precision").lower() == "fp32"
    if not (is_int8(a) or values):
        a.fail("a Lookup layer must be int8 (precision int8) or an fp32 value table (precision fp32)")
    if not a.has("table_const_name"):
        a.fail("a Lookup layer needs its table (table_const_name)")
    table = decode_const(ctx.consts, a.str("table_const_name"), a, integer=None if values else "int32")
    c = a.int("channels", 1)
    if table.size != c * 256 or c < 1 or (c > 1 and in_shape[-1] != c):
        a.fail(f"Lookup table of {table.size} entries for {c} channels of an input {in_shape} "
               f"(256 per channel of the last axis, or one row)")
    lo, hi = QRANGE[a.str("out_dtype", "int8")] if a.str("out_dtype", "int8") in QRANGE else (-128, 127)
    if values and not np.isfinite(table).all():
        a.fail("a Lookup's fp32 value table holds NaN / inf")
    if not values and (table.min(initial=lo) < lo or table.max(initial=hi) > hi):
        a.fail(f"Lookup table codes outside the output type's range [{lo}, {hi}]")
    params["channels"] = c
    weights["table"] = ctx.weight(a, f"{lname}.table", table.reshape(c, 256), "CT", fp16=False)
    return list(in_shape)


def conv_passes(params: dict, cin: int):
    """The multi-pass lowering of an int8 (or int8-in) Conv2D (``int8_conv_passes``, with the default target's
    per-pass limits: the compile step has no target) or None when it runs in one pass."""
    from ..int8_conv_passes import plan
    from ..target import DEFAULT_TARGET as T
    if params.get("precision") not in ("int8", "int8_in"):   # int8-in: the same int32 sum, a float epilogue
        return None
    groups, (kh, kw) = int(params.get("groups", 1)), params["kernel_size"]
    depthwise = groups == cin
    if max(kh, kw) <= T.max_kernel and max(params["strides"]) <= T.max_stride and (groups == 1 or depthwise) \
            and max(params["dilation"]) <= T.max_dilation:
        return None
    p = params["padding"]
    low = plan([kh, kw], params["strides"], params["dilation"], [p[0], p[1], p[2], p[3]], cin // groups, groups,
               T.max_kernel, T.max_stride, T.max_channels, depthwise and groups > 1, T.max_dilation)
    return None if isinstance(low, str) else low
