"""One Nodes-JSON layer -> one program layer (docs/program.md): params, weights in the layout the
layer reads, output shape and MAC count. Accepts TVM's spelling and ours of every attribute.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from . import layers_transformer
from .int8_layer import int8_other, int8_params, is_int8, lookup
from . import recurrent
from .json_attrs import NodeAttrs, decode_const, unwrap
from .matmul_layer import batch_matmul
from .resize_layer import resize_linear

LAYER_NAMES = {  # JSON layer_name (TVM's, ours, the program's) -> program layer_name
    "Conv2D": "Conv2D", "FC": "FC", "Maxpool2D": "Maxpool2D", "Avgpool2D": "Avgpool2D",
    "GlobalAvgpool2D": "GlobalAvgpool2D", "GlobalMaxpool2D": "GlobalMaxpool2D", "Sum2D": "Sum2D",
    "Mul2D": "Mul2D", "Concat": "Concat", "Slice2D": "Slice2D", "reshape": "Reshape", "nn.batch_flatten": "Flatten",
    "squeeze": "Squeeze", "Resize": "Resize", "layout_transform": "layout_transform",
    "transpose": "layout_transform", "Reshape": "Reshape", "Flatten": "Flatten", "Squeeze": "Squeeze",
    "BatchMatMul": "BatchMatMul",
    "LayerNorm": "LayerNorm", "Softmax": "Softmax", "Lookup": "Lookup",
    **{cell: cell for cell in recurrent.CELLS},   # LSTM / GRU / RNN (recurrent.py)
}
ACTIVATIONS = ("none", "relu", "clamp", "leaky_relu", "prelu", "sigmoid", "tanh", "hard_sigmoid",
               "hard_swish", "silu", "gelu", "gelu_tanh", "elu", "mish")
PERMS = {("NCHW", "NHWC"): (0, 2, 3, 1), ("NHWC", "NCHW"): (0, 3, 1, 2)}


@dataclass
class Context:
    """What a layer needs beyond its node: constants, the weight store, the batch change."""
    consts: dict
    json_batch: int
    batch: Optional[int]          # --batch N, or None
    weights: Dict[str, np.ndarray]
    wmeta: List[dict]

    def weight(self, a: NodeAttrs, name: str, arr: np.ndarray, layout: str, fp16: bool, shape=None) -> str:
        """Store ``arr`` (any strides: one cast writes it C-contiguous) as fp16 or fp32, reshaped to
        ``shape`` when given; values that are not finite in that dtype are refused. Integer arrays
        (an int8 layer's int8 kernel and int32 bias) keep their dtype."""
        if arr.dtype.kind in "iu":
            data = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("="))
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                data = np.ascontiguousarray(arr, dtype=np.float16 if fp16 else np.float32)
        if data.dtype.kind == "f" and not _finite(arr, data, fp16):
            a.fail(f"weight '{name}' has values that are not finite in {'fp16' if fp16 else 'fp32'}",
                   hint="keep this layer on the CPU (convert(..., exclude=[...]))")
        if shape is not None:
            data = data.reshape(shape)
        self.weights[name] = data
        self.wmeta.append({"name": name, "shape": list(data.shape), "dtype": str(data.dtype), "layout": layout})
        return name


FP16_LIMIT = 65520.0  # float32 values of at least this magnitude round to inf in float16


def _finite(src, data: np.ndarray, fp16: bool) -> bool:
    """All of ``data`` (``src`` cast to fp16/fp32) finite; for a float32 source checked through
    its min and max (a float32 rounds to a finite fp16 exactly when its magnitude is below 65520)."""
    if data.size == 0:
        return True
    if fp16 and isinstance(src, np.ndarray) and src.dtype == np.float32:
        lo, hi = src.min(), src.max()   # NaN propagates
        return bool(-FP16_LIMIT < lo and hi < FP16_LIMIT)
    return bool(np.all(np.isfinite(data)))


