"""The Mrvl op set: every accelerator op's name, attributes, JSON ``layer_name``, composite name
and reference body, in one place.

A fused node is an ONNX node in domain ``mrvl`` (e.g. ``mrvl::Conv2D``) with simple attributes.
Its reference body is a model-local ONNX function (specialised per attribute set through the
node's ``overload``), so a fused model still runs in plain onnxruntime.

Layouts: 4-D activations are NHWC, conv kernels OHWI, FC kernels OI.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import onnx
from onnx import helper

from .opset_int8 import INT8_ATTRS, INT8_POOL_ATTRS, INT8_SUM_ATTRS, OUTQ_ATTRS, WEIGHT_ZP, int8_body
from .opset_lookup import LOOKUP_ATTRS, lookup_body
from .opset_int8_concat import INT8_CONCAT_ATTRS, int8_concat_body
from .opset_transformer import SMOOTH_ACTIVATIONS, layernorm_body, smooth_activation_nodes, softmax_body
from . import opset_lrn as _lrn
from . import opset_recurrent as _recurrent
from . import opset_int8_transformer as _int8_transformer
from .provenance import set_composite, set_origin

DOMAIN = "mrvl"
DOMAIN_VERSION = 1

# activation name -> extra float attributes it reads
ACTIVATION_PARAMS: Dict[str, Tuple[str, ...]] = {
    "none": (), "relu": (), "clamp": ("activation_min", "activation_max"),
    "leaky_relu": ("activation_alpha",), "prelu": (), "sigmoid": (), "tanh": (),
    "hard_sigmoid": ("activation_alpha", "activation_beta"), "hard_swish": (), "silu": (),
    "gelu": (), "gelu_tanh": (), "elu": ("activation_alpha",), "mish": (), "erf": (), "softplus": (), "sqrt": (),
    "log": ("activation_alpha", "activation_beta"),
}
TO_NCHW = [0, 3, 1, 2]
TO_NHWC = [0, 2, 3, 1]


@dataclass(frozen=True)
class OpDef:
    name: str                       # op_type in domain mrvl
    layer_name: str                 # JSON layer_name (TVM spelling)
    composite: str                  # composite pattern name
    inputs: Tuple[str, ...]         # formal inputs; weights are initializers
    attrs: Tuple[str, ...]          # attribute names the node may carry
    body: Callable = field(repr=False, compare=False)  # (attrs, present, opset) -> nodes
    has_activation: bool = False


# ---------------------------------------------------------------- body helpers
def _c(name: str, values, dims=None, dtype=onnx.TensorProto.FLOAT):
    values = list(values) if isinstance(values, (list, tuple)) else [values]
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name, dtype, dims if dims is not None else [], values))


def activation_nodes(x: str, y: str, attrs: dict, slope: str = "slope") -> List[onnx.NodeProto]:
    """Nodes computing ``y = act(x)`` for the activation named in ``attrs``."""
    act = attrs.get("activation", "none")
    if act == "none":
        return [helper.make_node("Identity", [x], [y])]
    if act == "relu":
        return [helper.make_node("Relu", [x], [y])]
    if act == "clamp":
        return [_c("act_lo", float(attrs["activation_min"])), _c("act_hi", float(attrs["activation_max"])),
                helper.make_node("Clip", [x, "act_lo", "act_hi"], [y])]
    if act == "leaky_relu":
        return [helper.make_node("LeakyRelu", [x], [y], alpha=float(attrs["activation_alpha"]))]
    if act == "prelu":
        return [helper.make_node("PRelu", [x, slope], [y])]
    if act == "sigmoid":
        return [helper.make_node("Sigmoid", [x], [y])]
    if act == "tanh":
        return [helper.make_node("Tanh", [x], [y])]
    if act == "hard_sigmoid":
        return [helper.make_node("HardSigmoid", [x], [y], alpha=float(attrs["activation_alpha"]),
                                 beta=float(attrs["activation_beta"]))]
    if act == "hard_swish":
        return [helper.make_node("HardSigmoid", [x], ["act_hs"], alpha=1.0 / 6.0, beta=0.5),
                helper.make_node("Mul", [x, "act_hs"], [y])]
    if act == "silu":
        return [helper.make_node("Sigmoid", [x], ["act_sig"]), helper.make_node("Mul", [x, "act_sig"], [y])]
    if act in SMOOTH_ACTIVATIONS:
        return smooth_activation_nodes(act, x, y, attrs)
    raise ValueError(f"unknown activation {act!r}")


def _conv_body(a, present, opset):
    ins = ["Xc", "Wc"] + (["B"] if present.get("B") else [])
    nodes = [helper.make_node("Transpose", ["X"], ["Xc"], perm=TO_NCHW),
             helper.make_node("Transpose", ["W"], ["Wc"], perm=TO_NCHW),
             helper.make_node("Conv", ins, ["Yc"], strides=a["strides"], pads=_onnx_pads(a["pads"]),
                              dilations=a["dilations"], group=a["group"], kernel_shape=a["kernel_shape"])]
    slope = "slope_c"
    if a.get("activation") == "prelu":  # slope given per channel [C] (NHWC); NCHW needs [C,1,1]
        nodes += [_c("slope_shape", [-1, 1, 1], [3], onnx.TensorProto.INT64),
                  helper.make_node("Reshape", ["slope", "slope_shape"], [slope])]
    nodes += activation_nodes("Yc", "Ya", a, slope)
    nodes.append(helper.make_node("Transpose", ["Ya"], ["Y"], perm=TO_NHWC))
    return nodes


def _fc_body(a, present, opset):
    nodes, x = [], "X"
    if a.get("weights_need_transform"):
        n, h, w, c = a["flatten_shape"]
        nodes += [_c("nhwc_shape", [n, h, w, c], [4], onnx.TensorProto.INT64),
                  helper.make_node("Reshape", ["X", "nhwc_shape"], ["Xs"]),
                  helper.make_node("Transpose", ["Xs"], ["Xt"], perm=TO_NCHW),
                  _c("flat_shape", [n, c * h * w], [2], onnx.TensorProto.INT64),
                  helper.make_node("Reshape", ["Xt", "flat_shape"], ["Xf"])]
        x = "Xf"
    ins = [x, "W"] + (["B"] if present.get("B") else [])
    nodes.append(helper.make_node("Gemm", ins, ["Yg"], transB=1))
    nodes += activation_nodes("Yg", "Y", a)
    return nodes


def _pool_body(onnx_op):
    def body(a, present, opset):
        kw = {}
        if onnx_op in ("MaxPool", "AveragePool"):
            kw = dict(kernel_shape=a["kernel_shape"], strides=a["strides"], pads=_onnx_pads(a["pads"]),
                      ceil_mode=a.get("ceil_mode", 0))
            if onnx_op == "AveragePool":
                kw["count_include_pad"] = a.get("count_include_pad", 0)
            elif a.get("dilations") and any(d != 1 for d in a["dilations"]):
                kw["dilations"] = a["dilations"]
        return [helper.make_node("Transpose", ["X"], ["Xc"], perm=TO_NCHW),
                helper.make_node(onnx_op, ["Xc"], ["Yc"], **kw),
                helper.make_node("Transpose", ["Yc"], ["Y"], perm=TO_NHWC)]
    return body


_IN_ACTIVATIONS = {"relu": "Relu", "hard_sigmoid": "HardSigmoid", "hard_swish": "HardSwish"}


def _global_avgpool_body(a, present, opset):
    """The mean; with ``in_activation`` (an int8 float mean, fuse/qdq_pool_activation.py) of the
    activated values; with ``out_mul`` c, times c (AMD Quark's ``GlobalAveragePool -> Mul(c) -> Q``)."""
    nodes = _pool_body("GlobalAveragePool")(a, present, opset)
    act = a.get("in_activation")
    if act:
        kw = {k: float(a[f"in_activation_{k}"]) for k in ("alpha", "beta") if f"in_activation_{k}" in a}
        nodes[1].input[0] = "Xa"
        nodes = nodes[:1] + [helper.make_node(_IN_ACTIVATIONS[act], ["Xc"], ["Xa"], **kw)] + nodes[1:]
    if a.get("out_mul") is not None:
        mean = next(nd for nd in nodes if nd.op_type == "GlobalAveragePool")
        mean.output[0] = "Ym"
        nodes.insert(nodes.index(mean) + 1, helper.make_node("Mul", ["Ym", "Cmul"], ["Yc"]))
        nodes.insert(0, helper.make_node("Constant", [], ["Cmul"], value=helper.make_tensor(
            "Cmul", onnx.TensorProto.FLOAT, [], [float(a["out_mul"])])))
    return nodes


def _eltwise_body(onnx_op):
    def body(a, present, opset):
        return [helper.make_node(onnx_op, ["A", "B"], ["Yb"])] + activation_nodes("Yb", "Y", a)
    return body


def _mul_body(a, present, opset):
    """A * B; ``divide`` = 1: A / B (an fp32 chain's Div of two tensors, fuse/qdq_f32chain.py)."""
    op = "Div" if int(a.get("divide", 0) or 0) else "Mul"
    return [helper.make_node(op, ["A", "B"], ["Yb"])] + activation_nodes("Yb", "Y", a)


def _sum_body(a, present, opset):
    """A + B; an int8 Sum2D of a QDQ Sub (``subtract`` 1: A - B, 2: B - A, B a tensor or the constant)."""
    sub = int(a.get("subtract", 0) or 0)
    ins = ["B", "A"] if sub == 2 else ["A", "B"]
    return [helper.make_node("Sub" if sub else "Add", ins, ["Yb"])] + activation_nodes("Yb", "Y", a)


def _concat_body(a, present, opset):
    n = a["num_inputs"]
    return [helper.make_node("Concat", [f"X{i}" for i in range(n)], ["Y"], axis=a["axis"])]


def _reshape_body(a, present, opset):
    return [_c("shape", a["shape"], [len(a["shape"])], onnx.TensorProto.INT64),
            helper.make_node("Reshape", ["X", "shape"], ["Y"])]


def _slice_body(a, present, opset):
    """Channels [start, end) along ``axis`` of the stored layout (3 = NHWC channels), step 1."""
    i64 = onnx.TensorProto.INT64
    if opset < 10:   # attribute form
        return [helper.make_node("Slice", ["X"], ["Y"], starts=[a["start"]], ends=[a["end"]], axes=[a["axis"]])]
    return [_c("starts", [a["start"]], [1], i64), _c("ends", [a["end"]], [1], i64),
            _c("axes", [a["axis"]], [1], i64), helper.make_node("Slice", ["X", "starts", "ends", "axes"], ["Y"])]


def _resize_body(a, present, opset):
    if a.get("mode") == "linear":   # NHWC storage: N and C kept, H and W as the original Resize had them
        kw = dict(mode="linear", coordinate_transformation_mode=a["coordinate_mode"])
        if a.get("linear_scales"):
            sh, sw = a["linear_scales"]
            return [_c("scales", [1.0, float(sh), float(sw), 1.0], [4]),
                    helper.make_node("Resize", ["X", "", "scales"], ["Y"], **kw)]
        return [helper.make_node("Shape", ["X"], ["shape"]),
                _c("nc_at", [0, 3], [2], onnx.TensorProto.INT64),
                helper.make_node("Gather", ["shape", "nc_at"], ["nc"]),
                helper.make_node("Split", ["nc"], ["n", "c"], axis=0, **({"num_outputs": 2} if opset >= 18 else {})),
                _c("hw", [int(v) for v in a["sizes"]], [2], onnx.TensorProto.INT64),
                helper.make_node("Concat", ["n", "hw", "c"], ["sizes"], axis=0),
                helper.make_node("Resize", ["X", "", "", "sizes"], ["Y"], **kw)]
    sh, sw = a["scales"]
    return [_c("scales", [1.0, float(sh), float(sw), 1.0], [4]),
            helper.make_node("Resize", ["X", "", "scales"], ["Y"], mode="nearest",
                             coordinate_transformation_mode="asymmetric", nearest_mode="floor")]


def _layout_body(a, present, opset):
    perm = TO_NHWC if (a["src_layout"], a["dst_layout"]) == ("NCHW", "NHWC") else TO_NCHW
    return [helper.make_node("Transpose", ["X"], ["Y"], perm=perm)]


def _batch_matmul_body(a, present, opset):
    """Y = alpha * A @ B with numpy broadcasting of the leading axes. A and B come as stored:
    ``a_perm`` / ``b_perm`` (stored axis k holds logical axis perm[k]; B without b_perm: [..., N, K]
    when transpose_b); Y is written in the order ``out_perm``."""
    r = int(a["rank"])

    def inv(p):
        return [list(p).index(i) for i in range(len(p))]
    nodes, x, y = [], "A", "B"
    if a.get("a_perm"):
        nodes.append(helper.make_node("Transpose", ["A"], ["Al"], perm=inv(a["a_perm"])))
        x = "Al"
    b_perm = a.get("b_perm") or (list(range(r - 2)) + [r - 1, r - 2] if a.get("transpose_b") else None)
    if b_perm:
        nodes.append(helper.make_node("Transpose", ["B"], ["Bl"], perm=inv(b_perm)))
        y = "Bl"
    out = "Yl" if a.get("out_perm") else "Y"
    nodes += [helper.make_node("MatMul", [x, y], ["Ym"]), _c("alpha", float(a.get("alpha", 1.0))),
              helper.make_node("Mul", ["Ym", "alpha"], [out])]
    if a.get("out_perm"):
        nodes.append(helper.make_node("Transpose", ["Yl"], ["Y"], perm=list(a["out_perm"])))
    return nodes


def _gather_elements_body(a, present, opset):
    """y = x gathered along ``axis`` (of the stored tensor) at the int32 index table."""
    return [helper.make_node("GatherElements", ["X", "indices"], ["Y"], axis=int(a["axis"]))]


def _onnx_pads(pads_tlbr: Sequence[int]) -> List[int]:
    """[top, left, bottom, right] is ONNX's [h_begin, w_begin, h_end, w_end]: same order."""
    return list(pads_tlbr)


_ACT_ATTRS = ("activation", "activation_min", "activation_max", "activation_alpha", "activation_beta")
_POOL_ATTRS = ("kernel_shape", "strides", "pads", "ceil_mode", "dilations")

OPS: Dict[str, OpDef] = {op.name: op for op in [
    OpDef("Conv2D", "Conv2D", "mrvl.conv2d_nhwc2nhwc", ("X", "W", "B", "slope"),
          ("strides", "pads", "dilations", "group", "kernel_shape", "channels") + _ACT_ATTRS + INT8_ATTRS
          + ("requant", "bias_scales", "float_gemm", "int8_sums", WEIGHT_ZP) + OUTQ_ATTRS,
          int8_body(_conv_body, weight_zp=False), True),
    OpDef("FC", "FC", "mrvl.fc_ni2no", ("X", "W", "B", "slope"),
          ("weights_need_transform", "flatten_shape") + _ACT_ATTRS + INT8_ATTRS + ("requant", "bias_scales", "int8_sums", WEIGHT_ZP)
          + OUTQ_ATTRS,
          int8_body(_fc_body), True),
    OpDef("MaxPool2D", "Maxpool2D", "mrvl.maxpool2d_nhwc2nhwc", ("X",), _POOL_ATTRS + INT8_POOL_ATTRS,
          int8_body(_pool_body("MaxPool"))),
    OpDef("AvgPool2D", "Avgpool2D", "mrvl.avgpool2d_nhwc2nhwc", ("X",),
          _POOL_ATTRS + ("count_include_pad", "requant") + INT8_POOL_ATTRS, int8_body(_pool_body("AveragePool"))),
    OpDef("GlobalAvgPool2D", "GlobalAvgpool2D", "mrvl.globalavgpool2d_nhwc2nhwc", ("X",),
          ("requant", "mean_sum", "in_activation", "in_activation_alpha", "in_activation_beta", "out_mul") + INT8_POOL_ATTRS,
          int8_body(_global_avgpool_body)),
    OpDef("GlobalMaxPool2D", "GlobalMaxpool2D", "mrvl.globalmaxpool2d_nhwc2nhwc", ("X",), INT8_POOL_ATTRS,
          int8_body(_pool_body("GlobalMaxPool"))),
    OpDef("Sum2D", "Sum2D", "mrvl.sum", ("A", "B"), _ACT_ATTRS + INT8_SUM_ATTRS, int8_body(_sum_body), True),
    OpDef("Mul2D", "Mul2D", "mrvl.mul", ("A", "B"), _ACT_ATTRS + _int8_transformer.INT8_OUT_ATTRS[1:] + ("precision",)
          + _int8_transformer.QLINEAR_MUL_ATTRS + ("divide",),
          _int8_transformer.int8_out_body(_mul_body), True),
    OpDef("Concat", "Concat", "mrvl.concat", (), ("axis", "num_inputs") + INT8_POOL_ATTRS + INT8_CONCAT_ATTRS,
          int8_concat_body(_concat_body)),
    OpDef("Slice2D", "Slice2D", "mrvl.slice", ("X",), ("axis", "start", "end"), _slice_body),
    OpDef("Reshape", "reshape", "mrvl.reshape", ("X",), ("shape",), _reshape_body),
    OpDef("Flatten", "nn.batch_flatten", "mrvl.batch_flatten", ("X",), ("shape",), _reshape_body),
    OpDef("Squeeze", "squeeze", "mrvl.squeeze", ("X",), ("shape",), _reshape_body),
    OpDef("Resize", "Resize", "mrvl.resize_nearest", ("X",),
          ("scales", "mode", "sizes", "linear_scales", "coordinate_mode") + INT8_POOL_ATTRS, int8_body(_resize_body)),
    OpDef("LayoutTransform", "layout_transform", "mrvl.layout_transform", ("X",),
          ("src_layout", "dst_layout"), _layout_body),
    OpDef("BatchMatMul", "BatchMatMul", "mrvl.batch_matmul", ("A", "B"),
          ("transpose_b", "alpha", "rank", "a_perm", "b_perm", "out_perm") + INT8_SUM_ATTRS,
          int8_body(_batch_matmul_body)),
    OpDef("LayerNorm", "LayerNorm", "mrvl.layernorm", ("X", "gamma", "beta"),
          ("axis", "epsilon", "rms", "form", "mean_sum", "mean_muls", "ort_kernel") + _int8_transformer.INT8_OUT_ATTRS + _int8_transformer.INNER_ATTRS,
          _int8_transformer.int8_out_body(_int8_transformer.layernorm_inner_body(layernorm_body))),
    OpDef("Softmax", "Softmax", "mrvl.softmax", ("X", "M"), ("axis", "log", "nan_fill", "requant") + INT8_POOL_ATTRS,
          int8_body(softmax_body)),
    OpDef("Lookup", "Lookup", "mrvl.lookup", ("X", "T"), LOOKUP_ATTRS, lookup_body),
    OpDef("GatherElements", "GatherElements", "mrvl.gather_elements", ("X", "indices"), ("axis",), _gather_elements_body),
]}
OPS.update(_recurrent.op_defs(OpDef))   # LSTM / GRU / RNN (opset_recurrent.py)
OPS.update(_int8_transformer.op_defs(OpDef))   # Requantize: a Q -> DQ pair in a region (opset_int8_transformer.py)
OPS.update(_lrn.op_defs(OpDef))   # LRN: local response normalization across channels (opset_lrn.py)
LAYER_NAMES = {op.layer_name: op.name for op in OPS.values()}


def overload_key(op: str, attrs: dict, present: Dict[str, bool]) -> str:
    blob = json.dumps([op, attrs, sorted(k for k, v in present.items() if v)], sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def make_node(op: str, inputs: Sequence[str], outputs: Sequence[str], *, name: str,
              origin: Sequence[str], attrs: dict, composite: Optional[str] = None) -> onnx.NodeProto:
    """A node of the Mrvl op set with provenance. ``inputs`` follow ``OPS[op].inputs`` (use "" for
    an absent optional input; trailing absent inputs are dropped)."""
    opdef = OPS[op]
    unknown = set(attrs) - set(opdef.attrs)
    if unknown:
        raise ValueError(f"{op}: unknown attributes {sorted(unknown)}")
    ins = list(inputs)
    while ins and ins[-1] == "":
        ins.pop()
    present = _presence(opdef, ins)
    node = helper.make_node(op, ins, list(outputs), name=name, domain=DOMAIN,
                            **{k: v for k, v in attrs.items() if v is not None})
    node.overload = overload_key(op, attrs, present)
    set_origin(node, origin)
    set_composite(node, composite or opdef.composite)
    return node


def _presence(opdef: OpDef, ins: Sequence[str]) -> Dict[str, bool]:
    if not opdef.inputs:  # variadic (Concat)
        return {f"X{i}": True for i in range(len(ins))}
    return {formal: (i < len(ins) and ins[i] != "") for i, formal in enumerate(opdef.inputs)}


def node_attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) if a.type != onnx.AttributeProto.STRING
            else a.s.decode() for a in node.attribute}


def reference_function(node: onnx.NodeProto, opset_version: int) -> onnx.FunctionProto:
    """The model-local function that gives ``node`` its reference semantics."""
    opdef = OPS[node.op_type]
    attrs = node_attrs(node)
    present = _presence(opdef, list(node.input))
    formals = list(opdef.inputs[:len(node.input)]) if opdef.inputs else list(present)
    body = opdef.body(attrs, present, opset_version)
    return helper.make_function(DOMAIN, node.op_type, formals, ["Y"], body,
                                [helper.make_opsetid("", opset_version)],
                                attributes=sorted(attrs), overload=node.overload)


def attach_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """(Re)build the model-local functions for every Mrvl op node of the main graph, in place."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    keep = [f for f in model.functions if f.domain != DOMAIN or f.name not in OPS]
    seen, funcs = set(), []
    for node in model.graph.node:
        if node.domain == DOMAIN and node.op_type in OPS:
            key = (node.op_type, node.overload)
            if key not in seen:
                seen.add(key)
                funcs.append(reference_function(node, opset))
    del model.functions[:]
    model.functions.extend(keep + sorted(funcs, key=lambda f: (f.name, f.overload)))
    if not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
    return model
