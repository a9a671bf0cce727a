"""InstanceNormalization / GroupNormalization -> LayerNormalization over one axis + a per-channel
affine (Mul, Add), which fuse takes as Mrvl LayerNorm and Mul2D / Add2D:

    InstanceNormalization(x [N,C,*S], s, b)  ->  Reshape [N,C,prod S] -> LayerNormalization(axis -1,
        scale 1) -> Reshape [N,C,*S] -> Mul(s [C,1..]) -> Add(b [C,1..])
    GroupNormalization(x [N,C,*S], s, b, G)  ->  Reshape [N,G,C/G prod S] -> LayerNormalization(axis -1,
        scale 1) -> Reshape [N,C,*S] -> Mul(s per channel) -> Add(b per channel)

Instance norm normalises each (n, c) over the spatial axes, group norm each (n, group) over its
channels and spatial axes: both are a layer norm over the last axis of that view. torch.onnx writes
GroupNorm (wav2vec2 / HuBERT feature extractors, diffusion U-Nets) as ``Reshape [0, G, -1] ->
InstanceNormalization(ones, zeros) -> Reshape -> Mul -> Add``; the opset-18/21 GroupNormalization op
takes a per-group (18-20) or per-channel (21) scale. A Reshape that already is the [N,C,L] view is
not written; a Mul by ones / Add of zeros neither. The LayerNorm is written in opset 17 (a model
below is raised when its ops mean the same there, ``opset_bump``, else the rule is skipped).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ...ort_plan import mark_instance_norm
from .base import Match, attr, reshape
from .contrib_ops import LN_OPSET, opset_reason, raise_opset

NAME = "group_norm"
RESTORABLE = True   # a float re-expression: put back when none of it is offloaded (split/restore.py)
OPS = ("InstanceNormalization", "GroupNormalization")


def match(node, g) -> Optional[Match]:
    if node.op_type not in OPS or node.domain not in ("", "ai.onnx"):
        return None
    sx = g.shape(node.input[0])
    return Match([node]) if sx is not None and len(sx) >= 3 else None


def _affine(node, g) -> Optional[tuple]:
    """Per-channel (scale, bias) float32 arrays [C], or None when not constant."""
    s, b = g.const(node.input[1]), g.const(node.input[2]) if len(node.input) > 2 else None
    if s is None or b is None:
        return None
    c = g.shape(node.input[0])[1]
    s, b = s.astype(np.float32).reshape(-1), b.astype(np.float32).reshape(-1)
    if node.op_type == "GroupNormalization" and g.opset < 21 and s.size != c:
        groups = int(attr(node, "num_groups"))
        s, b = np.repeat(s, c // groups), np.repeat(b, c // groups)   # opset 18: one scale per group
    return (s, b) if s.size == c and b.size == c else None


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    sx = g.shape(node.input[0])
    if any(d <= 0 for d in sx):    # the output has the input's shape (onnx infers none for GroupNormalization)
        return "shapes are not static"
    if _affine(node, g) is None:
        return "scale or bias is not a constant of one value per channel"
    if node.op_type == "GroupNormalization":
        groups = attr(node, "num_groups")
        if not groups or sx[1] % int(groups):
            return f"num_groups {groups} does not divide the {sx[1]} channels"
        if attr(node, "stash_type", 1) != 1:
            return "stash_type is not float32"
    reason = opset_reason(g)
    if reason:
        return f"LayerNormalization needs opset {LN_OPSET}: {reason}"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    raise_opset(g)
    x, y = node.input[0], node.output[0]
    sx = list(g.shape(x))
    n, c = sx[0], sx[1]
    groups = int(attr(node, "num_groups")) if node.op_type == "GroupNormalization" else c
    length = int(np.prod(sx[1:])) // groups
    eps = float(attr(node, "epsilon", 1e-5))
    scale, bias = _affine(node, g)
    origin = m.origin
    g.remove(node)
    view = [n, groups, length]
    steps = [(op, val) for op, val, neutral in (("Mul", scale, 1.0), ("Add", bias, 0.0)) if not np.all(val == neutral)]
    v = x if sx == view else reshape(g, x, view, near=node, origin=origin, tag="gn_view")
    ln = y if sx == view and not steps else g.fresh(f"{y}/ln")
    ones = g.add_const(f"{node.name}/ln_scale", np.ones(length, np.float32))
    lnode = g.make("LayerNormalization", [v, ones], [ln], near=node, origin=origin, name=f"{node.name}/ln",
                   axis=-1, epsilon=eps)
    if node.op_type == "InstanceNormalization":   # onnxruntime's InstanceNorm kernel sums in another order
        mark_instance_norm(lnode)
    g.set_shape(ln, view, g.dtype(x))
    out = ln if sx == view else reshape(g, ln, sx, near=node, origin=origin, tag="gn_back",
                                        out=None if steps else y)
    bshape = [c] + [1] * (len(sx) - 2)
    for k, (op, val) in enumerate(steps):
        dst = y if k == len(steps) - 1 else g.fresh(f"{y}/gn_{op.lower()}")
        g.make(op, [out, g.add_const(f"{node.name}/gn_{op.lower()}", val.reshape(bshape))], [dst], near=node,
               origin=origin, name=f"{node.name}/{op.lower()}")
        g.set_shape(dst, sx, g.dtype(x))
        out = dst
    return f"{node.op_type} -> LayerNormalization over {length} values ({groups} groups) and a per-channel affine"

