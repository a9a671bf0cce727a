"""Region model -> Nodes-JSON + Constants-JSON, in the field layout Apache TVM's Marvell
integration wrote (see docs/json-format.md), plus the original ONNX node names of every layer.
"""
from __future__ import annotations

import base64
from typing import Dict, List, Tuple

import numpy as np
import onnx
from onnx import numpy_helper

from .. import opset
from .._graph import GraphIndex
from ..errors import CompileError
from ..provenance import get_composite, get_origin

LAYOUT_BY_RANK = {4: "NCHW", 2: "NC", 3: "NCW", 1: "C"}


def _s(v) -> List[str]:
    """TVM's JSON attribute convention: a scalar as ["v"], a list as [["a", "b"]]."""
    if isinstance(v, (list, tuple)):
        return [[_fmt(x) for x in v]]
    return [_fmt(v)]


def _fmt(x) -> str:
    if isinstance(x, float):
        return repr(float(np.float32(x))) if np.isfinite(x) else str(x)
    return str(x)


def const_entry(arr: np.ndarray) -> dict:
    a = np.ascontiguousarray(arr, dtype=np.float32)
    shape = list(a.shape)
    if len(shape) in (1, 3):  # TVM wrote 1-D and 3-D constants with a leading 1
        shape = [1] + shape
    return {"shape": shape, "dtype": "float32",
            "min": _fmt(float(a.min())) if a.size else "0", "max": _fmt(float(a.max())) if a.size else "0",
            "data_base64": base64.b64encode(a.astype("<f4").tobytes()).decode()}


def emit_json(region: onnx.ModelProto, name: str = None) -> Tuple[dict, dict]:
    """(nodes_json, consts_json) for a region model whose nodes are all Mrvl ops."""
    g = GraphIndex(region)
    name = name or region.graph.name
    nodes: List[dict] = []
    consts: Dict[str, dict] = {}
    entry: Dict[str, Tuple[int, int]] = {}   # tensor -> (node index, output index)
    shapes, dtypes = [], []
    for i, t in enumerate(g.inputs):
        shape = g.shape(t)
        layout = LAYOUT_BY_RANK.get(len(shape), "ND")
        entry[t] = (len(nodes), 0)
        nodes.append({"op": "input", "name": t, "input_id": [str(i)],
                      "attrs": {"dtype": [["float32"]], "shape": [[shape]], "layer_name": ["input"],
                                "data_layout": [layout]}})
        shapes.append(shape)
        dtypes.append("float32")
    batch = max([g.shape(t)[0] for t in g.inputs if g.shape(t)] or [1])
    for k, node in enumerate(region.graph.node):
        if node.domain != opset.DOMAIN or node.op_type not in opset.OPS:
            raise CompileError(f"node of type {node.domain}::{node.op_type} cannot be emitted",
                               node=node.name, origin=get_origin(node))
        layer = _layer(g, node, k, name, entry, consts)
        entry[node.output[0]] = (len(nodes), 0)
        nodes.append(layer)
        shapes.append(g.shape(node.output[0]))
        dtypes.append("float32")
    heads = []
    for t in g.outputs:
        if t not in entry:
            raise CompileError(f"region output '{t}' is not produced inside the region", node=name)
        heads.append([entry[t][0], entry[t][1], 0])
    nodes_json = {
        "nodes": nodes,
        "arg_nodes": list(range(len(g.inputs))),
        "heads": heads,
        "node_row_ptr": list(range(len(nodes) + 1)),
        "attrs": {"shape": ["list_shape", shapes], "dltype": ["list_str", dtypes]},
        "batch_size": batch,
        "num_subgraph_inputs": len(g.inputs),
        "num_subgraph_outputs": len(g.outputs),
        "subgraph_name": name,
        "producer": "onnx_mrvl",
    }
    return nodes_json, consts


