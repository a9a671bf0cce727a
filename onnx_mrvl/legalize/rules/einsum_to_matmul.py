"""Two-operand ``Einsum`` that is a (batched) matrix product -> ``Transpose`` / ``Reshape`` + ``MatMul``
(+ ``Reshape`` / ``Transpose`` back): MaxViT's attention as the dynamo exporter writes it
(``B G H I D, B G H J D -> B G H I J``), ``bhid,bhjd->bhij``, ``bld,dk->blk``.

Each letter of the equation is a batch letter (in both operands and the output), a contracted one
(both operands, not the output) or a free one (one operand and the output). Operand A becomes
``[batch, free_A, K]`` (its axes put in that order, then the free and the contracted axes each
merged into one), B ``[batch, K, free_B]``, the batch axes merged into one; the MatMul gives
``[batch, free_A, free_B]``, which is reshaped to the letters' sizes and transposed to the output's
order. Transposes and reshapes that change nothing are not made. Exact up to fp32 summation order
(onnxruntime's Einsum is itself a MatMul over such a layout). Not taken (left on the CPU with the
reason): one operand or three and more, an ellipsis, an implicit output, a letter repeated in an
operand (a diagonal) or only in one operand and not the output (a sum), shapes that are not
static, non-float operands, sizes that differ between the operands (broadcasting).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from .base import Match, attr

NAME = "einsum_to_matmul"
OPS = ("Einsum",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Einsum" or node.domain not in ("", "ai.onnx"):
        return None
    return Match([node])


def _parse(eq: str):
    """(letters of A, letters of B, letters of the output) or the reason."""
    eq = eq.replace(" ", "")
    if "..." in eq:
        return "an ellipsis in the equation"
    if "->" not in eq:
        return "no explicit output in the equation"
    lhs, out = eq.split("->")
    ops = lhs.split(",")
    if len(ops) != 2:
        return f"{len(ops)} operands (two are taken)"
    a, b = ops
    if any(len(set(t)) != len(t) for t in (a, b, out)):
        return "a letter repeated in one operand (a diagonal)"
    if any(c not in a and c not in b for c in out):
        return "an output letter in no operand"
    if any((c in a) != (c in b) and c not in out for c in a + b):
        return "a letter summed over one operand only"
    return a, b, out


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    eq = attr(node, "equation", "")
    parsed = _parse(eq if isinstance(eq, str) else eq.decode())
    if isinstance(parsed, str):
        return parsed
    a, b, out = parsed
    sa, sb = g.shape(node.input[0]), g.shape(node.input[1])
    if sa is None or sb is None or len(sa) != len(a) or len(sb) != len(b):
        return "operand shapes are not static"
    if g.dtype(node.input[0]) != 1 or g.dtype(node.input[1]) != 1:
        return "operands are not float32"
    size = dict(zip(a, sa))
    for c, d in zip(b, sb):
        if size.setdefault(c, d) != d:
            return f"letter {c!r} has size {size[c]} in A and {d} in B (broadcasting)"
    m.data.update(a=a, b=b, out=out, size=size,
                  batch=[c for c in out if c in a and c in b], k=[c for c in a if c in b and c not in out],
                  fa=[c for c in out if c in a and c not in b], fb=[c for c in out if c in b and c not in a])
    return None


def _arrange(g, x: str, have: str, order: List[str], merged: List[int], node, origin, tag: str) -> str:
    """``x`` (axes ``have``) transposed to ``order`` and reshaped to ``merged``, skipping no-ops."""
    perm = [have.index(c) for c in order]
    if perm != list(range(len(perm))):
        t = g.fresh(f"{x}/{tag}_t")
        g.make("Transpose", [x], [t], near=node, origin=origin, name=g.fresh_node_name(f"{node.name}/{tag}_t"),
               perm=perm)
        shape = g.shape(x)
        g.set_shape(t, [shape[p] for p in perm], g.dtype(x))
        x = t
    if list(g.shape(x)) != list(merged):
        r = g.fresh(f"{x}/{tag}_r")
        g.make("Reshape", [x, g.add_const(f"{node.name}/{tag}_shape", np.asarray(merged, np.int64))], [r],
               near=node, origin=origin, name=g.fresh_node_name(f"{node.name}/{tag}_r"))
        g.set_shape(r, merged, g.dtype(x))
        x = r
    return x


def rewrite(m: Match, g) -> str:
    node, d = m.node, m.data
    size, batch, k, fa, fb = d["size"], d["batch"], d["k"], d["fa"], d["fb"]
    prod = lambda cs: int(np.prod([size[c] for c in cs], dtype=np.int64))   # noqa: E731
    lead = [prod(batch)] if batch else []
    origin = m.origin
    g.remove(node)
    xa = _arrange(g, node.input[0], d["a"], batch + fa + k, lead + [prod(fa), prod(k)], node, origin, "a")
    xb = _arrange(g, node.input[1], d["b"], batch + k + fb, lead + [prod(k), prod(fb)], node, origin, "b")
    y, out = node.output[0], d["out"]
    natural = batch + fa + fb
    unmerged = [size[c] for c in natural]
    mm_shape = lead + [prod(fa), prod(fb)]
    final_perm = [natural.index(c) for c in out]
    need_reshape = list(mm_shape) != unmerged
    need_t = final_perm != list(range(len(final_perm)))
    mm = g.fresh(f"{y}/matmul") if need_reshape or need_t else y
    g.make("MatMul", [xa, xb], [mm], near=node, origin=origin, name=node.name)
    g.set_shape(mm, mm_shape, 1)
    cur = mm
    if need_reshape:
        r = g.fresh(f"{y}/unmerge") if need_t else y
        g.make("Reshape", [cur, g.add_const(f"{node.name}/out_shape", np.asarray(unmerged, np.int64))], [r],
               near=node, origin=origin, name=g.fresh_node_name(f"{node.name}/out_r"))
        g.set_shape(r, unmerged, 1)
        cur = r
    if need_t:
        g.make("Transpose", [cur], [y], near=node, origin=origin, name=g.fresh_node_name(f"{node.name}/out_t"),
               perm=final_perm)
    return (f"Einsum {d['a']},{d['b']}->{out} -> MatMul [{'x'.join(map(str, lead + [prod(fa), prod(k)]))}] x "
            f"[{'x'.join(map(str, lead + [prod(k), prod(fb)]))}]")
