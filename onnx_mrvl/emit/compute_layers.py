"""Program layers that compute on the MAC array or the vector unit: Conv2D, FC, pools, Sum2D/Mul2D
and the fused activation (docs/program.md)."""
from __future__ import annotations

import math
import numpy as np

from .int8_layer import int8_in_params, int8_params, is_int8, is_int8_in
from .json_attrs import NodeAttrs, decode_const, unwrap
from .layer_common import ACTIVATIONS, Context, fit_rank, padding4, squeeze_lead, vector

def activation(a: NodeAttrs, ctx: Context, lname: str, channels: int, params: dict, weights: dict) -> None:
    act = a.str("activation_type", "none")
    if act not in ACTIVATIONS:
        a.fail(f"unknown activation_type '{act}' (known: {', '.join(ACTIVATIONS)})")
    params["activation"] = act
    ap = {}
    if act == "clamp":
        ap = {"min": a.float("activation_min"), "max": a.float("activation_max")}
    elif act == "leaky_relu":
        ap = {"alpha": a.float("activation_alpha")}
    elif act == "elu":
        ap = {"alpha": a.float("activation_alpha", 1.0)}
    elif act == "log":   # max(log x + beta, alpha): alpha the floor (-FLT_MAX: none)
        ap = {"alpha": a.float("activation_alpha"), "beta": a.float("activation_beta", 0.0)}
    elif act == "hard_sigmoid":
        ap = {"alpha": a.float("activation_alpha", 0.2), "beta": a.float("activation_beta", 0.5)}
    elif act == "prelu":
        slope = decode_const(ctx.consts, a.str("slope_const_name"), a).reshape(-1)
        if slope.size not in (1, channels):
            a.fail(f"prelu slope has {slope.size} values for {channels} channels")
        weights["slope"] = ctx.weight(a, f"{lname}.slope", slope, "C", fp16=False)
    if ap:  # omitted when empty (the meta stays small on deep nets)
        params["activation_params"] = ap


def conv(a, ctx, lname, in_shapes, params, weights):
    if len(in_shapes[0]) != 4:
        a.fail(f"Conv2D input has shape {in_shapes[0]} (4-D NHWC expected)")
    int8, i8in = is_int8(a), is_int8_in(a)   # i8in: int8 in, fp16 out (float32 bias)
    w = squeeze_lead(decode_const(ctx.consts, a.str("kernel_const_name"), a, "int8" if int8 or i8in else None), 4)
    if w.ndim != 4:
        a.fail(f"conv kernel has shape {list(w.shape)} (OHWI expected)")
    layout = a.str("kernel_layout", "OHWI")
    if layout == "OIHW":
        w = w.transpose(0, 2, 3, 1)
    elif layout == "HWIO":
        w = w.transpose(3, 0, 1, 2)
    elif layout != "OHWI":
        a.fail(f"kernel_layout '{layout}' is not supported (OHWI, OIHW or HWIO)")
    o, kh, kw, ig = w.shape
    groups = a.int("groups", 1)
    cin = in_shapes[0][3]
    if groups < 1 or ig * groups != cin or o % groups:
        a.fail(f"kernel {list(w.shape)} (OHWI) with groups={groups} does not fit an input of shape "
               f"{in_shapes[0]} (NHWC)")
    if a.has("channels") and a.int("channels") != o:
        a.fail(f"channels={a.int('channels')} but the kernel has {o} output channels")
    if a.has("kernel_size") and a.ints("kernel_size", n=2) != [kh, kw]:
        a.fail(f"kernel_size={a.ints('kernel_size')} but the kernel is {kh}x{kw}")
    params.update(strides=a.ints("strides", [1, 1], 2), padding=padding4(a),
                  dilation=a.ints("dilation", [1, 1], 2), groups=groups, kernel_size=[kh, kw], channels=o)
    weights["kernel"] = ctx.weight(a, f"{lname}.kernel", w, "OHWI", fp16=True)
    bias = vector(a, ctx, "bias_const_name", o, "bias", "int32" if int8 else None) \
        if a.has("bias_const_name") else None
    if (int8 or i8in) and (a.has("gamma_const_name") or a.has("mean_const_name")):
        a.fail("an int8 Conv2D cannot carry a batch_norm (fold it before quantizing)")
    if a.has("gamma_const_name") or a.has("mean_const_name"):
        # TVM's conv + [bias] + batch_norm: y = (x - mean) / sqrt(var + eps) * gamma + beta,
        # folded into the program's per-channel scale and shift.
        mu = vector(a, ctx, "mean_const_name", o, "batch_norm mean")
        var = vector(a, ctx, "var_const_name", o, "batch_norm var")
        gamma = vector(a, ctx, "gamma_const_name", o, "batch_norm gamma") if a.int("scale", 1) else np.ones(o, np.float32)
        beta = vector(a, ctx, "beta_const_name", o, "batch_norm beta") if a.int("center", 1) else np.zeros(o, np.float32)
        eps = a.float("epsilon", 1e-5)
        if np.any(var + eps <= 0):
            a.fail("batch_norm var + epsilon is not positive")
        scale = (gamma / np.sqrt(var.astype(np.float64) + eps)).astype(np.float32)
        weights["scale"] = ctx.weight(a, f"{lname}.scale", scale, "O", fp16=False)
        weights["shift"] = ctx.weight(a, f"{lname}.shift", beta - mu * scale, "O", fp16=False)
    if bias is not None:
        weights["bias"] = ctx.weight(a, f"{lname}.bias", bias, "O", fp16=False)
    activation(a, ctx, lname, o, params, weights)
    if int8:
        int8_params(a, ctx, lname, o, params, weights)
    elif i8in:
        int8_in_params(a, ctx, lname, o, params, weights)
    n, h, wd, _ = in_shapes[0]
    pt, pl, pb, pr = params["padding"]
    (sh, sw), (dh, dw) = params["strides"], params["dilation"]
    if min(sh, sw, dh, dw) < 1 or min(pt, pl, pb, pr) < 0:
        a.fail(f"strides {params['strides']}, dilation {params['dilation']} and padding "
               f"{params['padding']} must be positive (padding >= 0)")
    ho = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if ho < 1 or wo < 1:
        a.fail(f"the kernel does not fit the padded input {in_shapes[0]}")
    return [n, ho, wo, o], n * ho * wo * o * kh * kw * ig


