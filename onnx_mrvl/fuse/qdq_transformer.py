"""QDQ transformers and recurrent models: a QuantizeLinear -> DequantizeLinear pair on an activation
that no int8 layer absorbed (qdq.py) becomes one Mrvl ``Requantize`` layer in the region
(opset_int8_transformer.py; docs/fusion.md "int8 in transformers and recurrent models").

onnxruntime's quantizer writes such a pair after every op it knows (Softmax, Mul, Div, Transpose,
Reshape, LayerNormalization, the MatMul of two activations, ...); the float ops between the pairs
run as fp16 layers on the dequantized values, and the pair is the fake quantization onnxruntime
executes there. Rule: ``Q(x) -> DQ`` with scalar constant scale / zero point of one int8/uint8 type,
the Q read only by one DQ of the same parameters, x a float activation of a static 2-D..5-D shape,
neither x a model input nor the DQ's output a model output (those pairs are the host's quantize and
dequantize around the region: they stay in onnxruntime, with the same numbers).
"""
from __future__ import annotations

from typing import List, Union

import numpy as np
import onnx

from ..graph_index import GraphIndex
from ..ort_plan import ort_float_nodes, ort_qlinear_muls
from ..provenance import get_origin
from ..target import Target
from .groups import Group
from .patterns import tensor_reason
from .qdq import activation_input, qparams

HOST_SIDE = ("QuantizeLinear '{q}' -> DequantizeLinear '{dq}' at the model's input or output (the host's "
             "quantize / dequantize around the region, in onnxruntime)")
HOST_OUTPUT = "host_output"   # a Requantize at a model output, kept only when merge_output_pairs merges it


def build_requantize(g: GraphIndex, q: onnx.NodeProto, target: Target) -> Union[Group, str]:
    """``Q(x) -> DQ`` as a Mrvl Requantize (see the module docstring), or the reason it stays on the CPU."""
    x = q.input[0]
    if g.is_const(x) or not g.is_float(x):
        return f"QuantizeLinear '{q.name}' quantizes a constant or a non-float tensor"
    qp = qparams(g, q)
    if isinstance(qp, str):
        return qp
    if q.output[0] in g.output_set:
        return f"the int8 codes of QuantizeLinear '{q.name}' are a model output"
    readers = g.consumers.get(q.output[0], [])
    if len(readers) != 1 or readers[0].op_type != "DequantizeLinear" or readers[0].name in g.excluded:
        return (f"QuantizeLinear '{q.name}' is read by {[r.op_type for r in readers]}, not by one "
                f"DequantizeLinear (the int8 codes leave the accelerator)")
    dq = readers[0]
    if qparams(g, dq) != qp:
        return f"DequantizeLinear '{dq.name}' dequantizes with other parameters than QuantizeLinear '{q.name}'"
    if x in g.inputs:
        return HOST_SIDE.format(q=q.name, dq=dq.name)
    reason = tensor_reason(g, x, dq.output[0], target, "a QuantizeLinear -> DequantizeLinear pair")
    if reason:
        return reason
    s, z, qt = qp
    attrs = dict(precision="int8", in_scale=s, in_zero_point=z, in_type=qt, out_scale=s, out_zero_point=z, out_type=qt)
    # a pair writing a model output stays the host's unless a float layer absorbs it (merge_output_pairs)
    if dq.output[0] in g.output_set:
        attrs[HOST_OUTPUT] = True
    return Group("Requantize", "mrvl.requantize", [q, dq], [x], dq.output[0], attrs)


def materialize(m, grp: Group) -> None:
    """Emit the Requantize on its input's storage (element-wise: no layout change)."""
    src = grp.inputs[0]
    name, perm = m.loc[src]
    if src in m.flat:
        name, perm = m.get(src, None, for_mrvl=True, origin=grp.origin), None
    m._emit(grp, "Requantize", [name], dict(grp.attrs), perm)
    out = m.loc[grp.output][0]
    if name in m.label:
        m.label[out] = m.label[name]