def _layer(g: GraphIndex, node: onnx.NodeProto, k: int, region: str, entry, consts) -> dict:
    op = opset.OPS[node.op_type]
    a = opset.node_attrs(node)
    jname = f"tvmgen_mrvl_main_{k}"
    data_inputs = [i for i in node.input if i and not g.is_const(i)]
    for i in data_inputs:
        if i not in entry:
            raise CompileError(f"input '{i}' is produced after its use", node=node.name, origin=get_origin(node))
    in_shape = g.shape(data_inputs[0]) if data_inputs else None
    out_shape = g.shape(node.output[0])
    attrs = {
        "layer_name": [op.layer_name], "composite_name": [get_composite(node) or op.composite],
        "func_name": [f"n{k}_{op.layer_name}"], "func_node_name": [node.name],
        "num_inputs": str(len(data_inputs)), "num_outputs": "1", "dtype": [["float32"]],
        "shape": [[out_shape]], "out_layout_shape": [out_shape], "origin_nodes": [get_origin(node)],
        "mrvl_nodes_idx": [str(k)],
    }
    for idx, t in enumerate(data_inputs):
        attrs["data_layout_shape" if idx == 0 else f"data_layout_shape_{idx}"] = [g.shape(t)]

    def add_const(role: str, tensor: str, layout: str = None):
        cname = f"{jname}_const_{len([c for c in consts if c.startswith(jname + '_const_')])}"
        arr = g.const(tensor)
        consts[cname] = const_entry(arr)
        attrs[f"{role}_const_name"] = [cname]
        attrs[f"{role}_const"] = {"shape": list(arr.shape), "dtype": "float32",
                                  "min": consts[cname]["min"], "max": consts[cname]["max"], "name": cname}
        if layout:
            attrs[f"{role}_layout"] = [layout]

    inputs = node.input
    if node.op_type == "Conv2D":
        w = g.const(inputs[1])
        attrs.update(data_layout=["NHWC"], kernel_layout=["OHWI"], out_layout=["NHWC"],
                     strides=_s(a["strides"]), padding=_s(a["pads"]), dilation=_s(a["dilations"]),
                     groups=_s(a["group"]), channels=_s(int(w.shape[0])), kernel_size=_s(list(w.shape[1:3])))
        add_const("kernel", inputs[1], "OHWI")
        if len(inputs) > 2 and inputs[2]:
            add_const("bias", inputs[2], "---O")
        if len(inputs) > 3 and inputs[3]:
            add_const("slope", inputs[3], "---O")
    elif node.op_type == "FC":
        attrs.update(data_layout=["NC"], kernel_layout=["OI"], out_layout=["NC"],
                     units=_s(int(g.const(inputs[1]).shape[0])))
        add_const("kernel", inputs[1], "OI")
        if len(inputs) > 2 and inputs[2]:
            add_const("bias", inputs[2], "-O")
        if a.get("weights_need_transform"):
            attrs["weights_need_transform"] = ["yes"]
            attrs["flatten_shape"] = [list(a["flatten_shape"])]
    elif node.op_type in ("MaxPool2D", "AvgPool2D"):
        attrs.update(data_layout=["NHWC"], out_layout=["NHWC"], kernel_layout=["HW"],
                     kernel_layout_shape=[list(a["kernel_shape"])], pool_size=_s(a["kernel_shape"]),
                     strides=_s(a["strides"]), padding=_s(a["pads"]), ceil_mode=_s(a.get("ceil_mode", 0)))
        if node.op_type == "AvgPool2D":
            attrs["count_include_pad"] = _s(a.get("count_include_pad", 0))
        else:
            attrs["dilation"] = _s(a.get("dilations", [1, 1]))
    elif node.op_type in ("GlobalAvgPool2D", "GlobalMaxPool2D"):
        attrs.update(data_layout=["NHWC"], out_layout=["NHWC"])
    elif node.op_type in ("Sum2D", "Mul2D"):
        layout = "NHWC" if len(out_shape) == 4 else LAYOUT_BY_RANK.get(len(out_shape), "ND")
        attrs.update(data_layout=[layout], out_layout=[layout])
        consts_in = [i for i in inputs if i and g.is_const(i)]
        if consts_in:
            add_const("input", consts_in[0])
            attrs["input_const_shape"] = [list(g.const(consts_in[0]).shape)]
    elif node.op_type == "Concat":
        attrs.update(axis=_s(a["axis"]), data_layout=["NHWC" if len(out_shape) == 4 else "NC"])
    elif node.op_type in ("Reshape", "Flatten", "Squeeze"):
        attrs.update(newshape=_s(a["shape"]))
    elif node.op_type == "Resize":
        attrs.update(scales=_s(a["scales"]), method=["nearest_neighbor"], layout=["NHWC"])
    elif node.op_type == "LayoutTransform":
        attrs.update(src_layout=[a["src_layout"]], dst_layout=[a["dst_layout"]])
    if op.has_activation:
        act = a.get("activation", "none")
        attrs["activation_type"] = [act]
        for key in opset.ACTIVATION_PARAMS.get(act, ()):
            attrs[key] = _s(float(a[key]))
    return {"op": "tvm_op", "name": jname, "inputs": [[*entry[i], 0] for i in data_inputs], "attrs": attrs}
