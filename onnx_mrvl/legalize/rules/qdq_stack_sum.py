"""A requantizing sum of n same-shaped maps written as a stack: ``Unsqueeze(x_i, 0)`` (or the Reshape
legalize made of it) ``[-> Q -> DQ]`` ->
``Concat(axis 0) -> Q(s, z) -> DQ -> ReduceSum(axis 0, keepdims 0) -> Q`` (``torch.stack(maps).sum(0)``
quantized by onnxruntime's quantizer: smp FPN's merge block; any "stack then sum" of n feature maps)
-> ``Concat(x_i' , axis 1) -> Q(s, z) -> DQ -> Conv 1x1 (DQ of int8 ones, scale 1) -> Q``.

onnxruntime sums the n dequantized maps in fp32 and quantizes once; the accelerator's int8 adds take
two inputs and would round between them (a chain), and the ReduceSum over the batch axis stayed on
the CPU between two regions. The Concat's quantizer is elementwise, so applying it after a channel
Concat gives the same codes ``q_i``; the 1x1 conv with weight 1 from part i's channel c to output c
sums ``q_i - z`` exactly in int32 and requantizes ``s * sum / s_out``: onnxruntime's value ``sum_i
(q_i - z) s`` but for the fp32 rounding of its additions, which can move a result lying within a few
ulps of a rounding tie by one code (none in the tests). Each part's own pair after its Unsqueeze is
kept (moved before the channel Concat). Refused: rank other than 4 after the stack axis is removed,
another stack axis, a sum read by anything but QuantizeLinear, more channels than the target holds.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, axes_of

NAME = "qdq_stack_sum"
OPS = ("ReduceSum",)
MAX_PARTS = 16


def _only_user(g, t: str, op: str):
    users = g.users(t)
    if len(users) != 1 or t in g.pinned or users[0].op_type != op or users[0].domain not in ("", "ai.onnx"):
        return None
    return users[0]


def _part(g, t: str):
    """(the Unsqueeze, its optional Q -> DQ pair) producing Concat input ``t``, or None."""
    pair = []
    p = g.producer.get(t)
    if p is not None and p.op_type == "DequantizeLinear":
        if _only_user(g, t, "Concat") is None:
            return None
        q = g.producer.get(p.input[0])
        if q is None or q.op_type != "QuantizeLinear" or _only_user(g, q.output[0], "DequantizeLinear") is None:
            return None
        pair, p = [q, p], g.producer.get(q.input[0])
        if p is None or _only_user(g, p.output[0], "QuantizeLinear") is None:
            return None
    elif p is not None and _only_user(g, p.output[0], "Concat") is None:
        return None
    if p is None or p.op_type not in ("Unsqueeze", "Reshape") or p.domain not in ("", "ai.onnx"):
        return None
    si, so = g.shape(p.input[0]), g.shape(p.output[0])
    if si is None or so is None or list(so) != [1] + list(si):
        return None   # not a new leading axis of 1
    return p, pair


def match(node, g) -> Optional[Match]:
    if node.op_type != "ReduceSum" or node.domain not in ("", "ai.onnx") or attr(node, "keepdims", 1) != 0:
        return None
    axes, sx = axes_of(g, node, 1), g.shape(node.input[0])
    if not axes or len(axes) != 1 or sx is None or axes[0] % len(sx) != 0:
        return None
    dq = g.producer.get(node.input[0])
    q = g.producer.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
    cat = g.producer.get(q.input[0]) if q is not None and q.op_type == "QuantizeLinear" else None
    if cat is None or cat.op_type != "Concat" or attr(cat, "axis", 0) % len(sx) != 0:
        return None
    parts = [_part(g, i) for i in cat.input]
    if any(p is None for p in parts) or not 2 <= len(parts) <= MAX_PARTS:
        return None
    return Match([node, dq, q, cat], {"parts": parts})


def check(m: Match, g, target) -> Optional[str]:
    node, dq, q, cat = m.nodes
    for t, op in ((cat.output[0], "QuantizeLinear"), (q.output[0], "DequantizeLinear"), (dq.output[0], "ReduceSum")):
        if _only_user(g, t, op) is None:
            return "the stack, its codes or its values have other readers"
    if not g.users(node.output[0]) or any(u.op_type != "QuantizeLinear" for u in g.users(node.output[0])) \
            or node.output[0] in g.pinned:
        return "the sum is not requantized (read by an op other than QuantizeLinear)"
    shapes = [g.shape(u.input[0]) for u, _ in m.data["parts"]]
    if any(s is None or len(s) != 4 for s in shapes) or len({tuple(s) for s in shapes}) != 1:
        return "the parts are not 4-D maps of one static shape"
    s = g.const(q.input[1])
    if s is None or s.size != 1 or len(q.input) > 2 and q.input[2] and g.const(q.input[2]) is None:
        return "the stack's quantizer is not per-tensor with constant parameters"
    if len(shapes) * shapes[0][1] > target.max_channels:
        return f"{len(shapes)} x {shapes[0][1]} channels exceed the limit {target.max_channels}"
    return None


def rewrite(m: Match, g) -> str:
    node, dq, q, cat = m.nodes
    parts = m.data["parts"]
    shape = list(g.shape(parts[0][0].input[0]))
    n, c = len(parts), shape[1]
    ins = []
    for u, pair in parts:   # each part's values (through its own pair) without the stack axis
        x = u.input[0]
        if pair:
            g.set_input(pair[0], 0, x)
            for t in (pair[0].output[0], pair[1].output[0]):
                g.set_shape(t, shape)
            x = pair[1].output[0]
        g.remove(u)
        ins.append(x)
    chan = g.fresh(f"{cat.output[0]}/channels")
    g.make("Concat", ins, [chan], near=cat, origin=m.origin, name=g.fresh_node_name(f"{cat.name}/channels"), axis=1)
    g.set_shape(chan, [shape[0], n * c] + shape[2:], g.dtype(ins[0]))
    g.set_input(q, 0, chan)
    g.remove(cat)
    for t in (q.output[0], dq.output[0]):
        g.set_shape(t, [shape[0], n * c] + shape[2:])
    w = np.zeros((c, n * c, 1, 1), np.int8)
    for i in range(n):
        w[np.arange(c), i * c + np.arange(c), 0, 0] = 1
    codes = g.add_const(f"{node.name}/ones", w)
    w_s, w_z = g.add_const(f"{node.name}/ones_scale", np.float32(1)), g.add_const(f"{node.name}/ones_zp", np.int8(0))
    wf = g.fresh(f"{node.name}/ones_dq")
    g.make("DequantizeLinear", [codes, w_s, w_z], [wf], near=node, origin=m.origin, name=g.fresh_node_name(f"{node.name}/ones_dq"))
    g.set_shape(wf, list(w.shape), 1)
    g.make("Conv", [dq.output[0], wf], [node.output[0]], near=node, origin=m.origin,
           name=g.fresh_node_name(f"{node.name}/conv"), kernel_shape=[1, 1])
    g.remove(node)
    return f"stack of {n} maps summed -> channel Concat + 1x1 int8 conv of ones ({n * c} -> {c} channels)"


__all__ = ["NAME", "OPS", "match", "check", "rewrite"]
