"""Split / Slice on the channel axis of a 3-D tensor [N, C, L] -> the same on [N, C, 1, L]: Reshape in,
the 4-D op on axis 1, Reshape each output back (as conv_1d_to_2d does for 1-D convs). The gated linear
unit of conformer / WaveNet-style audio blocks (``F.glu(x, dim=1)`` after a Conv1d) and YOLOv8's
decoding split of ``[N, 4*reg_max + nc, anchors]`` then become channel slices of 4-D data, which fuse
runs on the accelerator (Slice2D)."""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import helper

from .base import Match, attr, inp, is_float, match_rank, reshape, slice_params

NAME = "split_3d_to_4d"
OPS = ("Split", "Slice")


def _slice_range(g, node, c):
    """(start, end) on axis 1 of a Slice that touches no other axis, else a reason."""
    shape = g.shape(node.input[0])
    cuts = slice_params(g, node, shape)
    if isinstance(cuts, str):
        return cuts
    rng = (0, c)
    for ax, s, e, st in cuts:
        if ax == 1 and st == 1:
            rng = (s, e)
        elif (s, e, st) != (0, shape[ax], 1):
            return f"slice on axis {ax} (step {st})"
    return rng


def match(node, g) -> Optional[Match]:
    return match_rank(node, g, OPS, 3)


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if g.is_const(node.input[0]) or not is_float(g, node.input[0]):
        return "constant or non-float input"
    if any(o and g.shape(o) is None for o in node.output):
        return "output shapes are not static"
    if g.shape(node.input[0])[0] > target.max_batch:
        # [N, C, 1, L] would be an image batch above the limit; the 3-D op holds rows (no limit)
        return f"batch {g.shape(node.input[0])[0]} above max_batch: the 3-D op keeps its rows"
    if node.op_type == "Split":
        if attr(node, "axis", 0) % 3 != 1:
            return "split on a non-channel axis"
        if inp(node, 1) and not g.is_const(node.input[1]):
            return "split sizes are not a constant"
        return None
    rng = _slice_range(g, node, g.shape(node.input[0])[1])
    if isinstance(rng, str):
        return rng
    m.data["range"] = rng
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    n, c, l = g.shape(node.input[0])
    origin = m.origin
    g.remove(node)
    x4 = reshape(g, node.input[0], [n, c, 1, l], near=node, origin=origin, tag="to4d")
    outs4 = []
    for o in node.output:
        if not o:
            outs4.append("")
            continue
        so = g.shape(o)
        o4 = g.fresh(f"{o}/4d")
        g.set_shape(o4, [so[0], so[1], 1, so[2]], g.dtype(o))
        outs4.append(o4)
    if node.op_type == "Split":
        new = g.make("Split", [x4] + list(node.input[1:]), outs4, near=node, origin=origin, name=node.name)
        for a in node.attribute:
            new.attribute.append(helper.make_attribute("axis", 1) if a.name == "axis" else a)
    else:
        s, e = m.data["range"]
        ins = [x4] + [g.add_const(f"{node.name}/{k}", np.array([v], np.int64))
                      for k, v in (("starts", s), ("ends", e), ("axes", 1))]
        g.make("Slice", ins, outs4, near=node, origin=origin, name=node.name)
    for o, o4 in zip(node.output, outs4):
        if o:
            reshape(g, o4, list(g.shape(o)), near=node, origin=origin, out=o, tag=f"to3d_{o}")
    return f"3-D {node.op_type} on channels -> 4-D on a unit H axis"
