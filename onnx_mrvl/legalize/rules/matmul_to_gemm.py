"""MatMul(X[N,K], W[K,O] constant) -> Gemm FC form; a following Add of a constant [O] / [1,O]
folds into the bias. X of shape [N,1,..,1,K] is reshaped to [N,K] and the result back, unless N
exceeds target.max_batch (a time-major [T,1,K] sequence): an FC over rows of an N-D input is fused
as such (fuse/fc_rows.py), so that MatMul and any general N-D one stay a MatMul."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, reshape

NAME = "matmul_to_gemm"
OPS = ("MatMul",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
        return None
    w = g.const(node.input[1])
    if w is None or w.ndim != 2 or g.is_const(node.input[0]):
        return None
    sx = g.shape(node.input[0])
    if sx is None or len(sx) < 2 or (len(sx) > 2 and any(d != 1 for d in sx[1:-1])):
        return None
    if len(sx) > 2 and sx[0] > g.target.max_batch:
        return None     # time-major [T,1,K] (RNN heads): a Gemm would have batch T; fuse takes N-D rows

    add = g.only_consumer(node.output[0])
    bias = None
    if add is not None and add.op_type == "Add" and len(add.input) == 2:
        other = add.input[1] if add.input[0] == node.output[0] else add.input[0]
        bv = g.const(other)
        if bv is not None and bv.shape in ((w.shape[1],), (1, w.shape[1])) \
                and bv.dtype == w.dtype and len(sx) == 2:
            bias = bv.reshape(-1)
    return Match([node] + ([add] if bias is not None else []), {"bias": bias, "sx": sx})


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if g.dtype(node.input[0]) != g.dtype(node.input[1]):
        return "X and W differ in element type"
    if g.opset < 7:
        return "opset < 7"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    w = g.const(node.input[1])
    sx = m.data["sx"]
    x = node.input[0]
    y = m.nodes[-1].output[0]
    for n in m.nodes:
        g.remove(n)
    if len(sx) > 2:
        x = reshape(g, x, [sx[0], sx[-1]], near=node, origin=m.origin, tag="to2d")
    inputs = [x, g.add_const(f"{node.name}/W", np.ascontiguousarray(w.T))]
    if m.data["bias"] is not None:
        inputs.append(g.add_const(f"{node.name}/B", np.ascontiguousarray(m.data["bias"])))
    if len(sx) > 2:
        mid = g.fresh(f"{y}/fc")
        g.make("Gemm", inputs, [mid], near=node, origin=m.origin, name=node.name, transB=1)
        reshape(g, mid, list(sx[:-1]) + [w.shape[1]], near=node, origin=m.origin, out=y,
                tag="from2d")
    else:
        g.make("Gemm", inputs, [y], near=node, origin=m.origin, name=node.name, transB=1)
    return "MatMul" + ("+Add" if m.data["bias"] is not None else "") + " -> Gemm FC form"
