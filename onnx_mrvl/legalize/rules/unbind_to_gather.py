"""``torch.unbind`` / ``qkv[i]`` written as a size-1 Split or Slice followed by a Squeeze of the same
axis -> one Gather of a scalar index on that axis (which drops the axis, as the Squeeze did).
timm's ``Attention`` (``q, k, v = qkv.reshape(B, N, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)``:
the TorchScript exporter writes Split + 3 Squeeze, the dynamo exporter 3 Slice + Squeeze), PARSeq,
DeiT, BEiT, Swin and most timm vision transformers; the Gather is what the fuser takes on 2-D to
5-D tensors (fuse/take.py). Parts on the leading axis read otherwise (a QDQ model puts a Q -> DQ
pair between the Split and each Squeeze; on 4-D / 5-D tensors only then, so that an image taken out
of a batch stays a Slice for fuse's batch rules) become one-element Gathers that keep the axis (the
Squeezes then are Reshapes). Exact: it moves the same elements."""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from .base import Match, attr, axes_of, inp

NAME = "unbind_to_gather"
OPS = ("Split", "Slice")


def _squeezes(g, name: str, axis: int, rank: int) -> Optional[List]:
    """The consumers of ``name`` when every one is a Squeeze of exactly ``axis``."""
    users = g.users(name)
    if not users or name in g.pinned:
        return None
    for u in users:
        if u.op_type != "Squeeze" or u.domain not in ("", "ai.onnx") or u.input[0] != name:
            return None
        axes = axes_of(g, u, 1)
        if not axes or len(axes) != 1 or axes[0] % rank != axis:
            return None
    return users


def _split_sizes(node, g, sx, axis) -> Optional[List[int]]:
    if node.op_type == "Split":
        sizes = attr(node, "split")
        if sizes is None and inp(node, 1):
            v = g.const(inp(node, 1))
            sizes = None if v is None else v.reshape(-1).tolist()
        if sizes is None:
            n = len(node.output)
            if sx[axis] % n:
                return None
            sizes = [sx[axis] // n] * n
        return [int(s) for s in sizes]
    return None


def _slice_start(node, g, sx) -> Optional[tuple]:
    """(axis, start) of a Slice of one element along one axis with constant operands."""
    if g.opset < 10:
        starts, ends, axes, steps = attr(node, "starts"), attr(node, "ends"), attr(node, "axes"), None
    else:
        vals = [g.const(inp(node, k)) if inp(node, k) else None for k in range(1, 5)]
        if any(v is None for v, k in zip(vals, range(1, 5)) if inp(node, k)):
            return None
        starts, ends, axes, steps = [None if v is None else v.reshape(-1).tolist() for v in vals]
    if starts is None or ends is None or len(starts) != 1:
        return None
    axis = int(axes[0]) % len(sx) if axes else 0
    if steps and int(steps[0]) != 1:
        return None
    n = sx[axis]
    s = int(starts[0])
    s = max(0, min(n, s + n if s < 0 else s))
    e = int(ends[0])
    e = max(0, min(n, e + n if e < 0 else e))
    return (axis, s) if e - s == 1 else None


def match(node, g) -> Optional[Match]:
    if node.op_type not in OPS or node.domain not in ("", "ai.onnx"):
        return None
    sx = g.shape(node.input[0])
    if sx is None or not sx:
        return None
    rank = len(sx)
    if node.op_type == "Split":
        axis = int(attr(node, "axis") or 0) % rank
        sizes = _split_sizes(node, g, sx, axis)
        if sizes is None or any(s != 1 for s in sizes) or len(sizes) != len(node.output):
            return None
        starts = list(range(len(sizes)))
        outs = list(node.output)
    else:
        found = _slice_start(node, g, sx)
        if found is None:
            return None
        axis, start = found
        starts, outs = [start], [node.output[0]]
    users = []
    for o in outs:
        sq = _squeezes(g, o, axis, rank)
        if sq is None:
            users = None
            break
        users.append(sq)
    if users is None:
        # parts of one element on the leading axis read otherwise (a QDQ model: Q -> DQ between the
        # Split and each Squeeze): one-element Gathers keeping the axis, which fuse takes
        if axis != 0 or rank < 3 or any(o in g.pinned for o in outs):
            return None
        if rank > 3 and not all(g.users(o) and all(u.op_type == "QuantizeLinear" for u in g.users(o))
                                for o in outs):
            return None     # 4-D / 5-D: the QDQ form only; an image taken out of a batch stays a Slice
        return Match([node], {"axis": axis, "starts": starts, "outs": outs, "users": None})
    return Match([node], {"axis": axis, "starts": starts, "outs": outs, "users": users})


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    node, axis = m.node, m.data["axis"]
    x = node.input[0]
    g.remove(node)
    if m.data["users"] is None:
        for start, out in zip(m.data["starts"], m.data["outs"]):
            idx = g.add_const(f"{node.name}/index{start}", np.array([start], np.int64))
            g.make("Gather", [x, idx], [out], near=node, origin=m.origin, name=f"{node.name}/gather{start}",
                   axis=axis)
        return f"{node.op_type} of size-1 parts on the leading axis -> {len(m.data['outs'])} one-element Gather"
    n = 0
    for start, squeezes in zip(m.data["starts"], m.data["users"]):
        idx = g.add_const(f"{node.name}/index{start}", np.array(start, np.int64))
        for sq in squeezes:
            g.remove(sq)
            g.make("Gather", [x, idx], [sq.output[0]], near=sq, origin=m.origin + [sq.name],
                   name=f"{sq.name}/gather", axis=axis)
            n += 1
    return f"{node.op_type} of size-1 parts + Squeeze on axis {axis} -> {n} Gather"
