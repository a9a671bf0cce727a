"""One Nodes-JSON layer -> one program layer (docs/program.md): params, weights in the layout the
layer reads, output shape and MAC count. Accepts TVM's spelling and ours of every attribute.
The builders: compute_layers.py (conv, fc, pools, eltwise), data_layers.py (reshape, layout, concat,
slice), matmul_layer.py, resize_layer.py, lrn_layer.py, transformer_layers.py, recurrent.py, int8_layer.py.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from . import transformer_layers
from . import recurrent
from .compute_layers import conv, eltwise, fc, pool
from .data_layers import concat, gather_elements, layout_change, reshape, slice2d
from .int8_layer import conv_passes, fp32_layer, int8_other, int8_out, is_int8, lookup
from .json_attrs import NodeAttrs
from .layer_common import Context, fit_rank  # noqa: F401 - compile.py reads them here
from .matmul_layer import batch_matmul
from .lrn_layer import lrn
from .resize_layer import resize_linear
from ..target import VECTOR_LOWERINGS

LAYER_NAMES = {  # JSON layer_name (TVM's, ours, the program's) -> program layer_name
    "Conv2D": "Conv2D", "FC": "FC", "Maxpool2D": "Maxpool2D", "Avgpool2D": "Avgpool2D",
    "GlobalAvgpool2D": "GlobalAvgpool2D", "GlobalMaxpool2D": "GlobalMaxpool2D", "Sum2D": "Sum2D",
    "Mul2D": "Mul2D", "Concat": "Concat", "Slice2D": "Slice2D", "reshape": "Reshape", "nn.batch_flatten": "Flatten",
    "squeeze": "Squeeze", "Resize": "Resize", "layout_transform": "layout_transform",
    "transpose": "layout_transform", "Reshape": "Reshape", "Flatten": "Flatten", "Squeeze": "Squeeze",
    "BatchMatMul": "BatchMatMul",
    "LayerNorm": "LayerNorm", "Softmax": "Softmax", "Requantize": "Requantize", "Lookup": "Lookup",
    "LRN": "LRN", "GatherElements": "GatherElements",
    **{cell: cell for cell in recurrent.CELLS},   # LSTM / GRU / RNN (recurrent.py)
}
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
    passes = 1
    if layer_name == "Conv2D":
        out, macs = conv(a, ctx, lname, in_shapes, params, weights)
        low = conv_passes(params, in_shapes[0][3])
        if low is not None:   # an int8 conv run as passes into its int32 accumulator (int8_conv_passes.py)
            macs, passes = out[0] * out[1] * out[2] * out[3] * low.macs_per_output, low.passes
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
        if params.get("divide"):   # a correctly rounded fp32 quotient (target.VECTOR_LOWERINGS["divide"])
            if layer_name != "Mul2D":
                a.fail("divide is a Mul2D mode")
            vector_ops = int(np.prod(out)) * VECTOR_LOWERINGS["divide"][1]
    elif layer_name == "BatchMatMul":
        out, macs = batch_matmul(a, in_shapes, params)
    elif layer_name == "Concat":
        out = concat(a, ctx, lname, in_shapes, params, weights)
    elif layer_name == "Slice2D":
        out = slice2d(a, in_shapes, params)
    elif layer_name == "GatherElements":   # one indexed copy per element (target.VECTOR_LOWERINGS)
        out = gather_elements(a, ctx, lname, in_shapes, params, weights)
        vector_ops = int(np.prod(out))
    elif layer_name in ("LayerNorm", "Softmax"):
        build = transformer_layers.layernorm if layer_name == "LayerNorm" else transformer_layers.softmax
        out, vector_ops = build(a, ctx, lname, in_shapes, params, weights)
    elif layer_name == "LRN":
        out, vector_ops = lrn(a, in_shapes[0], params)
    elif layer_name == "Requantize":   # element-wise; its int8 fields below (int8_layer.int8_other)
        if not is_int8(a):
            a.fail("a Requantize layer needs precision int8 with its scale, zero point and type")
        out = list(in_shapes[0])
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
    zp_macs = 0
    if "weight_zero_point" in weights:   # asymmetric int8 weights: the row sum (docs/fusion.md "int8")
        zp_macs = macs * int(params.get("groups", 1)) // max(int(out[-1]), 1)   # one all-ones column per group
        macs += zp_macs
        vector_ops += int(np.prod(out))   # acc[o] -= z_w[o] * rowsum: one multiply-subtract per output
    if layer_name not in ("Conv2D", "FC", *recurrent.CELLS) and is_int8(a):   # recurrent: recurrent.py
        int8_other(a, ctx, lname, layer_name, in_shapes, params, weights)
    elif a.has("precision") and a.str("precision").lower() == "int8_out":
        int8_out(a, layer_name, params)
    elif a.has("precision") and a.str("precision").lower() == "fp32":
        fp32_layer(a, layer_name, params)
    elif a.has("precision") and a.str("precision").lower() == "int8_in" and \
            layer_name not in ("Conv2D", "FC", *recurrent.CELLS):
        a.fail(f"{layer_name} has no int8-in mode (int8_in: Conv2D, FC, LSTM, GRU, RNN)")
    if a.has("out_layout_shape"):
        declared = fit_rank(a.ints("out_layout_shape"), len(out))
        if declared[1:] != out[1:]:
            a.fail(f"out_layout_shape {a.ints('out_layout_shape')} disagrees with the output shape {out} "
                   f"computed from the inputs {in_shapes}")
    layer = {"name": a.name, "layer_name": layer_name, "params": params, "weights": weights,
             "origin": a.origin, "macs": int(macs)}
    if vector_ops:
        layer["vector_ops"] = int(vector_ops)
    if passes > 1:
        layer["passes"] = int(passes)
    if zp_macs:
        layer["zero_point_macs"] = int(zp_macs)
    return layer, out
