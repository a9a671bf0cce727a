"""QDQ pools and adds: ``DQ -> MaxPool / AveragePool / GlobalAveragePool / GlobalMaxPool / Resize
(nearest) -> Q -> DQ`` as an int8 layer and ``DQ(a) + DQ(b) -> [Relu/Clip] -> Q -> DQ`` (or a constant
operand) as an int8 Sum2D (docs/fusion.md "int8"). The conv / FC layers and the helpers these share
are in qdq.py."""
from __future__ import annotations

from typing import Optional, Union

import numpy as np
import onnx

from ..graph_index import GraphIndex
from ..ort_plan import MEAN_ROWS, ort_float_nodes, ort_u8_adds
from ..provenance import get_origin
from ..target import Target
from .groups import Group
from .patterns import build_eltwise, build_pool as build_float_pool
from .qconst import constant_value, dequantized_const
from .qdq import INT8_ACTIVATIONS, Dequantized, activation_input, pair_in, pairs, qattrs, qparams
from .qdq_pool_activation import post_scale, pre_activation
from .resize import build_resize


POOL_ANCHORS = ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Resize", "Add")


def build_pool(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed=frozenset()) -> Union[Group, str, None]:
    """``DQ -> MaxPool / AveragePool / GlobalAveragePool / GlobalMaxPool / Resize (nearest) -> Q -> DQ``
    as an int8 layer (the float op's checks), ``DQ(a) + DQ(b) -> Q -> DQ`` as an int8 Sum2D, or a
    reason, or None (its input is no DQ)."""
    k = _add_data_index(g, n) if n.op_type == "Add" else 0
    act = pre_activation(g, n, claimed) if n.op_type == "GlobalAveragePool" \
        and n.name in ort_float_nodes(g.model, "ReduceMean") else None   # qdq_pool_activation.py
    found = activation_input(g, act[0].input[0] if act else n.input[k])
    if found is None or isinstance(found[1], str):
        return found and found[1]   # None (no DQ in front) or the reason its quantization is not int8
    qin = found[1]
    if n.op_type == "Add":
        return build_add(g, n, target, claimed, qin, k)
    grp = (build_resize if n.op_type == "Resize" else build_float_pool)(g, n, target)
    if isinstance(grp, str):
        return grp
    post = post_scale(g, n, claimed) if n.op_type == "GlobalAveragePool" else None   # Quark's mean * c
    around = pairs(g, act[0] if act else n, post[0].output[0] if post else grp.output, qin, claimed)
    if isinstance(around, str):
        return around
    nodes, x, out, qout = around
    extra = dict(act[1]) if act else {}
    nodes += [act[0]] if act else []
    if post:   # onnxruntime: the fp32 mean, * c in fp32, then Q (the pool runs in float)
        nodes.append(post[0])
        extra.update(out_mul=post[1], requant="float")
    if n.op_type == "AveragePool" and n.name in ort_float_nodes(g.model, "AveragePool"):
        # onnxruntime left this DQ -> AveragePool -> Q unfused: it averages in float, then quantizes
        extra["requant"] = "float"
    if n.op_type == "GlobalAveragePool" and n.name in ort_float_nodes(g.model, "ReduceMean"):
        # a ReduceMean (legalize's reducemean_to_gap keeps its name), which onnxruntime runs in float
        # between DQ and Q: the fp32 mean, then Q. (A GlobalAveragePool it leaves unfused, e.g. in an
        # SE block, keeps the integer form: it matched onnxruntime's float pool there, the fp32 mean
        # in numpy's order did not: 87% on efficientnet_like S8.)
        extra["requant"] = "float"
        if n.name in ort_float_nodes(g.model, MEAN_ROWS):   # its plan's mean over NCHW's axes 2, 3: the
            extra["mean_sum"] = "rows"                      # KR path, Eigen row sums (else in order)
    if n.op_type == "GlobalAveragePool":
        h, w = g.shape(n.input[0])[2:]
        scale = np.float32(qin[0]) * np.float32(abs(post[1]) if post else 1) / (np.float32(qout[0]) * np.float32(h * w))
        if not 2.0 ** -32 <= scale < 256:
            return f"int8 average: input / output scale / {h * w} pixels = {scale:g} is outside [2^-32, 256)"
    return Group(grp.op, grp.composite, grp.nodes + nodes, [x], out, dict(grp.attrs, **qattrs(qin, qout), **extra), {})


def _add_data_index(g: GraphIndex, n: onnx.NodeProto) -> int:
    """The activation operand of an Add: 1 when operand 0 is the constant (PyTorch writes a Linear's
    bias first: ``Add(bias, MatMul)``), else 0 (Add is commutative, so is onnxruntime's QLinearAdd)."""
    const = [constant_value(g, t) is not None for t in n.input[:2]] if len(n.input) == 2 else [False]
    return 1 if const == [True, False] else 0


