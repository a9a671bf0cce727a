"""A layer norm's centering that an optimizer moved before a Transpose goes back after it:

    m = ReduceMean(x, [a], keepdims=1); t = Transpose(x - m, perm)   with perm[-1] == a
        -> xt = Transpose(x, perm); t = xt - ReduceMean(xt, [-1], keepdims=1)

onnxruntime's transpose optimizer (``quant_pre_process``, the basic optimizations of ``quantize=
"int8"``) pushes the ``Transpose -> LayerNorm(last axis)`` of paddle2onnx's SVTR neck (PP-OCRv5 / v6
rec: ``flatten(2).transpose([0, 2, 1])`` then LayerNorm) through the mean and the Sub; the variance,
the scale and the shift stay after it. That split form is no layer norm layernorm_canonical knows:
ReduceMean and Sub stayed on the CPU (PP-OCRv5 rec int8: 2 regions -> 1). Exact (a permutation).
Rules: the mean read only by the Sub, the Sub's output only by the Transpose, x of a known rank.

onnxruntime, running the model as given, sums that mean over the strided axis (in order, when the
axes before it are all 1), not over the last as a ReduceMean after the Transpose would: the new
ReduceMean is marked (``ort_plan.mark_strided_mean``) so that a QDQ layer norm built on it
(fuse's qdq_layernorm, ``mean_sum`` = "strided") sums its mean in that order, bit for bit.

QDQ exports quantizing every op (AMD Quark: PP-OCRv4 rec's first SVTR LayerNorm) write the same form
with per-tensor steps between: ``ReduceMean -> [Mul(k)] -> Q -> DQ -> Sub -> Q -> DQ -> Transpose ->
Q -> DQ`` (the Transpose's pair with its input's scale and zero point). The steps are element-wise
with scalars, so they move with the mean unchanged (transposed shapes); the Transpose's own pair is an
identity on the codes the Sub's pair made and goes with the Transpose."""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from .base import Match, attr, axes_of
from .qtensor import same_param
from ...ort_plan import mark_strided_mean

NAME = "center_before_transpose"
OPS = ("Transpose",)
_CHAIN = ("Mul", "QuantizeLinear", "DequantizeLinear")


def _pair_before(g, t: str) -> Optional[list]:
    """[Q, DQ] when ``t`` is the output of a per-tensor ``Q -> DQ`` pair, else None."""
    dq = g.producer.get(t)
    q = g.producer.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
    if q is None or q.op_type != "QuantizeLinear" or len(q.input) < 2 or len(dq.input) < 2:
        return None
    ok = same_param(g, q.input[1], dq.input[1]) and same_param(g, q.input[2] if len(q.input) > 2 else "",
                                                             dq.input[2] if len(dq.input) > 2 else "")
    return [q, dq] if ok and g.const(q.input[1]) is not None and g.const(q.input[1]).size == 1 else None


def _same_pair(g, a: list, b: list) -> bool:
    zp = [n.input[2] if len(n.input) > 2 else "" for n in (a[0], b[0])]
    return same_param(g, a[0].input[1], b[0].input[1]) and same_param(g, *zp)


def _mean_chain(g, t: str, x: str):
    """(the mean, the scalar-per-tensor nodes between it and the Sub, first to last) when ``t`` is
    ``ReduceMean(x)`` through optional ``Mul(., scalar)`` / per-tensor ``Q -> DQ`` steps, else None."""
    chain: List = []
    while True:
        p = g.producer.get(t)
        if p is None:
            return None
        if p.op_type == "ReduceMean":
            return (p, chain[::-1]) if p.input[0] == x else None
        if p.op_type not in _CHAIN or len(chain) > 3:
            return None
        consts = p.input[1:]
        if not all(c == "" or (g.is_const(c) and g.const(c).size == 1) for c in consts):
            return None
        chain.append(p)
        t = p.input[0]


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx") or node.op_type != "Transpose" or not node.input:
        return None
    pair = _pair_before(g, node.input[0]) or []   # a QDQ export's pair on the difference
    sub = g.producer.get(pair[0].input[0] if pair else node.input[0])
    if sub is None or sub.op_type != "Sub" or sub.domain not in ("", "ai.onnx") or len(sub.input) != 2:
        return None
    mc = _mean_chain(g, sub.input[1], sub.input[0])
    if mc is None:
        return None
    mean, chain = mc
    return Match([node, sub, mean], {"pair": pair, "chain": chain})


