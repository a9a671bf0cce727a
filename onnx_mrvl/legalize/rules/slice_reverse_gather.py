"""A ``Slice`` with a negative step (constant parameters, float data of static shape) -> one
``GatherElements`` per reversed axis with a constant index: ``idx = arange(dim)[start:end:step]``
(ONNX's negative-step clamping is Python's), broadcast to the output shape; the axes cut with
step 1 keep a forward ``Slice`` first.

``torch.flip`` / ``x[::-1]`` / ``tf.reverse`` export as ``Slice(starts=-1, ends=-INT64_MAX,
steps=-1)``: the backward direction of a hand-unrolled bidirectional LSTM (captcha-whisperer's
CRNN reverses its sequence before and after the backward cell) left both Slices on the CPU ("the
accelerator slices forward") and cut the model into 3 regions. Exact: fp16 values only move (the
accelerator's GatherElements, fuse/gather_elements.py, as reverse_sequence_gather uses)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, inp, is_float

NAME = "slice_reverse_gather"
OPS = ("Slice",)


def _cuts(g, node):
    """[(axis, start, end, step)] as given (not clamped) or None."""
    if len(node.input) < 5 or not inp(node, 4):
        return None
    vals = [g.const(inp(node, i)) if inp(node, i) else None for i in range(1, 5)]
    if any(inp(node, i) and v is None for i, v in zip(range(1, 5), vals)):
        return None
    starts, ends, axes, steps = (None if v is None else [int(x) for x in v.reshape(-1)] for v in vals)
    axes = axes if axes is not None else list(range(len(starts)))
    return list(zip(axes, starts, ends, steps))


def match(node, g) -> Optional[Match]:
    if node.op_type != "Slice" or node.domain not in ("", "ai.onnx"):
        return None
    cuts = _cuts(g, node)
    if not cuts or not any(st < 0 for _, _, _, st in cuts):
        return None
    return Match([node], {"cuts": cuts})


def check(m: Match, g, target) -> Optional[str]:
    x = m.node.input[0]
    shape = g.shape(x)
    if shape is None or not is_float(g, x) or g.is_const(x):
        return "not a float tensor of static shape"
    if any(st != 1 and st > 0 for _, _, _, st in m.data["cuts"]):
        return "a positive step other than 1 next to the reversal (strided_slice_* take those)"
    if any(not np.arange(shape[ax % len(shape)])[s:e:st].size for ax, s, e, st in m.data["cuts"]):
        return "an empty slice"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    x, y = node.input[0], node.output[0]
    shape = list(g.shape(x))
    rank = len(shape)
    fwd = [(ax % rank, s, e) for ax, s, e, st in m.data["cuts"] if st > 0]
    rev = [(ax % rank, s, e, st) for ax, s, e, st in m.data["cuts"] if st < 0]
    g.remove(node)
    cur = x
    if fwd:   # the forward cuts first, as a Slice of step 1
        t = g.fresh(f"{y}/forward")
        ins = [cur] + [g.add_const(f"{node.name}/{k}", np.array(v, np.int64)) for k, v in
                       zip(("starts", "ends", "axes"), zip(*[(s, e, ax) for ax, s, e in fwd]))]
        g.make("Slice", ins, [t], near=node, origin=m.origin, name=f"{node.name}/forward")
        for ax, s, e in fwd:
            shape[ax] = np.arange(shape[ax])[s:e].size
        g.set_shape(t, shape, g.dtype(x))
        cur = t
    for k, (ax, s, e, st) in enumerate(rev):
        rows = np.arange(shape[ax])[s:e:st]
        shape[ax] = rows.size
        view = [1] * rank
        view[ax] = rows.size
        idx = g.add_const(f"{node.name}/rows{ax}", np.ascontiguousarray(np.broadcast_to(rows.reshape(view), shape)).astype(np.int64))
        t = y if k == len(rev) - 1 else g.fresh(f"{y}/reversed{ax}")
        g.make("GatherElements", [cur, idx], [t], near=node, origin=m.origin, name=f"{node.name}/gather{ax}", axis=ax)
        if t != y:
            g.set_shape(t, list(shape), g.dtype(x))
        cur = t
    return f"Slice with step(s) {[st for *_, st in rev]} on axes {[a for a, *_ in rev]} -> GatherElements"
