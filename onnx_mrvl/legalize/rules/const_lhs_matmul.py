"""``MatMul(C, x)`` with a constant first operand -> ``Transpose(MatMul(Transpose(x), C^T))`` (the last
two axes swapped each time): the constant becomes the second operand, the FC's weights (or one
weight matrix per batch entry: batched_const_matmul).

DETR-style decoders (Hugging Face DETR, Conditional-DETR, Table-Transformer) start from zero
targets plus learned query embeddings: in the first decoder layer the cross-attention's queries
are constants folded by the exporter, and ``q @ k^T`` is a MatMul whose first operand is constant,
which no accelerator op takes (an FC's weights are its second operand): left on the CPU in the
middle of the decoder (a region cut). Exact: the same products and sums (``(x^T C^T)^T = C x``).
Rules: float tensors with static shapes, x of rank >= 2; C 2-D, or with batch axes of ones, or
batch axes equal to x's (x's leading unit axes added: no other broadcast), at most ``MAX_BATCH`` batch entries."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, is_float, reshape

NAME = "const_lhs_matmul"
OPS = ("MatMul",)
MAX_BATCH = 64


def match(node, g) -> Optional[Match]:
    if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    c, x = node.input
    if not g.is_const(c) or g.is_const(x):
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    c, x = m.node.input
    w = g.const(c)
    sx, sy = g.shape(x), g.shape(m.node.output[0])
    if not is_float(g, x) or w.dtype.kind != "f":
        return "not a float MatMul"
    if sx is None or sy is None or any(d is None for d in sx) or len(sx) < 2 or w.ndim < 2:
        return "x is not a tensor of rank >= 2 with a static shape"
    sx = [1] * (len(sy) - len(sx)) + list(sx)       # x's broadcast to the result's rank
    if w.shape[-1] != sx[-2]:
        return f"the constant {list(w.shape)} and x {list(sx)} are not [M, K] x [K, N]"
    lead = w.shape[:-2]
    if int(np.prod(lead, dtype=np.int64)) == 1:
        return None
    if tuple(lead) != tuple(sx[:-2]):
        return f"the constant's batch axes {list(lead)} broadcast against x's {list(sx[:-2])}"
    if int(np.prod(lead, dtype=np.int64)) > MAX_BATCH:
        return f"more than {MAX_BATCH} constant matrices"
    return None


def _swap(rank: int):
    return list(range(rank - 2)) + [rank - 1, rank - 2]


def rewrite(m: Match, g) -> str:
    node = m.node
    c, x = node.input
    w = np.asarray(g.const(c))
    sx, sy, dt = list(g.shape(x)), list(g.shape(node.output[0])), g.dtype(x)
    if len(sx) < len(sy):                            # leading unit axes: the broadcast written out
        sx = [1] * (len(sy) - len(sx)) + sx
        x = reshape(g, x, sx, near=node, origin=m.origin, tag="ranked")
    mm, k, n = w.shape[-2], w.shape[-1], sx[-1]
    lead = list(sx[:-2])
    batch = int(np.prod(lead, dtype=np.int64))
    g.remove(node)
    xt = g.fresh(f"{x}/swapped")
    g.make("Transpose", [x], [xt], near=node, origin=m.origin, name=f"{node.name}/swap_x", perm=_swap(len(sx)))
    g.set_shape(xt, lead + [n, k], dt)
    if int(np.prod(w.shape[:-2], dtype=np.int64)) == 1:      # one matrix: an FC on x^T's rows
        wt = np.ascontiguousarray(w.reshape(mm, k).T)
        prod = g.fresh(f"{node.output[0]}/swapped")
        g.make("MatMul", [xt, g.add_const(f"{node.name}/weight", wt)], [prod], near=node, origin=m.origin,
               name=f"{node.name}/fc")
        g.set_shape(prod, lead + [n, mm], dt)
        detail = f"constant [{mm}, {k}] first -> Transpose, MatMul by its transpose, Transpose"
    else:                                                     # one matrix per batch entry
        flat = reshape(g, xt, [batch, n, k], near=node, origin=m.origin, tag="entries")
        wt = np.ascontiguousarray(np.swapaxes(w.reshape(batch, mm, k), 1, 2))
        rows = g.fresh(f"{node.output[0]}/entries")
        g.make("MatMul", [flat, g.add_const(f"{node.name}/weights", wt)], [rows], near=node, origin=m.origin,
               name=f"{node.name}/fc")
        g.set_shape(rows, [batch, n, mm], dt)
        prod = reshape(g, rows, lead + [n, mm], near=node, origin=m.origin, tag="unentries")
        detail = f"{batch} constant [{mm}, {k}] matrices first -> Transpose, batched MatMul by their transposes, Transpose"
    g.make("Transpose", [prod], [node.output[0]], near=node, origin=m.origin, name=node.name,
           perm=_swap(len(sy)))
    return detail