def _single_path(g, nodes) -> bool:
    """Each node's output read only by the next."""
    return all(g.only_consumer(a.output[0]) is b and a.output[0] not in g.outputs for a, b in zip(nodes, nodes[1:]))


def check(m: Match, g, target) -> Optional[str]:
    node, sub, mean = m.nodes
    sx = g.shape(sub.input[0])
    if sx is None:
        return "the centred tensor has no known rank"
    r = len(sx)
    perm = attr(node, "perm")
    perm = list(range(r))[::-1] if perm is None else [int(p) for p in perm]
    axes = axes_of(g, mean, 1)
    if axes is None or len(axes) != 1 or not int(attr(mean, "keepdims", 1)):
        return "not a mean over one kept axis"
    if len(perm) != r or perm[-1] != axes[0] % r:
        return "the Transpose does not move the mean's axis last"
    pair, chain = m.data["pair"], m.data["chain"]
    if not _single_path(g, [mean] + chain + [sub] + pair + [node]):
        return "the mean or the centred tensor has other readers"
    if node.output[0] in g.outputs:
        return "a graph output inside the form"
    after = []   # the Transpose's own pair (its input's scale and zero point): an identity on those codes
    users = g.users(node.output[0])
    if pair and len(users) == 1:
        after = _pair_before(g, g.users(users[0].output[0])[0].output[0]) \
            if users[0].op_type == "QuantizeLinear" and len(g.users(users[0].output[0])) == 1 else None
        after = after if after and after[0] is users[0] and _same_pair(g, pair, after) \
            and after[1].output[0] not in g.outputs else []
    lead = sx[:axes[0] % r]
    m.data.update(perm=perm, r=r, strided=all(isinstance(d, int) and d == 1 for d in lead), after=after)
    return None


def rewrite(m: Match, g) -> str:
    node, sub, mean = m.nodes
    x, perm, r = sub.input[0], m.data["perm"], m.data["r"]
    pair, chain, after = m.data["pair"], m.data["chain"], m.data["after"]
    for n in (node, mean) + tuple(after):
        g.remove(n)
    xt = g.fresh(f"{node.name}/x")
    g.make("Transpose", [x], [xt], near=mean, origin=m.origin, name=node.name, perm=perm)
    mt = mean.output[0] if chain or pair else g.fresh(f"{mean.name}/t")   # steps between: they read it
    if attr(mean, "axes") is not None or g.opset < 18:
        red = g.make("ReduceMean", [xt], [mt], near=mean, origin=m.origin, name=mean.name, axes=[r - 1], keepdims=1)
    else:
        ax = g.add_const(f"{mean.name}/axes", np.array([r - 1], np.int64))
        red = g.make("ReduceMean", [xt, ax], [mt], near=mean, origin=m.origin, name=mean.name, keepdims=1)
    if m.data["strided"]:   # onnxruntime's in-order sum over the strided axis (its RK path)
        mark_strided_mean(red)
    for n in [red] + chain + [sub] + pair:   # element-wise with scalars: the same values, transposed
        s = g.shape(n.output[0])
        if s is not None:
            g.set_shape(n.output[0], [s[p] for p in perm], g.dtype(n.output[0]))
    if not chain and not pair:
        g.remove(sub)
        g.make("Sub", [xt, mt], [node.output[0]], near=sub, origin=m.origin, name=sub.name)
    else:
        g.set_input(sub, 0, xt)
        g.replace_uses(after[1].output[0] if after else node.output[0], (pair or [sub])[-1].output[0])
    return f"the mean over axis {perm[-1]} and its Sub moved after the Transpose {perm}"
