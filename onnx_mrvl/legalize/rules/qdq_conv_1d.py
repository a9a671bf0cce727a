"""The QDQ form of ``conv_1d_to_2d`` (which calls these for a Conv whose weight is a
DequantizeLinear): a QDQ 1-D Conv (onnxruntime's quantizer: ``DQ(x) -> Conv(DQ(W_q), DQ(B_q)) -> Q
-> DQ``; Whisper's and wav2vec's stems) -> the same QDQ layer in 2-D on a unit H axis, so fuse's
int8 Conv2D takes it:

    DQ(x) -> Reshape [N,C,1,L] -> Q -> DQ -> Conv(DQ(W_q [O,I,1,k]), DQ(B_q)) -> Q -> DQ
          -> Reshape [N,O,L'] -> (the original Q -> DQ)

A Conv whose output is not quantized (an int8-in / fp16-out layer: TensorRT-style "inputs only"
QDQ, calibrated dynamic int8) has no pair after it: the float output is reshaped back.

A QDQ 1-D pool gets the same pairs around its 2-D pool (``pool_pairs``). A batch N above
``max_batch`` goes on the H axis as in conv_1d_to_2d (``Transpose [C, N, L] -> [1, C, N, L]``, the pairs
on the 4-D tensors, the Transposes moving dequantized grid values: exact).

The pairs around the Reshapes have the scale and zero point of the DQ before them: they quantize
values that are already on that grid (exact; onnxruntime drops such pairs around a Reshape too).
A Conv whose output no QuantizeLinear alone reads (an int8-in / fp16-out layer: ModelOpt's
inputs-only placement, a calibrated dynamic-int8 ConvInteger, a Conv1d read by an Erf GELU) gets no
pair after the 2-D Conv: ``... -> Conv -> Reshape [N,O,L']``.
"""
from __future__ import annotations

from typing import Optional

from onnx import helper

from .base import Match, attr, dq_producer, match_rank, reshape, str_attr

QDQ = "qdq"   # the Match data key that marks the QDQ form

def pool_pairs(node, g):
    """(DQ in front, Q after) of a QDQ 1-D pool (``DQ(x) -> MaxPool / AveragePool /
    GlobalAveragePool / GlobalMaxPool -> Q``, constant scales and zero points), else None: the
    2-D pool keeps pairs around it, so fuse's int8 pool takes it (an fp16 pool between the Reshapes
    would round what onnxruntime's QLinearAveragePool / QLinearGlobalAveragePool sum exactly)."""
    dq_x = dq_producer(g, node.input[0]) if node.input else None
    q = g.only_consumer(node.output[0])
    if dq_x is None or g.is_const(dq_x.input[0]) or q is None or q.op_type != "QuantizeLinear" \
            or q.domain not in ("", "ai.onnx"):
        return None
    if any(not g.is_const(i) for i in list(dq_x.input[1:]) + list(q.input[1:]) if i):
        return None
    return dq_x, q


def match(node, g) -> Optional[Match]:
    m = match_rank(node, g, ("Conv",), 3)
    if m is None or len(node.input) < 2:
        return None
    dq_x, dq_w = dq_producer(g, node.input[0]), dq_producer(g, node.input[1])
    if dq_x is None or dq_w is None or g.is_const(dq_x.input[0]) or not g.is_const(dq_w.input[0]):
        return None
    q = g.only_consumer(node.output[0])
    if q is not None and q.op_type != "QuantizeLinear":
        q = None    # an int8-in / float-out layer (TensorRT-style QDQ, calibrated dynamic int8)
    return Match([node], {QDQ: True, "dq_x": dq_x, "dq_w": dq_w, "q": q})


def check(m: Match, g, target) -> Optional[str]:
    node, dq_x, dq_w = m.node, m.data["dq_x"], m.data["dq_w"]
    if g.shape(node.output[0]) is None or g.shape(node.input[0]) is None:
        return "shapes are not static"
    if str_attr(node, "auto_pad", "NOTSET") != "NOTSET":
        return "auto_pad not yet resolved"
    if any(not g.is_const(i) for i in list(dq_x.input[1:]) + list(dq_w.input[1:]) + (list(m.data["q"].input[1:]) if m.data["q"] is not None else []) if i):
        return "scales or zero points are not constant"
    if len(g.const(dq_w.input[0]).shape) != 3 or attr(dq_w, "axis", 1) % 3 != 0 and g.const(dq_w.input[1]).size > 1:
        return "weight not per output channel"
    return None


