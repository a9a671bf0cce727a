"""A Concat along the last axis of pieces of one tensor, each ``Slice(x)`` or ``Neg(Slice(x))``
over that axis (step 1, constant bounds) -> ``MatMul(x, P)`` with P a constant [d, d'] matrix
holding one +1 or -1 per column: rotary embeddings' ``rotate_half(x) = cat(-x[..., d/2:],
x[..., :d/2])`` (Llama, Qwen2, Mistral, GPT-NeoX, wav2vec2-Conformer, ESM ...) as the exporters
write it.

Exact: each output is one input times +-1 plus zeros, in float32 and in fp16 with fp32
accumulation (for finite x). The MatMul is an ordinary FC on the accelerator (d MACs per output
value, d = the head size); before, the Slices, the Neg and the Concat stayed on the CPU and cut
every attention block of a rotary model in two regions. Rules: a float tensor with a static shape,
every Slice / Neg read only by the Concat, at most ``MAX_D`` values along the axis."""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import TensorProto, helper

from .base import Match, attr, axes_of

NAME = "signed_permute"
OPS = ("Concat",)
MAX_D = 1024
FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE)


def _std(n) -> bool:
    return n is not None and n.domain in ("", "ai.onnx")


def _slice_range(g, s, rank: int, d: int):
    """[start, end) of a Slice over the last axis with step 1 and constant bounds, else None."""
    if g.opset < 10:
        starts, ends, axes = attr(s, "starts"), attr(s, "ends"), attr(s, "axes")
        steps = None
    else:
        if len(s.input) < 3 or not all(g.is_const(t) for t in s.input[1:] if t):
            return None
        starts, ends = [g.const(s.input[k]).reshape(-1).tolist() for k in (1, 2)]
        axes = axes_of(g, s, 3) or None
        steps = g.const(s.input[4]).reshape(-1).tolist() if len(s.input) > 4 and s.input[4] else None
    if starts is None or ends is None or len(starts) != 1 or len(ends) != 1:
        return None
    if (axes is None and rank != 1) or (axes is not None and (len(axes) != 1 or int(axes[0]) % rank != rank - 1)):
        return None
    if steps is not None and list(steps) != [1]:
        return None
    lo, hi = int(starts[0]), int(ends[0])
    lo, hi = (lo + d if lo < 0 else lo), (hi + d if hi < 0 else hi)
    lo, hi = max(0, min(lo, d)), max(0, min(hi, d))
    return (lo, hi) if hi > lo else None


def match(node, g) -> Optional[Match]:
    if not _std(node) or node.op_type != "Concat" or len(node.input) < 2:
        return None
    pieces, x, nodes = [], None, [node]
    for t in node.input:
        p = g.producer.get(t)
        sign = 1.0
        if _std(p) and p.op_type == "Neg":
            nodes.append(p)
            sign, t, p = -1.0, p.input[0], g.producer.get(p.input[0])
        if not _std(p) or p.op_type != "Slice":
            return None
        if x is None:
            x = p.input[0]
        if p.input[0] != x:
            return None
        nodes.append(p)
        pieces.append((p, sign))
    return Match(nodes, {"x": x, "pieces": pieces})


def check(m: Match, g, target) -> Optional[str]:
    node, x = m.node, m.data["x"]
    sx = g.shape(x)
    if sx is None or any(d is None or d <= 0 for d in sx) or g.dtype(x) not in FLOATS:
        return "the sliced tensor is not a float32 / float16 / double tensor with a static shape"
    rank, d = len(sx), sx[-1]
    if int(attr(node, "axis", 0)) % rank != rank - 1:
        return "the Concat is not along the last axis"
    if d > MAX_D:
        return f"{d} values along the axis exceed {MAX_D} (the permutation matrix would be d x d)"
    for n in m.nodes[1:]:
        if n.output[0] in g.outputs or len(g.users(n.output[0])) != 1:
            return f"{n.op_type} '{n.name}' has readers outside the concat"
    ranges = []
    for s, _ in m.data["pieces"]:
        r = _slice_range(g, s, rank, d)
        if r is None:
            return f"Slice '{s.name}' is not a constant step-1 range of the last axis"
        ranges.append(r)
    m.data["ranges"] = ranges
    return None


def rewrite(m: Match, g) -> str:
    node, x = m.node, m.data["x"]
    d = g.shape(x)[-1]
    cols = []
    for (lo, hi), (_, sign) in zip(m.data["ranges"], m.data["pieces"]):
        cols += [(k, sign) for k in range(lo, hi)]
    p = np.zeros((d, len(cols)), np.float32)
    for j, (k, sign) in enumerate(cols):
        p[k, j] = sign
    w = g.add_const(f"{node.name}/signed_permutation", p.astype(helper.tensor_dtype_to_np_dtype(g.dtype(x))))
    for n in m.nodes:
        g.remove(n)
    g.make("MatMul", [x, w], [node.output[0]], near=node, origin=m.origin, name=node.name)
    negs = sum(1 for _, s in m.data["pieces"] if s < 0)
    return f"Concat of {len(cols)} sliced{f' (partly negated)' if negs else ''} values of the last axis -> MatMul by a signed permutation"
