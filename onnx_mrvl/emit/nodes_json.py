"""Region model -> Nodes-JSON + Constants-JSON, in the field layout Apache TVM's Marvell
integration wrote after its own post-processing (``GetNodesJSONString`` + ``ModifyConstNames``),
plus the original ONNX node names of every layer. Every field is listed in docs/json-format.md.

TVM conventions kept: input nodes ``{"op": "input", ..., "input_id": ["0"]}``; layers
``{"op": "tvm_op", "name": "tvmgen_mrvl_main_<k>", "inputs": [[node, 0, 0], ...]}`` whose attrs are
lists of strings (``"strides": ["1", "1"]``, ``"layer_name": ["Conv2D"]``), except ``num_inputs`` /
``num_outputs`` (a string), ``mrvl_nodes_idx`` ([k + 1]), ``shape`` ([[dims]]) and the
``<role>_const`` maps; constants named ``<layer>_const_<n>`` whose 1-D and 3-D shapes gain a
leading 1.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
import onnx

from .. import opset
from ..graph_index import GraphIndex
from ..errors import CompileError
from ..gather_index import compact_index
from ..provenance import get_composite, get_origin
from ..opset_int8 import is_int8
from . import recurrent
from .const_json import const_entry
from .json_layouts import input_layout, pad_to_4d, rank_layout, stored_layout

CONST_MAPS = ("kernel_const", "bias_const", "beta_const", "gamma_const", "var_const", "mean_const",
              "input_const")  # TVM put these (empty unless used) on every layer


def _s(v) -> List[str]:
    """TVM's attribute convention: a scalar as ["v"], a list as ["a", "b"] (strings)."""
    if isinstance(v, (list, tuple)):
        return [_fmt(x) for x in v]
    return [_fmt(v)]


def _fmt(x) -> str:
    if isinstance(x, (bool, np.bool_)):
        return "1" if x else "0"
    if isinstance(x, (float, np.floating)):
        return format(float(np.float32(x)), ".9g") if np.isfinite(x) else str(float(x))
    return str(x)


def emit_json(region: onnx.ModelProto, name: str = None, arrays=None) -> Tuple[dict, dict]:
    """(nodes_json, consts_json) for a region model whose nodes are all Mrvl ops (``arrays``: see emit)."""
    g = GraphIndex(region)
    if arrays:
        g.lend_values(arrays)
    name = name or region.graph.name
    nodes: List[dict] = []
    consts: Dict[str, dict] = {}
    entry: Dict[str, int] = {}   # tensor -> node index
    shapes, dtypes = [], []
    for i, t in enumerate(g.inputs):
        shape = [int(d) for d in g.shape(t)]
        layout = input_layout(region, t, shape)
        entry[t] = len(nodes)
        nodes.append({"op": "input", "name": t, "inputs": [], "input_id": [str(i)],
                      "attrs": {"dtype": ["float32"], "shape": [shape], "layer_name": ["input"],
                                "data_layout": [layout]}})
        shapes.append(shape)
        dtypes.append("float32")
    # the batch of the region inputs as the compile step reads it: the first input's leading axis
    # (attention regions take inputs of different leading axes: [1, T, D] and [H, T, d])
    batch = next((g.shape(t)[0] for t in g.inputs if g.shape(t)), 1)
    for k, node in enumerate(region.graph.node):
        if node.domain != opset.DOMAIN or node.op_type not in opset.OPS:
            raise CompileError(f"node of type {node.domain}::{node.op_type} cannot be emitted",
                               node=node.name, origin=get_origin(node),
                               hint="only Mrvl ops (onnx_mrvl/opset.py) can be inside a region")
        layer = _layer(g, node, k, name, entry, consts)
        entry[node.output[0]] = len(nodes)
        nodes.append(layer)
        shapes.append(list(layer["attrs"]["shape"][0]))
        dtypes.append("float32")
    heads = []
    for t in g.outputs:
        if t not in entry:
            raise CompileError(f"region output '{t}' is not produced inside the region", node=name)
        heads.append([entry[t], 0, 0])
    nodes_json = {
        "nodes": nodes,
        "arg_nodes": list(range(len(g.inputs))),
        "heads": heads,
        "attrs": {"shape": ["list_shape", shapes], "dltype": ["list_str", dtypes]},
        "batch_size": int(batch),
        "num_subgraph_inputs": len(g.inputs),
        "num_subgraph_outputs": len(g.outputs),
        "subgraph_name": name,
        "producer": "onnx_mrvl",
        "output_names": list(g.outputs),
    }
    return nodes_json, consts


