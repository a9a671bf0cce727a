"""``ReverseSequence`` with constant lengths -> ``GatherElements`` along the time axis with a
constant index (a fixed permutation of the rows: exact, fp16 values only move).

    y[t, b] = x[len[b] - 1 - t, b] for t < len[b], x[t, b] past it  (time / batch axes 0 / 1 or 1 / 0)

Keras' backward recurrent layers (``go_backwards``, the backward half of ``Bidirectional``) reverse
their input and output with ``tf.reverse``, which tf2onnx writes as ReverseSequence of the full
length ``T`` for every batch row (the lengths a Shape / Gather / Expand chain that constant folding
turns into an initializer). The accelerator has no reverse; its GatherElements
(fuse/gather_elements.py) reads the rows in that order. Check: lengths constant, int, in [0, T]
(ONNX: larger is undefined), float data of static shape.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, is_float

NAME = "reverse_sequence_gather"
OPS = ("ReverseSequence",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "ReverseSequence" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    lens = g.const(node.input[1])
    shape = g.shape(node.input[0])
    if lens is None:
        return f"sequence lengths '{node.input[1]}' are not constant (data-dependent reversal)"
    if shape is None or not is_float(g, node.input[0]):
        return "not a float tensor of static shape"
    t_ax, b_ax = int(attr(node, "time_axis", 0)), int(attr(node, "batch_axis", 1))
    lens = np.asarray(lens).reshape(-1)
    if lens.size != shape[b_ax] or lens.min(initial=0) < 0 or lens.max(initial=0) > shape[t_ax]:
        return f"sequence lengths {lens.tolist()} do not fit time {shape[t_ax]} x batch {shape[b_ax]}"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    shape = g.shape(node.input[0])
    t_ax, b_ax = int(attr(node, "time_axis", 0)), int(attr(node, "batch_axis", 1))
    lens = np.asarray(g.const(node.input[1])).reshape(-1).astype(np.int64)
    t = np.arange(shape[t_ax])[:, None]
    rows = np.where(t < lens[None, :], lens[None, :] - 1 - t, t)          # [T, B]
    if t_ax > b_ax:
        rows = rows.T
    view = [1] * len(shape)
    view[t_ax], view[b_ax] = shape[t_ax], shape[b_ax]
    index = np.ascontiguousarray(np.broadcast_to(rows.reshape(view), shape)).astype(np.int64)
    idx = g.add_const(f"{node.name}/rows", index)
    g.remove(node)
    g.make("GatherElements", [node.input[0], idx], [node.output[0]], near=node, origin=m.origin,
           name=f"{node.name}/gather", axis=t_ax)
    return f"reversal of lengths {sorted(set(lens.tolist()))} along axis {t_ax} -> GatherElements"