def fit_rank(shape: List[int], rank: int) -> List[int]:
    """Undo TVM's padding of a shape to 4 dims (trailing 1s) and leading 1s, down to ``rank``."""
    s = list(shape)
    while len(s) > rank and s[-1] == 1:
        s.pop()
    while len(s) > rank and s[0] == 1:
        s.pop(0)
    return s


def squeeze_lead(arr: np.ndarray, rank: int) -> np.ndarray:
    while arr.ndim > rank and arr.shape[0] == 1:
        arr = arr[0]
    return arr


def padding4(a: NodeAttrs) -> List[int]:
    """[top, left, bottom, right]; Relay also allowed [p] and [ph, pw]."""
    p = a.ints("padding", [0, 0, 0, 0])
    if len(p) == 1:
        p = p * 4
    elif len(p) == 2:
        p = p * 2
    if len(p) != 4:
        a.fail(f"attribute 'padding' has {len(p)} values, expected 4 ([top, left, bottom, right])")
    return p


def vector(a: NodeAttrs, ctx: Context, key: str, size: int, what: str, integer=None) -> np.ndarray:
    v = decode_const(ctx.consts, a.str(key), a, integer).reshape(-1)
    if v.size != size:
        a.fail(f"{what} has {v.size} values for {size} channels")
    return v


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
    int8 = is_int8(a)
    w = squeeze_lead(decode_const(ctx.consts, a.str("kernel_const_name"), a, "int8" if int8 else None), 4)
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
    if int8 and (a.has("gamma_const_name") or a.has("mean_const_name")):
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
    int8 = is_int8(a)
    w = squeeze_lead(decode_const(ctx.consts, a.str("kernel_const_name"), a, "int8" if int8 else None), 2)
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
        weights["operand"] = ctx.weight(a, f"{lname}.operand", c, "ND", fp16=not is_int8(a))
    else:
        try:
            out = list(np.broadcast_shapes(*[tuple(s) for s in shapes]))
        except ValueError:
            a.fail(f"input shapes {shapes} do not broadcast")
    activation(a, ctx, lname, out[-1] if len(out) == 4 else (out[1] if len(out) > 1 else 1), params, weights)
    return out, 0