def _layer(g: GraphIndex, node: onnx.NodeProto, k: int, region: str, entry, consts) -> dict:
    op = opset.OPS[node.op_type]
    a = opset.node_attrs(node)
    jname = f"tvmgen_mrvl_main_{k}"
    origin = get_origin(node) or [node.name]
    data_inputs = [i for i in node.input if i and not g.is_const(i)]
    for i in data_inputs:
        if i not in entry:
            raise CompileError(f"input '{i}' is produced after its use", node=node.name, origin=origin)
    n_consts = sum(1 for i in node.input if i and g.is_const(i))
    allowed = {"Conv2D": 3, "FC": 3, "Sum2D": 1, "Mul2D": 1, "LayerNorm": 2, "Lookup": 1, "GatherElements": 1,
               "Softmax": 1,
               "Concat": len(node.input) - 1, **{c: len(recurrent.CONST_ROLES) for c in recurrent.CELLS}}.get(node.op_type, 0)
    weights_not_const = node.op_type in ("Conv2D", "FC") and not all(g.is_const(i) for i in node.input[1:] if i)
    if n_consts > allowed or weights_not_const or (node.op_type in ("Conv2D", "FC") and g.is_const(node.input[0])):
        raise CompileError(f"{node.op_type} with {n_consts} constant inputs (weights must be the constants, "
                           f"activations not) cannot be written to the Nodes-JSON",
                           node=node.name, origin=origin, hint="keep this node on the CPU")
    out_shape = [int(d) for d in g.shape(node.output[0])]
    in_shapes = [[int(d) for d in g.shape(t)] for t in data_inputs]
    attrs: dict = {m: {} for m in CONST_MAPS}
    attrs.update({
        "layer_name": [op.layer_name], "composite_name": [get_composite(node) or op.composite],
        "func_node_name": [region], "num_inputs": str(len(data_inputs)), "num_outputs": "1",
        "dtype": ["float32"], "shape": [out_shape], "mrvl_nodes_idx": [k + 1],
        "origin_nodes": [list(origin)], "onnx_node_name": [node.name],
        "from_tuple_idx": ["-1"] * max(len(data_inputs), 1),
    })
    data_layout = out_layout = None
    multi = len(data_inputs) > 1
    pad4 = node.op_type in ("Sum2D", "Mul2D")  # TVM resized Sum2D shapes to 4 dims
    for idx, s in enumerate(in_shapes):
        s = pad_to_4d(s) if pad4 else s
        if idx == 0:
            attrs["data_layout_shape"] = _s(s)
        if multi:
            attrs[f"data_layout_shape_{idx}"] = _s(s)
    attrs["out_layout_shape"] = _s(pad_to_4d(out_shape) if pad4 else out_shape)

    n_added = [0]   # this layer's constants so far: names <layer>_const_<n> (no scan of all constants)

    def add_const(role: str, arr: np.ndarray, layout: str = None, shape=None, minmax=True):
        cname = f"{jname}_const_{n_added[0]}"
        n_added[0] += 1
        consts[cname] = const_entry(arr, shape)
        attrs[f"{role}_const_name"] = [cname]
        cmap = {"shape": consts[cname]["shape"], "dtype": consts[cname]["dtype"]}
        if minmax:
            cmap.update(min=consts[cname]["min"], max=consts[cname]["max"])
        cmap["name"] = cname
        attrs[f"{role}_const"] = cmap
        if layout:
            attrs[f"{role}_layout"] = [layout]

    inputs = list(node.input)
    if node.op_type == "Conv2D":
        w = g.const(inputs[1])
        data_layout = out_layout = "NHWC"
        attrs.update(strides=_s(a["strides"]), padding=_s(a["pads"]), dilation=_s(a["dilations"]),
                     groups=_s(a["group"]), channels=_s(int(w.shape[0])), kernel_size=_s(list(w.shape[1:3])),
                     kernel_layout=["OHWI"], out_dtype=["float32"])
        add_const("kernel", w)
        if len(inputs) > 2 and inputs[2]:
            add_const("bias", g.const(inputs[2]), "---O")
        if len(inputs) > 3 and inputs[3]:
            add_const("slope", g.const(inputs[3]), "---O")
    elif node.op_type == "FC":
        w = g.const(inputs[1])
        data_layout, out_layout = "NC", "NC"
        attrs.update(units=_s(int(w.shape[0])), kernel_layout=["OI"], out_dtype=["float32"])
        add_const("kernel", w)
        if len(inputs) > 2 and inputs[2]:
            add_const("bias", g.const(inputs[2]), "-O")
        if len(inputs) > 3 and inputs[3]:
            add_const("slope", g.const(inputs[3]), "-O")
        if a.get("weights_need_transform"):
            attrs["weights_need_transform"] = ["yes"]
            attrs["flatten_shape"] = _s(list(a["flatten_shape"]))
    elif node.op_type in ("MaxPool2D", "AvgPool2D"):
        data_layout = out_layout = "NHWC"
        attrs.update(pool_size=_s(a["kernel_shape"]), strides=_s(a["strides"]), padding=_s(a["pads"]),
                     dilation=_s(a.get("dilations", [1, 1])), layout=["NHWC"],
                     ceil_mode=_s(int(a.get("ceil_mode", 0))), kernel_layout=["HW"],
                     kernel_layout_shape=_s(a["kernel_shape"]))
        if node.op_type == "AvgPool2D":
            attrs["count_include_pad"] = _s(int(a.get("count_include_pad", 0)))
            if a.get("requant"):   # int8: "float" = onnxruntime's float average + QuantizeLinear
                attrs["requant"] = [a["requant"]]
    elif node.op_type in ("GlobalAvgPool2D", "GlobalMaxPool2D"):
        data_layout = out_layout = "NHWC"
        attrs.update(layout=["NHWC"], kernel_layout=["HW"], kernel_layout_shape=_s(in_shapes[0][1:3]))
        if node.op_type == "GlobalAvgPool2D" and a.get("requant"):   # int8: "float" = onnxruntime's float mean + Q
            attrs["requant"] = [a["requant"]]
            if a.get("mean_sum"):   # the float mean's summation order (onnxruntime's row sums)
                attrs["mean_sum"] = [a["mean_sum"]]
            if a.get("in_activation"):   # the float mean's activation of the dequantized values
                attrs["in_activation"] = [a["in_activation"]]
                attrs.update({k: [float(a[k])] for k in ("in_activation_alpha", "in_activation_beta") if k in a})
            if a.get("out_mul") is not None:   # the float mean times a constant before the Q
                attrs["out_mul"] = [float(a["out_mul"])]
    elif node.op_type in ("Sum2D", "Mul2D"):
        data_layout = out_layout = stored_layout(node, out_shape) if len(out_shape) == 4 else "NHWC"
        consts_in = [i for i in inputs if i and g.is_const(i)]
        if consts_in:
            c = g.const(consts_in[0])
            rank = max([len(s) for s in in_shapes] + [c.ndim])
            cshape = pad_to_4d([1] * (rank - c.ndim) + list(c.shape))
            add_const("input", c, shape=cshape)
            attrs["input_const_shape"] = _s(cshape)
    elif node.op_type == "Lookup":   # int8 table lookup (docs/json-format.md "int8 layers")
        data_layout = out_layout = stored_layout(node, out_shape) if len(out_shape) == 4 else rank_layout(out_shape)
        add_const("table", g.const(inputs[1]), "CT")
        attrs["channels"] = _s(int(a.get("channels", 1)))
    elif node.op_type == "GatherElements":   # a constant int32 index table (fuse/gather_elements.py)
        data_layout = out_layout = stored_layout(node, out_shape)
        attrs["axis"] = _s(int(a["axis"]))
        idx = np.asarray(g.const(inputs[1])).astype(np.int32)
        attrs["index_shape"] = _s([int(d) for d in idx.shape])
        small = compact_index(idx)   # the leading axes it does not vary on stored as 1
        add_const("indices", small, shape=list(small.shape), minmax=False)
    elif node.op_type == "Concat":
        data_layout = out_layout = stored_layout(node, out_shape)
        attrs["axis"] = _s(a["axis"])
        positions = [p for p, i in enumerate(inputs) if i and g.is_const(i)]
        if positions:   # constant operands (stored layout): input<p>_const_name, p their positions
            attrs["const_positions"] = _s(positions)
            for p in positions:
                c = g.const(inputs[p])
                add_const(f"input{p}", c, shape=list(c.shape))   # the operand's own rank
    elif node.op_type == "Slice2D":
        data_layout = out_layout = stored_layout(node, out_shape)
        attrs.update(axis=_s(a["axis"]), start=_s(a["start"]), end=_s(a["end"]))
    elif node.op_type == "Reshape":
        data_layout, out_layout = rank_layout(in_shapes[0]), rank_layout(out_shape)
        attrs["newshape"] = _s(a["shape"])
    elif node.op_type == "Flatten":
        data_layout, out_layout = rank_layout(in_shapes[0]), "NC"
    elif node.op_type == "Squeeze":
        data_layout, out_layout = rank_layout(in_shapes[0]), rank_layout(out_shape)
        attrs["newshape"] = _s(a["shape"])
    elif node.op_type == "Resize" and a.get("mode") == "linear":
        data_layout = out_layout = "NHWC"
        attrs.update(size=_s(a["sizes"]), method=["linear"], layout=["NHWC"],
                     coordinate_transformation_mode=[a["coordinate_mode"]])
        if a.get("linear_scales"):
            attrs["scales"] = _s([float(v) for v in a["linear_scales"]])
    elif node.op_type == "Resize":
        data_layout = out_layout = "NHWC"
        attrs.update(scales=_s(a["scales"]), method=["nearest_neighbor"], layout=["NHWC"])
    elif node.op_type == "LRN":   # across the channels of NHWC data (opset_lrn.py)
        data_layout = out_layout = "NHWC"
        attrs.update(size=_s(int(a["size"])), alpha=_s(float(a["alpha"])), beta=_s(float(a["beta"])),
                     bias=_s(float(a["bias"])))
    elif node.op_type == "BatchMatMul":   # two activations in their logical order ("ND" when 4-D)
        data_layout = out_layout = rank_layout(out_shape) if len(out_shape) != 4 else "ND"
        attrs.update(transpose_b=_s(int(a.get("transpose_b", 0))), alpha=_s(float(a.get("alpha", 1.0))))
        for key in ("a_perm", "b_perm", "out_perm"):   # operands / output in a permuted storage
            if a.get(key):
                attrs[key] = _s(list(a[key]))
    elif node.op_type == "Requantize":   # a Q -> DQ pair: int8 fields only (below)
        data_layout = out_layout = stored_layout(node, out_shape)
    elif node.op_type in ("LayerNorm", "Softmax"):
        data_layout = out_layout = stored_layout(node, out_shape)
        attrs["axis"] = _s(a["axis"])
        if a.get("log"):   # LogSoftmax
            attrs["log"] = _s(1)
        if "nan_fill" in a:   # an absorbed Where(IsNaN(y), c, y) (fuse/transformer.py)
            attrs["nan_fill"] = _s(float(a["nan_fill"]))
        if node.op_type == "Softmax" and a.get("requant"):   # int8: "float" = onnxruntime's fp32 Softmax + Q
            attrs["requant"] = [a["requant"]]
        if node.op_type == "Softmax" and len(inputs) > 1 and inputs[1]:   # an fp32 additive mask (stored shape)
            c = g.const(inputs[1])
            add_const("input", c, shape=list(c.shape))
            attrs["input_const_shape"] = _s(list(c.shape))
        if node.op_type == "LayerNorm":
            attrs["epsilon"] = _s(float(a["epsilon"]))
            if a.get("rms"):   # RMSNorm: no mean subtracted (fuse/rmsnorm.py)
                attrs["rms"] = _s(1)
            if a.get("form"):   # x * inv + c (fuse/qdq_norm_affine.py)
                attrs["form"] = [str(a["form"])]
            if a.get("mean_sum"):   # onnxruntime's order of the mean's sum (fuse/qdq_layernorm.py)
                attrs["mean_sum"] = [str(a["mean_sum"])]
            if a.get("mean_muls"):   # the means' constant factors (fuse/qdq_layernorm.py)
                attrs["mean_muls"] = _s([float(v) for v in a["mean_muls"]])
            if a.get("ort_kernel"):   # onnxruntime's InstanceNorm kernel's fp32 order (fuse/transformer.py)
                attrs["ort_kernel"] = [str(a["ort_kernel"])]
            if a.get("inner_scales"):   # interior quantization of a QDQ layer norm (fuse/qdq_layernorm.py)
                attrs.update(inner_scales=_s([float(v) for v in a["inner_scales"]]),
                             inner_zero_points=_s([int(v) for v in a["inner_zero_points"]]),
                             inner_types=[str(a.get("inner_types", ""))])
            add_const("gamma", g.const(inputs[1]), "-O")
            if len(inputs) > 2 and inputs[2]:
                add_const("beta", g.const(inputs[2]), "-O")
    elif node.op_type == "LayoutTransform":
        data_layout, out_layout = a["src_layout"], a["dst_layout"]
        attrs.update(src_layout=[a["src_layout"]], dst_layout=[a["dst_layout"]])
    elif node.op_type in recurrent.CELLS:
        data_layout, out_layout = "TNC", "TDNC"
        attrs.update(recurrent.json_attrs(a, inputs, g, add_const, _s, node.op_type))
    if node.op_type in INT8_OPS and is_int8(a):
        _int8_attrs(a, attrs, add_const)
    elif node.op_type in ("Conv2D", "FC") and a.get("precision") == "int8_in":   # int8 in, fp16 out
        attrs.update(precision=["int8_in"], in_scale=_s(float(a["in_scale"])),
                     in_zero_point=_s(int(a["in_zero_point"])), in_dtype=[a["in_type"]],
                     out_dtype=["float16"], kernel_dtype=["int8"], bias_dtype=["float32"])
        add_const("weight_scale", np.asarray(a["weight_scales"], np.float32), "---O")
        if a.get("weight_zero_points"):   # asymmetric weights: int32 [O] in the int8 range
            add_const("weight_zero_point", np.asarray(a["weight_zero_points"], np.int32), "---O")
        if a.get("int8_sums"):   # onnxruntime sums it in its U8S8 integer kernel (sim/mlas_u8s8.py)
            attrs["int8_sums"] = [a["int8_sums"]]
        if "outq_type" in a:   # the Q -> DQ after its float chain, in the epilogue (fuse/qdq_int8_in.py)
            attrs.update(outq_scale=_s(float(a["outq_scale"])), outq_zero_point=_s(int(a["outq_zero_point"])),
                         outq_dtype=[a["outq_type"]])
            if a.get("post_ops"):   # scalar Mul / Add / Sub / Div after the activation, in order
                attrs.update(post_ops=[a["post_ops"]], post_values=_s([float(v) for v in a["post_values"]]))
                if a.get("post_sizes"):   # an op with one value per output channel (fuse/qdq_channel_out.py)
                    attrs.update(post_sizes=_s([int(v) for v in a["post_sizes"]]))
    elif a.get("precision") == "fp32":   # an fp32 chain's Mul2D / Sum2D / value Lookup (qdq_f32chain.py)
        attrs["precision"] = ["fp32"]
        if a.get("divide"):   # Mul2D of an fp32 chain's Div: A / B
            attrs["divide"] = _s(1)
        if "in_type" in a:   # a Lookup reads int8 codes
            attrs.update(in_scale=_s(float(a["in_scale"])), in_zero_point=_s(int(a["in_zero_point"])),
                         in_dtype=[a["in_type"]])
    elif a.get("precision") == "int8_out":   # a float layer writing int8 codes (an absorbed Q -> DQ pair)
        attrs.update(precision=["int8_out"], out_scale=_s(float(a["out_scale"])),
                     out_zero_point=_s(int(a["out_zero_point"])), out_dtype=[a["out_type"]])
        if "in_type" in a:
            attrs.update(in_scale=_s(float(a["in_scale"])), in_zero_point=_s(int(a["in_zero_point"])),
                         in_dtype=[a["in_type"]])
        if "in2_type" in a and a.get("requant"):   # a Mul2D onnxruntime runs as QLinearMul: its constant's codes
            attrs.update(in2_scale=_s(float(a["in2_scale"])), in2_zero_point=_s(int(a["in2_zero_point"])),
                         in2_dtype=[a["in2_type"]], requant=[a["requant"]])
    if op.has_activation:
        act = a.get("activation", "none")
        attrs["activation_type"] = [act]
        for key in opset.ACTIVATION_PARAMS.get(act, ()):
            attrs[key] = _s(float(a[key]))
    if node.op_type == "FC" and a.get("weights_need_transform") and len(in_shapes[0]) == 4:
        data_layout = "NHWC"
    attrs["data_layout"] = [data_layout]
    attrs["out_layout"] = [out_layout]
    suffix = "" if pad4 else f"_{data_layout}" + (f"2{out_layout}" if out_layout != data_layout else "")
    attrs["func_name"] = [f"n{k}_{op.layer_name}{suffix}"]
    return {"op": "tvm_op", "name": jname, "inputs": [[entry[i], 0, 0] for i in data_inputs],
            "attrs": attrs}


