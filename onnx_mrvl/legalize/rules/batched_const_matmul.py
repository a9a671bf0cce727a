"""``MatMul(x [B, M, K], C [B, K, N])`` with a constant 3-D C (one weight matrix per batch entry)
-> per entry b ``MatMul(Gather(x, b, axis 0), C[b])`` (an FC each), the B results concatenated
along the first axis and reshaped to [B, M, N]; when every C[b] is the same, one ``MatMul(x, C[0])``.

DeBERTa-v2/v3's and SEW-D's disentangled attention multiply the per-head queries / keys by the
projected relative-position embeddings, which constant folding turns into a [B * H, d, 2S]
constant: a MatMul neither an FC (2-D weights) nor a BatchMatMul (two activations) takes, left on
the CPU between the score MatMul and the Softmax (a region cut per layer). Exact: the same products
and sums per output (each a 2-D MatMul). Rules: float tensors with static shapes, x of rank 3 with
x's first axis B (no broadcast), B <= ``MAX_BATCH``."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, is_float, shape_const

NAME = "batched_const_matmul"
OPS = ("MatMul",)
MAX_BATCH = 64


def match(node, g) -> Optional[Match]:
    if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    x, c = node.input
    if g.is_const(x) or not g.is_const(c) or g.const(c).ndim != 3:
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    x, c = m.node.input
    w = g.const(c)
    if not is_float(g, x) or w.dtype.kind != "f":
        return "not a float MatMul"
    return shape_reason(g, x, m.node.output[0], w.shape)


def shape_reason(g, x: str, y: str, wshape) -> Optional[str]:
    """Why ``MatMul(x, C)`` with C of shape ``wshape`` [B, K, N] is not one [M, K] x [K, N] product per
    entry of x's first axis (also the QDQ form's check), or None."""
    sx, sy = g.shape(x), g.shape(y)
    if sx is None or sy is None or len(sx) != 3 or any(d is None for d in sx):
        return "x is not a 3-D tensor with a static shape"
    if sx[0] != wshape[0] or sx[2] != wshape[1]:
        return f"x {list(sx)} and the constant {list(wshape)} are not one [M, K] x [K, N] per batch entry"
    if wshape[0] > MAX_BATCH:
        return f"{wshape[0]} weight matrices exceed {MAX_BATCH}"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    x, c = node.input
    w = g.const(c)
    b, mm, n = g.shape(x)[0], g.shape(x)[1], w.shape[2]
    dt = g.dtype(x)
    if all(np.array_equal(w[0], w[k]) for k in range(1, b)):
        g.remove(node)
        g.make("MatMul", [x, g.add_const(f"{node.name}/weight", np.ascontiguousarray(w[0]))], [node.output[0]],
               near=node, origin=m.origin, name=node.name)
        return f"MatMul by {b} equal [K, N] matrices -> one MatMul"
    parts = []
    g.remove(node)
    for k in range(b):
        xk, yk = g.fresh(f"{x}/entry{k}"), g.fresh(f"{node.output[0]}/entry{k}")
        g.make("Gather", [x, g.add_const(f"{node.name}/entry{k}", np.array(k, np.int64))], [xk], near=node,
               origin=m.origin, name=f"{node.name}/take{k}", axis=0)
        g.set_shape(xk, [mm, w.shape[1]], dt)
        g.make("MatMul", [xk, g.add_const(f"{node.name}/weight{k}", np.ascontiguousarray(w[k]))], [yk], near=node,
               origin=m.origin, name=f"{node.name}/entry{k}")
        g.set_shape(yk, [mm, n], dt)
        parts.append(yk)
    rows = g.fresh(f"{node.output[0]}/rows")
    g.make("Concat", parts, [rows], near=node, origin=m.origin, name=f"{node.name}/rows", axis=0)
    g.set_shape(rows, [b * mm, n], dt)
    g.make("Reshape", [rows, shape_const(g, node, [b, mm, n])], [node.output[0]], near=node, origin=m.origin,
           name=node.name)
    return f"MatMul by {b} constant [K, N] matrices -> {b} MatMuls of the entries, concatenated"