def reshape(a, ctx, layer_name, in_shape):
    """Output shape of reshape / nn.batch_flatten / squeeze, with the batch changed by --batch."""
    total = int(np.prod(in_shape))
    if layer_name == "Flatten" and not a.has("newshape"):
        return [in_shape[0], total // max(in_shape[0], 1)]
    if layer_name == "Squeeze" and not a.has("newshape") and a.has("axis"):
        axes = [x % len(in_shape) for x in a.ints("axis")]
        if any(in_shape[x] != 1 for x in axes):
            a.fail(f"squeeze axis {axes} of a tensor of shape {in_shape} whose dims there are not 1")
        return [d for i, d in enumerate(in_shape) if i not in axes]
    key = a.first("newshape", "out_layout_shape", "shape")
    if key is None:
        a.fail("missing attribute 'newshape' (or out_layout_shape)")
    out = a.ints(key)
    if ctx.batch and ctx.batch != ctx.json_batch and out:
        if out[0] not in (ctx.json_batch, -1):
            a.fail(f"reshape to {out} mixes the batch dimension (batch {ctx.json_batch}) with others; it "
                   f"cannot be recompiled for batch {ctx.batch}", hint="convert the model again with that batch")
        out = [in_shape[0] if out[0] == ctx.json_batch else -1] + out[1:]
    out = [in_shape[i] if d == 0 and i < len(in_shape) else d for i, d in enumerate(out)]
    if out.count(-1) > 1 or any(d < -1 for d in out):
        a.fail(f"newshape {out} is not a valid shape")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        if known == 0 or total % known:
            a.fail(f"cannot reshape {in_shape} to {out}")
        out = [total // known if d == -1 else d for d in out]
    if int(np.prod(out)) != total:
        a.fail(f"cannot reshape {in_shape} ({total} values) to {out}")
    return out


def layout_change(a, in_shape, params, in_layout=None):
    if a.has("src_layout"):
        src, dst = a.str("src_layout"), a.str("dst_layout")
    elif a.has("axes"):  # TVM's transpose
        perm = tuple(a.ints("axes"))
        pair = next((p for p, v in PERMS.items() if v == perm), None)
        if pair is None:
            a.fail(f"transpose axes {list(perm)} is not an NCHW<->NHWC layout change")
        src, dst = pair
    else:
        src, dst = a.str("data_layout"), a.str("out_layout")
    if (src, dst) not in PERMS or len(in_shape) != 4:
        a.fail(f"layout_transform {src}->{dst} of a tensor of shape {in_shape} is not supported "
               f"(NCHW<->NHWC of 4-D tensors)")
    if in_layout in ("NCHW", "NHWC") and in_layout != src:
        a.fail(f"layout_transform {src}->{dst} reads a tensor stored {in_layout}")
    params.update(src_layout=src, dst_layout=dst)
    return [in_shape[i] for i in PERMS[(src, dst)]]


def concat(a, ctx, lname, in_shapes, params, weights):
    """Concatenation along ``axis`` of the stored layout; ``const_positions`` (onnx_mrvl's
    extension) lists the positions of constant operands, each ``input<p>_const_name``."""
    axis = a.int("axis")
    if a.has("const_positions"):
        positions = sorted(a.ints("const_positions"))
        if ctx.batch and ctx.batch != ctx.json_batch:
            a.fail(f"concat with constant operands cannot be recompiled for batch {ctx.batch}",
                   hint="convert the model again with that batch")
        shapes = list(in_shapes)
        for p in positions:
            if not 0 <= p <= len(shapes) or not a.has(f"input{p}_const_name"):
                a.fail(f"constant operand {p}: bad position or no input{p}_const_name")
            c = decode_const(ctx.consts, a.str(f"input{p}_const_name"), a)
            if in_shapes and c.ndim > len(in_shapes[0]):   # padded to 4-D by a TVM-style writer
                c = c.reshape(fit_rank(list(c.shape), len(in_shapes[0])))
            shapes.insert(p, list(c.shape))
            weights[f"const{p}"] = ctx.weight(a, f"{lname}.const{p}", c, "ND", fp16=True)
        params["const_positions"] = positions
        in_shapes = shapes
    rank = len(in_shapes[0])
    if any(len(s) != rank for s in in_shapes):
        a.fail(f"concat of tensors of different ranks {in_shapes}")
    if not -rank <= axis < rank:
        a.fail(f"concat axis {axis} is out of range for rank {rank}")
    axis %= rank
    for s in in_shapes[1:]:
        if [d for i, d in enumerate(s) if i != axis] != [d for i, d in enumerate(in_shapes[0]) if i != axis]:
            a.fail(f"concat inputs {in_shapes} differ outside axis {axis}")
    out = list(in_shapes[0])
    out[axis] = sum(s[axis] for s in in_shapes)
    params["axis"] = axis
    return out


def slice2d(a, in_shapes, params):
    """Entries [start, end) of ``axis`` of the stored layout (3 = NHWC channels), step 1."""
    shape = in_shapes[0]
    axis, start, end = a.int("axis"), a.int(a.first("start", "begin") or "start"), a.int("end")
    if len(shape) != 4 or not -4 <= axis < 4 or axis % 4 == 0 or not 0 <= start < end <= shape[axis % 4]:
        a.fail(f"Slice2D [{start}, {end}) of axis {axis} does not fit an input of shape {shape} "
               f"(4-D, a non-batch axis, a non-empty range)")
    params.update(axis=axis % 4, start=start, end=end)
    return [end - start if i == axis % 4 else d for i, d in enumerate(shape)]


def needs_flatten(layer_name: str, in_shapes: List[List[int]]) -> bool:
    return layer_name == "FC" and len(in_shapes[0]) == 4


def compile_layer(index: int, node: dict, ctx: Context, in_shapes: List[List[int]],
                  wprefix: str, in_layouts: Optional[List[str]] = None) -> Tuple[dict, List[int]]:
    """(program layer, output shape) for JSON node ``index``; its weights are named ``<wprefix>.<role>``."""
    a = NodeAttrs(node, index)
    lname_json = a.str("layer_name")
    layer_name = LAYER_NAMES.get(lname_json)
    if layer_name is None:
        a.fail(f"unknown layer_name '{lname_json}' (known: {', '.join(sorted(LAYER_NAMES))})")
    lname = wprefix
    params, weights = {}, {}
    n_in = len(in_shapes)
    single = layer_name not in ("Sum2D", "Mul2D", "Concat", "BatchMatMul", *recurrent.CELLS)   # recurrent: + state inputs
    if single and n_in != 1:
        a.fail(f"{lname_json} takes one input, the node lists {n_in}")
    if layer_name in ("Sum2D", "Mul2D") and n_in > 2:
        a.fail(f"{lname_json} takes one or two inputs, the node lists {n_in}")
    macs = vector_ops = 0
    if layer_name == "Conv2D":
        out, macs = conv(a, ctx, lname, in_shapes, params, weights)
    elif layer_name == "FC":
        out, macs = fc(a, ctx, lname, in_shapes, params, weights)
    elif layer_name in ("Maxpool2D", "Avgpool2D"):
        out, macs = pool(a, ctx, lname, in_shapes, params, weights, layer_name == "Avgpool2D")
    elif layer_name in ("GlobalAvgpool2D", "GlobalMaxpool2D"):
        if len(in_shapes[0]) != 4:
            a.fail(f"global pooling input has shape {in_shapes[0]} (4-D NHWC expected)")
        n, _, _, c = in_shapes[0]
        out = [n, 1, 1, c]
    elif layer_name in ("Sum2D", "Mul2D"):
        out, macs = eltwise(a, ctx, lname, in_shapes, params, weights)
    elif layer_name == "BatchMatMul":
        out, macs = batch_matmul(a, in_shapes, params)
    elif layer_name == "Concat":
        out = concat(a, ctx, lname, in_shapes, params, weights)
    elif layer_name == "Slice2D":
        out = slice2d(a, in_shapes, params)
    elif layer_name in ("LayerNorm", "Softmax"):
        build = layers_transformer.layernorm if layer_name == "LayerNorm" else layers_transformer.softmax
        out, vector_ops = build(a, ctx, lname, in_shapes, params, weights)
    elif layer_name in ("Reshape", "Flatten", "Squeeze"):
        out = reshape(a, ctx, layer_name, in_shapes[0])
        params["shape"] = out
    elif layer_name == "Resize" and a.str("method", "nearest_neighbor") == "linear":
        out, macs = resize_linear(a, in_shapes[0], params)
    elif layer_name == "Lookup":
        out = lookup(a, ctx, lname, in_shapes[0], params, weights)
    elif layer_name in recurrent.CELLS:
        out, macs = recurrent.compile_layer(a, ctx, lname, layer_name, in_shapes, params, weights)
    elif layer_name == "Resize":
        s = a.ints("scales", n=2)
        if min(s) < 1 or len(in_shapes[0]) != 4:
            a.fail(f"Resize needs integer scales >= 1 and a 4-D input (got {s}, {in_shapes[0]})")
        n, h, w, c = in_shapes[0]
        out = [n, h * s[0], w * s[1], c]
        params.update(scales=s, mode="nearest")
    else:
        out = layout_change(a, in_shapes[0], params, (in_layouts or [None])[0])
    if layer_name not in ("Conv2D", "FC") and is_int8(a):
        int8_other(a, ctx, lname, layer_name, in_shapes, params, weights)
    if a.has("out_layout_shape"):
        declared = fit_rank(a.ints("out_layout_shape"), len(out))
        if declared[1:] != out[1:]:
            a.fail(f"out_layout_shape {a.ints('out_layout_shape')} disagrees with the output shape {out} "
                   f"computed from the inputs {in_shapes}")
    layer = {"name": a.name, "layer_name": layer_name, "params": params, "weights": weights,
             "origin": a.origin, "macs": int(macs)}
    if vector_ops:
        layer["vector_ops"] = int(vector_ops)
    return layer, out