def build_add(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed, qin, k: int = 0) -> Union[Group, str, None]:
    """``DQ(a) + DQ(b) -> [Relu/Clip] -> Q -> DQ`` (a residual add) as an int8 Sum2D: operands of
    one shape, each with its own scale and zero point (``in_*`` for a, ``in2_*`` for b). With b a
    DQ of a constant (a MatMul's bias, quantized like a weight), the constant is its dequantized
    fp32 value ``(q_b - z_b) * s_b`` (what onnxruntime adds) and the layer has one data input.
    ``k``: the index of a (1 when the constant comes first)."""
    o = 1 - k
    if g.is_const(n.input[o]) and g.is_float(n.input[o]):   # legalize folded its DQ
        return _build_add_const(g, n, target, claimed, qin, None, k)
    dq_b = g.producer.get(n.input[o])
    if dq_b is None or dq_b.op_type != "DequantizeLinear":
        return None
    if all(g.is_const(i) for i in dq_b.input if i):
        return _build_add_const(g, n, target, claimed, qin, dq_b, k)
    qin2 = qparams(g, dq_b)
    if isinstance(qin2, str):
        return qin2
    grp = build_eltwise(g, n, target)
    if isinstance(grp, str):
        return grp
    if not broadcast_operand(g.shape(n.input[0]), g.shape(n.input[1])):
        return (f"an int8 add of operands of shapes {g.shape(n.input[0])} and {g.shape(n.input[1])} (one shape, "
                f"or the second broadcast along the first's leading axes)")
    around = _int8_activation(grp) or pairs(g, n, grp.output, qin, claimed)
    if isinstance(around, str):
        return around
    nodes, a, out, qout = around
    b, in_front = pair_in(g, n, 1, qin2, set(claimed) | {x.name for x in nodes})
    attrs = dict(grp.attrs, **qattrs(qin, qout), in2_scale=qin2[0], in2_zero_point=qin2[1], in2_type=qin2[2],
                 requant=add_requant(g, n, qin[2]))
    return Group(grp.op, grp.composite, grp.nodes + nodes + in_front, [a, b], out, attrs, {})


def broadcast_operand(a, b) -> bool:
    """An int8 add's second operand of shape ``b`` is the first's (``a``) or broadcasts to it with the
    same innermost axis (BERT's additive padding mask [B, 1, 1, T] on the scores [B, H, T, T]:
    onnxruntime's QLinearAdd runs it per span of that axis, element-wise as for one shape)."""
    if not a or not b:
        return False
    if list(a) == list(b):
        return True
    if len(b) > len(a) or b[-1] != a[-1] or a[-1] == 1:
        return False
    return all(db in (1, da) for da, db in zip(reversed(a), reversed(b)))


def add_requant(g: GraphIndex, n: onnx.NodeProto, dtype: str) -> str:
    """How onnxruntime computes the int8 add ``n`` (docs/simulator.md "int8 layers"): "float" when it
    leaves the group unfused (DQ, fp32 Add, QuantizeLinear), else its QLinearAdd kernel on the codes,
    "qlinear_u8" when its x86 S8 -> U8 rewrite made those codes uint8, "qlinear" otherwise."""
    names = {n.name} | set(get_origin(n) or [])          # legalize's Sum -> Add keeps the Sum by provenance
    if names & (ort_float_nodes(g.model, "Add") | ort_float_nodes(g.model, "Sum")):   # no QLinear Sum
        return "float"
    return "qlinear_u8" if dtype == "int8" and names & ort_u8_adds(g.model) else "qlinear"


def _int8_activation(grp: Group) -> Optional[str]:
    if any(x.op_type not in ("Relu", "Clip") for x in grp.nodes[1:]) or \
            grp.attrs.get("activation", "none") not in INT8_ACTIVATIONS:
        return "a QDQ add followed by an activation other than Relu/Clip"
    return None


def _build_add_const(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed, qin, dq_b, k: int = 0):
    """``DQ(a) + c -> Q -> DQ`` (or ``c + DQ(a)``, a at input ``k``), c a float constant (a folded DQ)
    or a DQ of constants (``dq_b``)."""
    ct = n.input[1 - k]
    if dq_b is None:
        c, view = np.asarray(g.const(ct), np.float32), g
    else:
        c = dequantized_const(g, dq_b)
        if c is None:
            return f"the constant operand of '{n.name}' is not an int8/uint8/int32 DequantizeLinear"
        if dq_b.name in g.excluded:
            return f"the constant operand of '{n.name}' is excluded by the user"
        view = Dequantized(g, {ct: c})
    grp = build_eltwise(view, n, target)
    if isinstance(grp, str):
        return grp
    around = _int8_activation(grp) or pairs(g, n, grp.output, qin, claimed, k)
    if isinstance(around, str):
        return around
    nodes, a, out, qout = around
    attrs = dict(grp.attrs, **qattrs(qin, qout))
    qb = qparams(g, dq_b) if dq_b is not None and np.asarray(g.const(dq_b.input[0])).dtype != np.int32 else None
    if qb is not None and not isinstance(qb, str):   # int8 codes of one scale: onnxruntime may fuse QLinearAdd
        attrs.update(in2_scale=qb[0], in2_zero_point=qb[1], in2_type=qb[2], requant=add_requant(g, n, qin[2]))
    own = dq_b is not None and dq_b.name not in claimed and len(g.consumers.get(ct, [])) == 1
    # a DQ of constants other nodes read too (YOLOv8's anchors, in anchors - lt and anchors + rb)
    # stays for them: this layer holds the dequantized value as its operand
    return Group(grp.op, grp.composite, [x for x in grp.nodes + nodes if x is not dq_b] + ([dq_b] if own else []),
                 [a], out, attrs, dict(grp.weights))
