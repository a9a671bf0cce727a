"""Two broadcasts along the last axis as MatMuls by ones (FCs on the accelerator, where ReduceSum and a
widening element-wise op have no accelerator op):

    ReduceSum(x, [last], keepdims) -> MatMul(x, ones [n, 1]) (+ Reshape dropping the axis)
    Mul / Add(x [..., 1], C [..., N]) with a constant C of the result's shape
        -> Mul / Add(MatMul(x, ones [1, N]), C)

WavLM's gated relative position bias (``view(..., 2, 4).sum(-1)`` of the gate projection, then the
[H, T, 1] gate times the constant [H, T, T] bias) left both on the CPU: a region cut per layer.
The first sums in fp32 (the order may differ from onnxruntime's: fp32 rounding only); the second
is exact (x * 1). Rules: float tensors with static shapes computed at run time, n <= ``MAX_N``,
N <= ``MAX_N``; not a QDQ sum nor ``x / sum(x)`` (``base.sum_kept``); the widening op only when x and C differ in the last axis alone."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, axes_of, is_float, shape_const, sum_kept

NAME = "last_axis_ones"
OPS = ("ReduceSum", "Mul", "Add")
MAX_N = 4096


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx") or node.op_type not in OPS or not node.input:
        return None
    if node.op_type == "ReduceSum":
        return Match([node]) if not g.is_const(node.input[0]) else None
    if len(node.input) != 2 or g.is_const(node.input[0]) == g.is_const(node.input[1]):
        return None
    return Match([node])


def _static(g, t) -> bool:
    s = g.shape(t)
    return s is not None and all(d is not None and d > 0 for d in s)


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    x = node.input[0] if not g.is_const(node.input[0]) else node.input[1]
    if not is_float(g, x) or not _static(g, x) or not _static(g, node.output[0]):
        return "not a float tensor with a static shape"
    sx, sy = list(g.shape(x)), list(g.shape(node.output[0]))
    if len(sx) < 2:
        return "a scalar or 1-D tensor"
    if node.op_type == "ReduceSum":
        axes = axes_of(g, node, 1)
        if axes is None or len(axes) != 1 or axes[0] % len(sx) != len(sx) - 1:
            return "not a sum over the last axis alone"
        if attr(node, "noop_with_empty_axes", 0):
            return "noop_with_empty_axes"
        if sx[-1] > MAX_N:
            return f"a sum over {sx[-1]} values (at most {MAX_N})"
        kept = sum_kept(g, node)
        if kept:
            return kept
        m.data.update(x=x, keep=int(attr(node, "keepdims", 1)))
        return None
    c = g.const(node.input[1] if x == node.input[0] else node.input[0])
    if c.dtype.kind != "f" or list(c.shape) != sy or len(sx) != len(sy):
        return "the constant is not a float tensor of the result's shape"
    if sx[-1] != 1 or sy[-1] == 1 or sx[:-1] != sy[:-1] or sy[-1] > MAX_N:
        return "the constant does not widen the tensor along the last axis alone"
    m.data.update(x=x)
    return None


def rewrite(m: Match, g) -> str:
    node, x = m.node, m.data["x"]
    sx, sy = list(g.shape(x)), list(g.shape(node.output[0]))
    dt = g.dtype(x)
    npt = np.float32 if dt == 1 else np.float16 if dt == 10 else np.float64
    if node.op_type == "ReduceSum":
        ones = g.add_const(f"{node.name}/ones", np.ones((sx[-1], 1), npt))
        g.remove(node)
        if m.data["keep"]:
            g.make("MatMul", [x, ones], [node.output[0]], near=node, origin=m.origin, name=node.name)
        else:
            t = g.fresh(f"{node.output[0]}/sum")
            g.make("MatMul", [x, ones], [t], near=node, origin=m.origin, name=f"{node.name}/matmul")
            g.set_shape(t, sx[:-1] + [1], dt)
            g.make("Reshape", [t, shape_const(g, node, sx[:-1])], [node.output[0]], near=node, origin=m.origin,
                   name=node.name)
        return f"ReduceSum over the last axis ({sx[-1]}) -> MatMul by ones"
    wide = g.fresh(f"{x}/widened")
    ins = [wide if i == x else i for i in node.input]
    g.remove(node)
    g.make("MatMul", [x, g.add_const(f"{node.name}/ones", np.ones((1, sy[-1]), npt))], [wide], near=node,
           origin=m.origin, name=f"{node.name}/widen")
    g.set_shape(wide, sy, dt)
    g.make(node.op_type, ins, [node.output[0]], near=node, origin=m.origin, name=node.name)
    return f"{node.op_type} widening the last axis 1 -> {sy[-1]} by a constant -> MatMul by ones first"