def build_int8_batch_matmul(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed=frozenset()):
    """``DQ(a) x DQ(b) -> Q -> DQ`` with two activations (attention's Q*K^T and P*V): an int8
    BatchMatMul (onnxruntime runs this group as QLinearMatMul: int32 sums of the codes, one
    requantization; where it leaves the MatMul in float, ``requant="float"``: its fp32 SGEMM on
    the dequantized operands) that absorbs the pair after it; None when an operand is no DQ of an activation
    (the float patterns take the MatMul), or the reason it cannot be int8."""
    from .batch_matmul import build_batch_matmul
    dqs = [g.producer.get(t) for t in n.input[:2]]
    if len(n.input) != 2 or any(d is None or d.op_type != "DequantizeLinear" or g.is_const(d.input[0]) for d in dqs):
        return None
    qa, qb = (qparams(g, d) for d in dqs)
    for qp in (qa, qb):
        if isinstance(qp, str):
            return qp
    grp = build_batch_matmul(g, n, target)
    if isinstance(grp, str):
        return grp
    if len(grp.nodes) != 1 or grp.attrs.get("alpha", 1.0) != 1.0:
        return "an int8 MatMul of two activations followed by a scale before its QuantizeLinear"
    users = g.consumers.get(n.output[0], [])
    q = users[0] if len(users) == 1 and n.output[0] not in g.output_set else None
    if q is None or q.op_type != "QuantizeLinear":
        return f"output of '{n.name}' is not read by one QuantizeLinear alone"
    pair = build_requantize(g, q, target)
    if isinstance(pair, str):
        return pair
    if {x.name for x in pair.nodes} & (set(claimed) | set(g.excluded)):
        return "its QuantizeLinear/DequantizeLinear is excluded by the user or taken by another layer"
    k = g.shape(n.input[0])[-1]
    if k * 255 * 255 >= 2 ** 31:
        return f"K={k} products of two int8 operands could overflow the int32 accumulator"
    (sa, za, ta), (sb, zb, tb) = qa, qb
    attrs = dict({k: v for k, v in pair.attrs.items() if k != HOST_OUTPUT}, in_scale=sa, in_zero_point=za, in_type=ta, in2_scale=sb, in2_zero_point=zb,
                 in2_type=tb, alpha=1.0)
    if n.name in ort_float_nodes(g.model, "MatMul"):   # onnxruntime's float MatMul between DQ and Q
        attrs["requant"] = "float"
    return Group("BatchMatMul", grp.composite, [n] + pair.nodes, list(grp.inputs), pair.output, attrs)


def _quantized_input(g: GraphIndex, n: onnx.NodeProto, claimed):
    """(qparams, the tensor the int8 layer reads, the Q -> DQ nodes in front it absorbs) of input 0
    of ``n`` when it is a DQ of an activation; None otherwise. The pair in front is absorbed when it
    feeds ``n`` alone (the layer quantizes the float value itself)."""
    found = activation_input(g, n.input[0])
    if found is None or isinstance(found[1], str):
        return None
    dq, qp = found
    q = g.producer.get(dq.input[0])
    users = g.consumers.get(dq.output[0], [])
    if q is not None and q.op_type == "QuantizeLinear" and len(g.consumers.get(q.output[0], [])) == 1 \
            and len(users) == 1 and dq.output[0] not in g.output_set and q.input[0] not in g.inputs \
            and g.is_float(q.input[0]) and not g.is_const(q.input[0]) and qparams(g, q) == qp \
            and not {q.name, dq.name} & (set(claimed) | set(g.excluded)):
        return qp, q.input[0], [q, dq]
    return qp, n.input[0], []


def build_int8_softmax(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed=frozenset()):
    """``DQ(x) -> Softmax -> Q -> DQ`` (one type in and out): an int8 Softmax with onnxruntime's
    QLinearSoftmax semantics (a 256-entry exp table of the input codes, sim/int8_transformer.py),
    absorbing the pair after it; ``requant="float"`` (any types) where onnxruntime leaves the group
    unfused (ort_plan: with S8 codes when the input's DQ has other readers): its fp32 Softmax of the
    dequantized codes, then QuantizeLinear; None when the input is no DQ (the float pattern takes it), or a reason."""
    from .transformer import build_softmax
    if n.op_type != "Softmax":
        return None
    inp = _quantized_input(g, n, claimed)
    if inp is None:
        return None
    qin, x, in_front = inp
    grp = build_softmax(g, n, target)
    if isinstance(grp, str):
        return grp
    users = g.consumers.get(n.output[0], [])
    if len(users) != 1 or users[0].op_type != "QuantizeLinear" or n.output[0] in g.output_set:
        return f"output of '{n.name}' is not read by one QuantizeLinear alone"
    pair = build_requantize(g, users[0], target)
    if isinstance(pair, str):
        return pair
    in_float = n.name in ort_float_nodes(g.model, "Softmax")   # not fused into QLinearSoftmax
    if pair.attrs["out_type"] != qin[2] and not in_float:
        return "an int8 Softmax with input and output of different types (onnxruntime runs it in float)"
    if {x.name for x in pair.nodes} & (set(claimed) | set(g.excluded)):
        return "its QuantizeLinear/DequantizeLinear is excluded by the user or taken by another layer"
    s, z, t = qin
    attrs = dict(grp.attrs, **{k: v for k, v in pair.attrs.items() if k.startswith(("out_", "precision"))},
                 in_scale=s, in_zero_point=z, in_type=t, **({"requant": "float"} if in_float else {}))
    return Group("Softmax", grp.composite, [n] + pair.nodes + in_front, [x], pair.output, attrs)