def pair(g, x: str, like, near, origin, tag: str) -> str:
    """Q -> DQ of ``x`` with the scale and zero point of the Q/DQ node ``like``."""
    qp = list(like.input[1:])
    q = g.fresh(f"{x}/{tag}_q")
    g.make("QuantizeLinear", [x] + qp, [q], near=near, origin=origin, name=f"{near.name}/{tag}_q")
    g.set_shape(q, g.shape(x), g.dtype(like.input[0]) if like.op_type == "DequantizeLinear" else g.dtype(like.output[0]))
    out = g.fresh(f"{x}/{tag}_dq")
    g.make("DequantizeLinear", [q] + qp, [out], near=near, origin=origin, name=f"{near.name}/{tag}_dq")
    g.set_shape(out, g.shape(x), g.dtype(x))
    return out


def rewrite(m: Match, g) -> str:
    node, dq_x, dq_w, q_out = m.node, m.data["dq_x"], m.data["dq_w"], m.data["q"]
    n, c, l = g.shape(node.input[0])
    sy = g.shape(node.output[0])
    origin = m.origin
    rows = g.target is not None and n > g.target.max_batch   # the batch on the H axis (conv_1d_to_2d)
    g.remove(node)
    x3 = node.input[0]
    if rows:
        x3 = g.fresh(f"{node.input[0]}/rows")
        g.make("Transpose", [node.input[0]], [x3], near=node, origin=origin, name=f"{node.name}/to_rows", perm=[1, 0, 2])
        g.set_shape(x3, [c, n, l], g.dtype(node.input[0]))
    x4 = pair(g, reshape(g, x3, [1, c, n, l] if rows else [n, c, 1, l], near=node, origin=origin, tag="to2d"),
              dq_x, node, origin, "to2d")
    w = g.const(dq_w.input[0])
    w4 = g.add_const(f"{node.name}/W_q", w.reshape(w.shape[0], w.shape[1], 1, w.shape[2]))
    wdq = g.fresh(f"{node.name}/W")
    g.make("DequantizeLinear", [w4] + list(dq_w.input[1:]), [wdq], near=node, origin=origin,
           name=f"{node.name}/W_dq", axis=0)
    g.set_shape(wdq, [w.shape[0], w.shape[1], 1, w.shape[2]], g.dtype(node.input[0]))
    y4 = g.fresh(f"{node.output[0]}/2d")
    new = g.make("Conv", [x4, wdq] + list(node.input[2:3]), [y4], near=node, origin=origin, name=node.name)
    for a in node.attribute:
        v = attr(node, a.name)
        if a.name == "pads":
            new.attribute.append(helper.make_attribute("pads", [0, v[0], 0, v[1]]))
        elif a.name in ("kernel_shape", "strides", "dilations"):
            new.attribute.append(helper.make_attribute(a.name, [1] + list(v)))
        else:
            new.attribute.append(a)
    g.set_shape(y4, [1, sy[1], sy[0], sy[2]] if rows else [sy[0], sy[1], 1, sy[2]], g.dtype(node.output[0]))
    back = pair(g, y4, q_out, node, origin, "out2d") if q_out is not None else y4
    if rows:
        y3 = reshape(g, back, [sy[1], sy[0], sy[2]], near=node, origin=origin, tag="to1d")
        g.make("Transpose", [y3], [node.output[0]], near=node, origin=origin, name=f"{node.name}/from_rows",
               perm=[1, 0, 2])
    else:
        reshape(g, back, list(sy), near=node, origin=origin, out=node.output[0], tag="to1d")
    return "QDQ 1-D Conv -> QDQ 2-D Conv on a unit H axis" + ("" if q_out is not None else " (float output)")
