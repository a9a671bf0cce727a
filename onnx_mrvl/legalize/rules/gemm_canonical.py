"""Gemm with a constant B -> the FC form Gemm(X[N,K], W[O,K], b[O], alpha=1, beta=1, transA=0,
transB=1). alpha folds into W, beta into C; a full-matrix C stays as an Add after the Gemm;
transA=1 becomes a Transpose of A; an A of rank > 2 is flattened to [N, K] by a Reshape."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, inp, reshape

NAME = "gemm_canonical"
OPS = ("Gemm",)


def _is_canonical(node, g) -> bool:
    b, c = inp(node, 1), inp(node, 2)
    return (attr(node, "alpha", 1.0) == 1.0 and attr(node, "beta", 1.0) == 1.0
            and attr(node, "transA", 0) == 0 and attr(node, "transB", 0) == 1
            and g.is_const(b) and len(g.shape(b)) == 2
            and (not c or (g.is_const(c) and g.shape(c) == g.shape(b)[:1]))
            and len(g.shape(node.input[0]) or (0, 0)) == 2)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx"):
        return None
    if not g.is_const(inp(node, 1)) or _is_canonical(node, g):
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    sa = g.shape(node.input[0])
    if sa is None:
        return "shape of A is not static"
    if len(sa) != 2 and attr(node, "transA", 0):
        return "transA=1 on an input of rank != 2"
    if g.dtype(node.input[0]) != g.dtype(node.input[1]):
        return "A and B differ in element type"
    w = g.const(node.input[1])
    if w.ndim != 2:
        return "B is not 2-D"
    c = inp(node, 2)
    if c and not g.is_const(c) and attr(node, "beta", 1.0) != 1.0:
        return "C is a computed tensor scaled by beta != 1"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    alpha, beta = attr(node, "alpha", 1.0), attr(node, "beta", 1.0)
    a, c, y = node.input[0], inp(node, 2), node.output[0]
    w = g.const(node.input[1])
    w = w if attr(node, "transB", 0) else w.T
    if alpha != 1.0:
        w = (w.astype(np.float64) * alpha).astype(w.dtype)
    o = w.shape[0]
    sa = g.shape(a)
    g.remove(node)
    notes = []
    if len(sa) != 2:
        a = reshape(g, a, [sa[0], int(np.prod(sa[1:]))], near=node, origin=m.origin, tag="flatten")
        notes.append(f"A {list(sa)} flattened")
    if attr(node, "transA", 0):
        at = g.fresh(f"{a}/T")
        g.make("Transpose", [a], [at], near=node, origin=m.origin, name=f"{node.name}/transA",
               perm=[1, 0])
        a = at
        notes.append("transA -> Transpose")
    inputs = [a, g.add_const(f"{node.name}/W", np.ascontiguousarray(w))]
    post = None
    if c:
        cv = g.const(c)
        if cv is not None:
            cv = (cv.astype(np.float64) * beta).astype(cv.dtype) if beta != 1.0 else cv
            if cv.size == 1 or cv.shape in ((o,), (1, o)):
                inputs.append(g.add_const(f"{node.name}/B", np.broadcast_to(cv.reshape(-1), (o,))
                                          .astype(cv.dtype)))
            else:
                post = g.add_const(f"{node.name}/C", cv)
                notes.append("full C -> Add")
        else:
            post = c
            notes.append("computed C -> Add")
    if post is None:
        g.make("Gemm", inputs, [y], near=node, origin=m.origin, name=node.name, transB=1)
    else:
        mid = g.fresh(f"{y}/gemm")
        g.make("Gemm", inputs, [mid], near=node, origin=m.origin, name=node.name, transB=1)
        g.make("Add", [mid, post], [y], near=node, origin=m.origin, name=f"{node.name}/addC")
    return "Gemm -> FC form" + (f" ({'; '.join(notes)})" if notes else "")