# int8 layers tried after qdq.py's (fuse._int8_groups)
ANCHORS = {"MatMul": build_int8_batch_matmul, "Softmax": build_int8_softmax}


INT8_OUT_OPS = ("LayerNorm", "Mul2D")   # float layers that may write int8 codes (opset_int8_transformer.py)


MOVES = ("Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")   # move values, compute none


def _on_grid(g: GraphIndex, t: str, attrs: dict, groups: List[Group]) -> bool:
    """Whether ``t`` holds values already quantized with the Requantize's ``out_*``: moved only
    (Transpose / Reshape / ...) from the output of a layer or pair with that quantization
    (SqueezeNet's Softmax -> Q -> DQ -> Reshape -> Q -> DQ output, YOLOX's final Transpose)."""
    want = (attrs["out_scale"], attrs["out_zero_point"], attrs["out_type"])
    outputs = {grp.output: grp for grp in groups}
    for _ in range(16):
        grp = outputs.get(t)
        if grp is not None and grp.op not in ("Reshape", "Flatten", "Squeeze"):
            return (grp.attrs.get("out_scale"), grp.attrs.get("out_zero_point"), grp.attrs.get("out_type")) == want \
                and grp.attrs.get("precision") in ("int8", "int8_out")
        p = g.producer.get(t)
        if p is None:
            return False
        if p.op_type == "DequantizeLinear":
            return not g.is_const(p.input[0]) and qparams(g, p) == want
        if p.op_type not in MOVES or not p.input:
            return False
        t = p.input[0]
    return False


def _taken_input_pair(g: GraphIndex, grp: Group):
    """The DequantizeLinear of the Q -> DQ pair on ``grp``'s input that the group holds (an int8
    layer norm reading a pair: ``qdq.shared_pairs`` rewires it to the pair's float input), else None."""
    names = {x.name for x in grp.nodes}
    for q in g.consumers.get(grp.inputs[0], []):
        if q.op_type == "QuantizeLinear" and q.name in names:
            dq = next((d for d in g.consumers.get(q.output[0], []) if d.op_type == "DequantizeLinear"
                       and d.name in names), None)
            if dq is not None:
                return dq
    return None


def _qlinear_mul(g: GraphIndex, src: Group, dtype: str) -> dict:
    """A Mul2D reading codes (in_*) times a constant that is the DequantizeLinear of int8 / uint8
    codes, which onnxruntime fuses into its QLinearMul (the constant folded by legalize from tensors
    onnxruntime computes, e.g. a rotary sin table sliced out of a quantized embedding): the
    constant's quantization (in2_*) and ``requant`` "qlinear" (or "qlinear_u8": an int8 Mul its S8
    -> U8 rewrite runs on uint8 codes), so the layer multiplies codes as QLinearMul does
    (docs/simulator.md "int8 layers"); else nothing (the float Mul + QuantizeLinear)."""
    mul = next((x for x in src.nodes if x.op_type == "Mul"), None)
    if mul is None or "operand" not in src.weights:
        return {}
    fused = ort_qlinear_muls(g.model)
    names = {mul.name} | set(get_origin(mul) or [])
    if not names & fused["qlinear"]:
        return {}
    dq = next((x for x in src.nodes if x.op_type == "DequantizeLinear" and x.output[0] in mul.input
               and g.is_const(x.input[0])), None)
    qc = qparams(g, dq) if dq is not None else "no constant DequantizeLinear"
    if isinstance(qc, str) or (qc[2] == "int8") != (dtype == "int8"):
        return {}
    codes = np.asarray(g.const(dq.input[0])).astype(np.float32)
    operand = np.asarray(src.weights["operand"], np.float32)
    if codes.size != operand.size or not np.array_equal(((codes - qc[1]) * np.float32(qc[0])).astype(np.float32).ravel(),
                                                          operand.ravel()):
        return {}   # the operand is no longer that constant's dequantized codes (folded further)
    u8 = dtype == "int8" and bool(names & fused["qlinear_u8"])
    return dict(in2_scale=qc[0], in2_zero_point=qc[1], in2_type=qc[2], requant="qlinear_u8" if u8 else "qlinear")


