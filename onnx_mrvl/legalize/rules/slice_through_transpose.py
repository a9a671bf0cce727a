"""A Slice / Split on the leading axis of a Transpose's output -> the same cut on the Transpose's input
(axis ``perm[0]``), then the Transpose per part (exact: slicing commutes with moving axes).

The fused qkv of an attention block is written ``Reshape [B, T, 3, H, d] -> Transpose [2, 0, 3, 1, 4]
-> q, k, v = x[0], x[1], x[2]``: paddle2onnx writes the indexing as ``Slice(axis 0) -> Squeeze`` (PaddleOCR's
SVTR neck in every PP-OCRv3/v4/v5 recognizer), torch.onnx as ``Split(axis 0)`` / ``Gather`` (timm's
``unbind(0)``). Fuse slices no leading axis (rows or batch), so each of those cut the region on the CPU
(PP-OCRv4 rec: 3 regions); on the Transpose's input the cut is on a middle axis, which fuse takes
(fuse/slices_nd.py)."""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import helper

from .base import Match, attr, inp, is_float, slice_params

NAME = "slice_through_transpose"
OPS = ("Slice", "Split")


def _slice_cut(g, node, shape):
    """(axis, start, end) of a Slice that cuts one axis with step 1, else a reason."""
    cuts = slice_params(g, node, shape)
    if isinstance(cuts, str):
        return cuts
    cut = [(ax, s, e, st) for ax, s, e, st in cuts if (s, e, st) != (0, shape[ax], 1)]
    if len(cut) != 1 or cut[0][3] != 1:
        return "not a step-1 slice of one axis"
    return cut[0][:3]


def match(node, g) -> Optional[Match]:
    if node.op_type not in OPS or node.domain not in ("", "ai.onnx"):
        return None
    t = g.producer.get(node.input[0])
    if t is None or t.op_type != "Transpose" or t.domain not in ("", "ai.onnx"):
        return None
    return Match([node, t])


def check(m: Match, g, target) -> Optional[str]:
    node, t = m.nodes
    shape = g.shape(node.input[0])
    if shape is None or g.shape(t.input[0]) is None or any(o and g.shape(o) is None for o in node.output):
        return "shapes are not static"
    if not is_float(g, node.input[0]):
        return "not a float tensor"
    perm = [int(p) for p in attr(t, "perm", list(range(len(shape)))[::-1])]
    if node.op_type == "Split":
        axis = attr(node, "axis", 0) % len(shape)
        if inp(node, 1) and not g.is_const(node.input[1]):
            return "split sizes are not a constant"
    else:
        cut = _slice_cut(g, node, shape)
        if isinstance(cut, str):
            return cut
        axis = cut[0]
        m.data["range"] = cut[1:]
    if axis != 0:
        return "the cut is not on the leading axis (fuse slices it where it is)"
    if perm[0] == 0:
        return "the Transpose keeps the leading axis first"
    m.data["perm"], m.data["src_axis"] = perm, perm[0]
    return None


def rewrite(m: Match, g) -> str:
    node, t = m.nodes
    perm, src_axis = m.data["perm"], m.data["src_axis"]
    origin = m.origin
    x = t.input[0]
    xs = list(g.shape(x))
    g.remove(node)
    parts = []
    for o in node.output:
        if not o:
            parts.append("")
            continue
        so = g.shape(o)
        part = g.fresh(f"{o}/pre_transpose")
        ps = list(xs)
        ps[src_axis] = so[0]
        g.set_shape(part, ps, g.dtype(o))
        parts.append(part)
    if node.op_type == "Split":
        new = g.make("Split", [x] + list(node.input[1:]), parts, near=node, origin=origin, name=node.name)
        for a in node.attribute:
            new.attribute.append(helper.make_attribute("axis", src_axis) if a.name == "axis" else a)
        if attr(node, "axis") is None:
            new.attribute.append(helper.make_attribute("axis", src_axis))
    else:
        s, e = m.data["range"]
        ins = [x] + [g.add_const(f"{node.name}/{k}", np.array([v], np.int64))
                     for k, v in (("starts", s), ("ends", e), ("axes", src_axis))]
        g.make("Slice", ins, parts, near=node, origin=origin, name=node.name)
    for o, part in zip(node.output, parts):
        if o:
            g.make("Transpose", [part], [o], near=node, origin=origin, name=f"{node.name}/transpose_{o}", perm=perm)
    if not g.used(t.output[0]):
        g.remove(t)
    return f"{node.op_type} on the leading axis of Transpose '{t.name}' -> on its input's axis {src_axis}"