INT8_OPS = ("Conv2D", "FC", "MaxPool2D", "AvgPool2D", "GlobalAvgPool2D", "GlobalMaxPool2D", "Resize", "Sum2D",
            "Requantize", "BatchMatMul", "Softmax", "Lookup", "Concat")


def _int8_attrs(a: dict, attrs: dict, add_const) -> None:
    """An int8 layer's fields (docs/json-format.md "int8 layers"): precision, the input and output
    quantization (scale, zero point, type), the per-output-channel weight scales as a constant."""
    attrs.update(precision=["int8"], in_scale=_s(float(a["in_scale"])), in_zero_point=_s(int(a["in_zero_point"])),
                 in_dtype=[a["in_type"]], out_scale=_s(float(a["out_scale"])),
                 out_zero_point=_s(int(a["out_zero_point"])), out_dtype=[a["out_type"]],
                 )
    if "in2_type" in a:   # Sum2D: its second operand's quantization
        attrs.update(in2_scale=_s(float(a["in2_scale"])), in2_zero_point=_s(int(a["in2_zero_point"])),
                     in2_dtype=[a["in2_type"]])
    if "in2_type" in a and a.get("requant"):   # Sum2D / BatchMatMul: onnxruntime's arithmetic (qlinear, qlinear_u8, float)
        attrs["requant"] = [a["requant"]]
    if a.get("subtract"):   # Sum2D of a QDQ Sub: A - B (1) or B - A (2)
        attrs["subtract"] = _s(int(a["subtract"]))
    if "in_scales" in a:   # int8 Concat: every input's quantization, in input order
        attrs.update(in_scales=_s([float(v) for v in a["in_scales"]]),
                     in_zero_points=_s([int(v) for v in a["in_zero_points"]]))
    if a.get("requant") == "float" and "weight_scales" in a:   # Conv2D onnxruntime runs in float
        attrs["requant"] = ["float"]
        if a.get("bias_scales"):
            add_const("bias_scale", np.asarray(a["bias_scales"], np.float32), "---O")
        if a.get("float_gemm"):   # the float GEMM whose sums it follows (a QDQ ConvTranspose's phase)
            attrs["float_gemm"] = [a["float_gemm"]]
    if a.get("int8_sums"):   # Conv2D / FC onnxruntime sums in its S8S8 / U8U8 kernel (sim/mlas_u8s8.py)
        attrs["int8_sums"] = [a["int8_sums"]]
    if a.get("weight_scales"):   # Conv2D / FC (pools have no weights)
        attrs.update(kernel_dtype=["int8"], bias_dtype=["int32"])
        add_const("weight_scale", np.asarray(a["weight_scales"], np.float32), "---O")
        if a.get("weight_zero_points"):   # asymmetric weights: int32 [O] in the int8 range
            add_const("weight_zero_point", np.asarray(a["weight_zero_points"], np.int32), "---O")