def _qlinear_mul2(g: GraphIndex, src: Group) -> dict:
    """A Mul2D of two tensors, each a DequantizeLinear output, that onnxruntime fuses into its
    QLinearMul: both quantizations (``in_*``, ``in2_*``: it reads the codes) and ``requant``
    "qlinear" / "qlinear_u8" (as ``_qlinear_mul``); else nothing (its float Mul + QuantizeLinear)."""
    mul = next((x for x in src.nodes if x.op_type == "Mul"), None)
    if mul is None:
        return {}
    fused = ort_qlinear_muls(g.model)
    names = {mul.name} | set(get_origin(mul) or [])
    if not names & fused["qlinear"]:
        return {}
    qs = []
    for t in src.inputs:
        dq = g.producer.get(t)
        q = qparams(g, dq) if dq is not None and dq.op_type == "DequantizeLinear" and not g.is_const(dq.input[0]) \
            else "no DequantizeLinear"
        if isinstance(q, str):
            return {}
        qs.append(q)
    if (qs[0][2] == "int8") != (qs[1][2] == "int8"):
        return {}
    u8 = qs[0][2] == "int8" and bool(names & fused["qlinear_u8"])
    return dict(in_scale=qs[0][0], in_zero_point=qs[0][1], in_type=qs[0][2], in2_scale=qs[1][0],
                in2_zero_point=qs[1][1], in2_type=qs[1][2], requant="qlinear_u8" if u8 else "qlinear")


def merge_output_pairs(g: GraphIndex, groups: List[Group], decisions=None) -> List[Group]:
    """A float LayerNorm / Mul2D whose output only a Q -> DQ pair reads takes the pair (precision
    "int8_out"): the layer quantizes its fp32 result to the pair's int8 codes instead of rounding
    it to fp16 first, as onnxruntime quantizes its fp32 result; with one data input that is a DQ
    output it also carries that quantization (``in_*``: it reads int8 codes). The pair may be a Requantize or
    the pair in front of an int8 layer (which then reads the layer's codes). A Requantize at a
    model output that no layer took is dropped: its pair stays the host's (recorded in ``decisions``),
    unless its input only moves codes already on its grid (the pair is then exact and no work)."""
    owner = {x.name: grp for grp in groups for x in grp.nodes}
    dropped = set()
    for src in groups:
        if src.op not in INT8_OUT_OPS or src.attrs.get("precision") or src.attrs.get("divide"):
            continue   # a Div of two tensors: fp32 chains only (qdq_f32chain.py)
        readers = g.consumers.get(src.output, [])
        q = readers[0] if len(readers) == 1 and src.output not in g.output_set else None
        if q is None or q.op_type != "QuantizeLinear" or q.name not in owner:
            continue
        holder = owner[q.name]
        dq = next((x for x in holder.nodes if x.op_type == "DequantizeLinear" and x.input[0] == q.output[0]), None)
        qp = qparams(g, q)
        if dq is None or isinstance(qp, str) or qparams(g, dq) != qp:
            continue
        if holder.op == "Requantize":
            dropped.add(id(holder))
        else:   # an int8 layer quantized the float value itself: it reads the codes now
            holder.nodes = [x for x in holder.nodes if x.name not in (q.name, dq.name)]
            for grp in groups:
                grp.inputs = [dq.output[0] if t == src.output else t for t in grp.inputs]
        src.nodes += [q, dq]
        src.output = dq.output[0]
        src.attrs.update(precision="int8_out", out_scale=qp[0], out_zero_point=qp[1], out_type=qp[2])
        if src.note.startswith("fp16 layer (not int8: "):   # it is no fp16 layer now
            src.note = "fp32 layer writing its Q -> DQ's codes (not int8: " + src.note[len("fp16 layer (not int8: "):]
        owner.update({q.name: src, dq.name: src})
        dq_in = g.producer.get(src.inputs[0]) if len(src.inputs) == 1 else None
        if len(src.inputs) == 1 and (dq_in is None or dq_in.op_type != "DequantizeLinear"):
            dq_in = _taken_input_pair(g, src)   # the pair in front that qdq.shared_pairs gave it
        if src.op == "Mul2D" and len(src.inputs) == 2:
            src.attrs.update(_qlinear_mul2(g, src))
        if dq_in is not None and dq_in.op_type == "DequantizeLinear" and not g.is_const(dq_in.input[0]):
            qi = qparams(g, dq_in)   # it reads int8 codes: a region input is quantized by the host
            if not isinstance(qi, str):
                src.attrs.update(in_scale=qi[0], in_zero_point=qi[1], in_type=qi[2])
                if src.op == "Mul2D":
                    src.attrs.update(_qlinear_mul(g, src, qi[2]))
    for grp in groups:
        if grp.op == "Requantize" and grp.attrs.get(HOST_OUTPUT) and id(grp) not in dropped \
                and _on_grid(g, grp.inputs[0], grp.attrs, groups):
            grp.attrs.pop(HOST_OUTPUT)   # a no-op on codes already on its grid: the region writes the output
        if grp.op == "Requantize" and grp.attrs.get(HOST_OUTPUT) and id(grp) not in dropped:
            dropped.add(id(grp))
            if decisions is not None:
                for n in grp.nodes:
                    decisions.record(n.name, n.op_type, reason=HOST_SIDE.format(q=grp.nodes[0].name, dq=grp.nodes[1].name))
    return [grp for grp in groups if id(grp) not in dropped]
