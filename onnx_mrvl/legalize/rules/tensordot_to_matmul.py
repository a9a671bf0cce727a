"""``Reshape(FC(Reshape(x[..., K], [R, K])), [..., O])`` -> ``MatMul(x, W[K, O])`` (+ bias Add):
tf2onnx writes a Keras Dense on a 3-D+ tensor (tf.tensordot: CRNN / audio / transformer heads)
as a flatten to rows, a 2-D MatMul and a reshape back. The two reshapes move data across the
batch axis (CPU ops that cut the region around the FC); on the N-D tensor the fuse stage runs it as
one FC over rows (docs/fusion.md)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, inp

NAME = "tensordot_to_matmul"
OPS = ("Reshape",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx"):
        return None
    fc = g.producer.get(node.input[0])
    if fc is None or fc.op_type not in ("MatMul", "Gemm") or g.only_consumer(fc.output[0]) is not node:
        return None
    flat = g.producer.get(fc.input[0])
    if flat is None or flat.op_type != "Reshape" or g.only_consumer(flat.output[0]) is not fc:
        return None
    x = flat.input[0]
    sx, sf, sy = g.shape(x), g.shape(flat.output[0]), g.shape(node.output[0])
    if sx is None or sf is None or sy is None or len(sx) < 3 or len(sf) != 2:
        return None
    if sf[1] != sx[-1] or list(sy[:-1]) != list(sx[:-1]) or len(sy) != len(sx):
        return None
    if all(d == 1 for d in sx[1:-1]) and sx[0] <= g.target.max_batch:
        return None     # [N, 1, .., K]: matmul_to_gemm's own FC form (undoing it would loop)
    return Match([node, fc, flat], {"x": x})


def check(m: Match, g, target) -> Optional[str]:
    node, fc, flat = m.nodes
    w = g.const(fc.input[1])
    if w is None or w.ndim != 2:
        return "weight is not a constant 2-D tensor"
    b = None
    if fc.op_type == "Gemm":
        if attr(fc, "transA", 0) or attr(fc, "alpha", 1.0) != 1.0 or attr(fc, "beta", 1.0) != 1.0:
            return "Gemm is not canonical (transA / alpha / beta)"
        if attr(fc, "transB", 0):
            w = w.T
        if inp(fc, 2):
            b = g.const(fc.input[2])
            if b is None or b.size != w.shape[1]:
                return "bias is not a constant per output feature"
            b = b.reshape(-1)
    m.data.update(w=np.ascontiguousarray(w), b=b)
    return None


def rewrite(m: Match, g) -> str:
    node, fc, flat = m.nodes
    origin = m.origin
    x, w, b = m.data["x"], m.data["w"], m.data["b"]
    y = node.output[0]
    for n in m.nodes:
        g.remove(n)
    mid = g.fresh(f"{y}/matmul") if b is not None else y
    g.make("MatMul", [x, g.add_const(f"{fc.name}/W", w)], [mid], near=node, origin=origin,
           name=fc.name)           # the FC keeps its name (reports, decisions, diff)
    if b is not None:
        g.set_shape(mid, g.shape(x)[:-1] + (w.shape[1],), g.dtype(x))
        g.make("Add", [mid, g.add_const(f"{fc.name}/B", b)], [y], near=node, origin=origin,
               name=f"{fc.name}/bias")
    return f"flatten -> {fc.op_type} -> reshape back -> MatMul on {len(g.shape(x))}-D data"