def fc(a, ctx, lname, in_shapes, params, weights):
    """FC on x [N, K]; a 4-D NHWC input (TVM's fc after layout_transform + flatten) is flattened by
    the caller (see needs_flatten)."""
    int8, i8in = is_int8(a), is_int8_in(a)
    w = squeeze_lead(decode_const(ctx.consts, a.str("kernel_const_name"), a, "int8" if int8 or i8in else None), 2)
    if w.ndim != 2:
        a.fail(f"FC kernel has shape {list(w.shape)} (OI expected)")
    if a.str("kernel_layout", "OI") == "IO":
        w = w.T
    o, k = w.shape
    if a.str("weights_need_transform", "no").lower() in ("yes", "1", "true"):
        # the kernel's columns follow an NCHW flatten; the layer reads an NHWC flatten
        key = a.first("flatten_shape", "data_layout_shape")
        fs = a.ints(key) if key else []
        if len(fs) != 4 or int(np.prod(fs[1:])) != k:
            a.fail(f"weights_need_transform needs the NHWC shape that was flattened (flatten_shape or a "
                   f"4-D data_layout_shape); got {fs} for K={k}")
        _, h, wd, c = fs
        w = w.reshape(o, c, h, wd).transpose(0, 2, 3, 1)  # a view: ctx.weight's cast writes it OI
    if in_shapes[0][-1] != k or len(in_shapes[0]) != 2:
        a.fail(f"FC kernel {[o, k]} (OI) does not fit an input of shape {in_shapes[0]}")
    if a.has("units") and str(unwrap(a.raw["units"])).strip().lstrip("-").isdigit() and a.int("units") != o:
        a.fail(f"units={a.int('units')} but the kernel has {o} rows")
    weights["kernel"] = ctx.weight(a, f"{lname}.kernel", w, "OI", fp16=True, shape=(o, k))
    if a.has("bias_const_name"):
        weights["bias"] = ctx.weight(a, f"{lname}.bias", vector(a, ctx, "bias_const_name", o, "bias",
                                                               "int32" if int8 else None), "O", fp16=False)
    activation(a, ctx, lname, o, params, weights)
    if int8:
        int8_params(a, ctx, lname, o, params, weights)
    elif i8in:
        int8_in_params(a, ctx, lname, o, params, weights)
    return [in_shapes[0][0], o], in_shapes[0][0] * o * k


