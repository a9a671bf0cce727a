"""A quantized weight moved after its DequantizeLinear (tf2onnx: a Keras Dense kernel ``[K, N]`` or
a stored ``[N, K]`` -> DQ -> Transpose -> MatMul; a TF conv kernel HWIO -> DQ(axis 3) -> Transpose
-> Conv; Reshape / Squeeze / Unsqueeze of a DQ'd weight) -> the DequantizeLinear of the moved
integer codes, with the scale axis moved along:

    DQ(W_q, s, z, axis=a) -> Transpose(perm)  =>  DQ(W_q.transpose(perm), s, z, axis=perm.index(a))

Exact (the move only reorders values). fold_constants keeps such a DQ when the chain ends in a QDQ
layer's weight (``fold_constants.quantized_weight``), so fuse sees int8 codes and their scales
(docs/fusion.md "int8"). A per-axis DQ through a Reshape is rewritten when the quantized axis
keeps its size and the product of the axes before it; a block-wise DQ is left (its reason).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, inp

NAME = "qdq_weight_moves"
OPS = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity")
INT_TYPES = (np.int8, np.uint8, np.int16, np.uint16, np.int32)


def match(node, g) -> Optional[Match]:
    dq = g.producer.get(node.input[0]) if node.input else None
    if dq is None or dq.op_type != "DequantizeLinear" or dq.domain not in ("", "ai.onnx"):
        return None
    if not all(g.is_const(i) for i in dq.input if i) or len(g.users(dq.output[0])) != 1:
        return None
    if any(not g.is_const(i) for i in node.input[1:] if i):
        return None
    codes = g.const(dq.input[0])
    if codes.dtype.type not in INT_TYPES:
        return None
    return Match([node, dq], {"codes": codes})


def check(m: Match, g, target) -> Optional[str]:
    node, dq = m.nodes
    if attr(dq, "block_size", 0):
        return f"DequantizeLinear '{dq.name}' is block-wise (block_size {attr(dq, 'block_size', 0)})"
    codes = m.data["codes"]
    scale = g.const(dq.input[1])
    zp = g.const(inp(dq, 2)) if inp(dq, 2) else None
    out_shape = g.shape(node.output[0])
    if out_shape is None:
        return "the moved weight's shape is not static"
    axis = attr(dq, "axis", 1) % max(codes.ndim, 1)
    per_axis = scale.size > 1 or (zp is not None and zp.size > 1)
    if node.op_type == "Transpose":
        perm = attr(node, "perm") or list(range(codes.ndim))[::-1]
        moved = codes.transpose(perm)
        new_axis = list(perm).index(axis)
    else:
        moved = codes.reshape(out_shape)
        new_axis = 1
        if per_axis:
            before = int(np.prod(codes.shape[:axis]))
            new_axis = next((k for k in range(len(out_shape)) if out_shape[k] == codes.shape[axis]
                             and int(np.prod(out_shape[:k])) == before), None)
            if new_axis is None:
                return f"{node.op_type} '{node.name}' splits or merges the quantized axis {axis}"
    if tuple(moved.shape) != tuple(out_shape):
        return f"moved codes {moved.shape} do not match the output shape {tuple(out_shape)}"
    m.data.update(moved=np.ascontiguousarray(moved), axis=new_axis if per_axis else None)
    return None


def rewrite(m: Match, g) -> str:
    node, dq = m.nodes
    origin = m.origin
    out = node.output[0]
    codes = g.add_const(f"{out}_quantized", m.data["moved"])
    g.remove(node)
    g.remove(dq)
    attrs = {} if m.data["axis"] is None else {"axis": m.data["axis"]}
    g.make("DequantizeLinear", [codes] + [i for i in dq.input[1:]], [out], near=node, origin=origin,
           name=g.fresh_node_name(f"{dq.name}/{node.op_type.lower()}"), **attrs)
    return f"{node.op_type} of DequantizeLinear '{dq.name}' -> DequantizeLinear of the moved codes"
