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
(fuse's qdq_layernorm, ``mean_sum`` = "strided") sums its mean in that order, bit for bit."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, axes_of
from ...ort_plan import mark_strided_mean

NAME = "center_before_transpose"
OPS = ("Transpose",)


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx") or node.op_type != "Transpose" or not node.input:
        return None
    sub = g.producer.get(node.input[0])
    if sub is None or sub.op_type != "Sub" or sub.domain not in ("", "ai.onnx") or len(sub.input) != 2:
        return None
    mean = g.producer.get(sub.input[1])
    if mean is None or mean.op_type != "ReduceMean" or mean.input[0] != sub.input[0]:
        return None
    return Match([node, sub, mean])


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
    if g.only_consumer(mean.output[0]) is not sub or g.only_consumer(sub.output[0]) is not node:
        return "the mean or the centred tensor has other readers"
    if mean.output[0] in g.outputs or sub.output[0] in g.outputs:
        return "a graph output inside the form"
    lead = sx[:axes[0] % r]
    m.data.update(perm=perm, r=r, strided=all(isinstance(d, int) and d == 1 for d in lead))
    return None


def rewrite(m: Match, g) -> str:
    node, sub, mean = m.nodes
    x, perm, r = sub.input[0], m.data["perm"], m.data["r"]
    for n in (node, sub, mean):
        g.remove(n)
    xt = g.fresh(f"{node.name}/x")
    g.make("Transpose", [x], [xt], near=mean, origin=m.origin, name=node.name, perm=perm)
    mt = g.fresh(f"{mean.name}/t")
    if attr(mean, "axes") is not None or g.opset < 18:
        red = g.make("ReduceMean", [xt], [mt], near=mean, origin=m.origin, name=mean.name, axes=[r - 1], keepdims=1)
    else:
        ax = g.add_const(f"{mean.name}/axes", np.array([r - 1], np.int64))
        red = g.make("ReduceMean", [xt, ax], [mt], near=mean, origin=m.origin, name=mean.name, keepdims=1)
    if m.data["strided"]:   # onnxruntime's in-order sum over the strided axis (its RK path)
        mark_strided_mean(red)
    g.make("Sub", [xt, mt], [node.output[0]], near=sub, origin=m.origin, name=sub.name)
    return f"the mean over axis {perm[-1]} and its Sub moved after the Transpose {perm}"