def pool_out(size, k, s, p0, p1, d, ceil):
    span = size + p0 + p1 - d * (k - 1) - 1
    out = (math.ceil(span / s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= size + p0:
        out -= 1
    return out


def pool(a, ctx, lname, in_shapes, params, weights, avg):
    if len(in_shapes[0]) != 4:
        a.fail(f"pooling input has shape {in_shapes[0]} (4-D NHWC expected)")
    key = a.first("pool_size", "kernel_size", "kernel_layout_shape")
    if key is None:
        a.fail("missing attribute 'pool_size' (or kernel_layout_shape)")
    k = a.ints(key, n=2)
    params.update(kernel_size=k, strides=a.ints("strides", [1, 1], 2), padding=padding4(a),
                  ceil_mode=a.int("ceil_mode", 0))
    if avg:
        params["count_include_pad"] = a.int("count_include_pad", 0)
    else:
        params["dilation"] = a.ints("dilation", [1, 1], 2)
    d = params.get("dilation", [1, 1])
    n, h, w, c = in_shapes[0]
    p = params["padding"]
    if min(k + params["strides"] + d) < 1 or min(p) < 0:
        a.fail(f"pool_size {k}, strides {params['strides']} must be positive and padding {p} >= 0")
    ho = pool_out(h, k[0], params["strides"][0], p[0], p[2], d[0], params["ceil_mode"])
    wo = pool_out(w, k[1], params["strides"][1], p[1], p[3], d[1], params["ceil_mode"])
    if ho < 1 or wo < 1:
        a.fail(f"the pooling window {k} does not fit the padded input {in_shapes[0]}")
    return [n, ho, wo, c], 0


def eltwise(a, ctx, lname, in_shapes, params, weights):
    rank = max(len(s) for s in in_shapes)
    shapes = [fit_rank(s, rank) for s in in_shapes]
    if len(shapes) == 1:
        if not a.has("input_const_name"):
            a.fail("one input and no input_const_name (the constant operand)")
        c = decode_const(ctx.consts, a.str("input_const_name"), a)
        if a.has("input_const_shape"):
            cs = a.ints("input_const_shape")
            if int(np.prod(cs)) != c.size:
                a.fail(f"input_const_shape {cs} does not match the constant's {c.size} values")
            c = c.reshape(cs)
        c = c.reshape(fit_rank(list(c.shape), rank)) if c.ndim > rank else c
        try:
            out = list(np.broadcast_shapes(c.shape, tuple(shapes[0])))
        except ValueError:
            a.fail(f"constant operand of shape {list(c.shape)} does not broadcast to the input {shapes[0]}")
        if out != shapes[0]:
            a.fail(f"constant operand of shape {list(c.shape)} would grow the input {shapes[0]} to {out}")
        # an int8 Sum2D adds the constant in fp32 (a dequantized bias, docs/simulator.md)
        int8_out = a.has("precision") and a.str("precision").lower() in ("int8_out", "fp32")   # fp32 math
        weights["operand"] = ctx.weight(a, f"{lname}.operand", c, "ND", fp16=not (is_int8(a) or int8_out))
    else:
        try:
            out = list(np.broadcast_shapes(*[tuple(s) for s in shapes]))
        except ValueError:
            a.fail(f"input shapes {shapes} do not broadcast")
    if a.has("divide"):   # A / B of two tensors, fp32 only (fuse/qdq_f32chain.py)
        if a.int("divide") != 1 or len(shapes) != 2 or not a.has("precision") or a.str("precision").lower() != "fp32":
            a.fail("divide 1 is a Mul2D of two tensors with precision fp32 (an fp32 chain's Div)")
        params["divide"] = 1
    activation(a, ctx, lname, out[-1] if len(out) == 4 else (out[1] if len(out) > 1 else 1), params, weights)
    return out, 0


