"""``DQ(s, z) -> moves -> Conv | MatMul | Gemm | Add`` -> ``DQ -> moves -> Q(s, z) -> DQ(s, z) -> Conv
| ...``: a weighted op (or an Add) whose data input is dequantized values moved by ops that keep them
on their grid (Split / Slice / Concat / MaxPool / Transpose / Reshape ..., every path back to a
DequantizeLinear of the same per-tensor scale and zero point) gets the pair in front of it that
makes it an int8 layer.

OpenVINO NNCF quantizes a YOLOv8 C2f block's input once, before its Split (``cv1 -> Q -> DQ ->
Split``), gives the Concat's inputs one scale and puts no Q after the Concat: the bottleneck's first
conv reads the Split's second output, the block's last conv the Concat, the SPPF's conv a Concat of
MaxPools: no DequantizeLinear right in front of them, so fuse ran them as fp16 convs on fp16-rounded
weights (nudenet YOLOv8n NNCF: 98.3% of the next quantizer's codes after the first bottleneck, 44-70%
three blocks later). onnxruntime runs those convs in float on the dequantized values. Exact: each of
those ops only selects, concatenates or takes the maximum of values on the grid ``(s, z)``, which the
new Q maps back to their codes and the DQ to the same values (``DQ(Q(v)) == v`` for v on the grid),
so the model computes what it computed; fuse then finds ``DQ -> Conv`` (an int8 layer, or an int8-in
layer when its output is float). The C2f bottleneck's residual ``Add(slice, DQ(cv2)) -> Q`` likewise
becomes an int8 add (onnxruntime's fp32 add, then Q) instead of an fp16 Sum2D whose rounding the Q
read. Per-tensor DQs of activations (constant scale and zero point); input 0 of a Conv / Gemm,
either input of a MatMul / Add; other readers keep reading the moved values. legalize's
fold_constants keeps such a layer's weight DequantizeLinear (``grid_of``), as for any QDQ layer.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .base import Match, inp

NAME = "qdq_split_pair"
OPS = ("Conv", "Gemm", "MatMul", "Add")
# ops whose outputs are values of their (data) inputs: on the inputs' grid
MOVES = ("Split", "Slice", "Concat", "MaxPool", "GlobalMaxPool", "Transpose", "Reshape", "Squeeze", "Unsqueeze",
         "Flatten", "Identity")
DEPTH = 6


def _data_inputs(node):
    if node.op_type == "Concat":
        return list(node.input)
    return [node.input[0]] if node.input else []


def _dq_grid(g, dq) -> Optional[Tuple]:
    """(scale, zero point, their names, the codes' type) of a per-tensor DQ of an activation, or None."""
    if dq.domain not in ("", "ai.onnx") or g.is_const(dq.input[0]):
        return None
    s = g.const(inp(dq, 1))
    z = g.const(inp(dq, 2)) if inp(dq, 2) else np.zeros(1, np.uint8)
    if s is None or z is None or s.size != 1 or z.size != 1:
        return None
    return float(np.float32(s.reshape(-1)[0])), (str(z.dtype), int(z.reshape(-1)[0])), \
        [i for i in dq.input[1:3] if i], g.dtype(dq.input[0])


def grid_of(g, t: str, depth: int = DEPTH) -> Optional[Tuple]:
    """The grid ``_dq_grid`` of ``t`` when it is the output of data moves (``MOVES``) whose every data
    input leads back to DequantizeLinears of one per-tensor scale and zero point (at least one move:
    a DQ's own output is no match), else None."""
    p = g.producer.get(t)
    if p is None or p.op_type not in MOVES or p.domain not in ("", "ai.onnx") or depth <= 0:
        return None
    if p.op_type in ("MaxPool", "GlobalMaxPool") and (len(p.output) > 1 and p.output[1] or t != p.output[0]):
        return None
    data = _data_inputs(p)
    if not data or any(i and i not in data and not g.is_const(i) for i in p.input):
        return None
    grids = []
    for i in data:
        q = g.producer.get(i)
        if q is not None and q.op_type == "DequantizeLinear":
            grids.append(_dq_grid(g, q))
        else:
            grids.append(grid_of(g, i, depth - 1))
    if any(x is None for x in grids) or len({x[:2] for x in grids}) != 1:
        return None
    return grids[0]


def _reads(u, t: str) -> bool:
    """``u`` reads ``t`` as its data input (a Conv / Gemm's input 0, a MatMul / Add's either)."""
    if u.op_type not in OPS or u.domain not in ("", "ai.onnx"):
        return False
    return t in (u.input[:2] if u.op_type in ("MatMul", "Add") else u.input[:1])


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type != "Add" and (len(node.input) < 2 or g.producer.get(node.input[1]) is None
                                  or g.producer[node.input[1]].op_type != "DequantizeLinear"):
        return None   # a weighted op on DQ weights (a QDQ layer but for its input)
    for t in (node.input[:2] if node.op_type in ("MatMul", "Add") else node.input[:1]):
        grid = grid_of(g, t) if t else None
        if grid is not None:
            return Match([node], {"t": t, "grid": grid})
    return None


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    t, (_, _, params, codes_type) = m.data["t"], m.data["grid"]
    readers = [u for u in g.users(t) if _reads(u, t)]
    q_out, dq_out = g.fresh(f"{t}_QuantizeLinear_Output"), g.fresh(f"{t}_DequantizeLinear_Output")
    g.make("QuantizeLinear", [t] + params, [q_out], near=m.node, origin=m.origin,
           name=g.fresh_node_name(f"{t}_QuantizeLinear"))
    g.make("DequantizeLinear", [q_out] + params, [dq_out], near=m.node, origin=m.origin,
           name=g.fresh_node_name(f"{t}_DequantizeLinear"))
    if g.shape(t) is not None:
        g.set_shape(q_out, list(g.shape(t)), codes_type)
        g.set_shape(dq_out, list(g.shape(t)), 1)
    for u in readers:
        for k, i in enumerate(list(u.input)):
            if i == t and (k < 2 if u.op_type in ("MatMul", "Add") else k == 0):
                g.set_input(u, k, dq_out)
    producer = g.producer.get(t)
    return (f"a Q -> DQ pair (the scale / zero point of its DequantizeLinears) on '{t}' ({producer.op_type if producer else '?'} "
            f"of dequantized values) in front of {len(readers)} reader(s)")


__all__ = ["NAME", "OPS", "match", "check", "rewrite", "grid_of"]
