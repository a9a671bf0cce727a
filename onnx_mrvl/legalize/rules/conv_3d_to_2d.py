"""3-D Conv / MaxPool / AveragePool of a small depth -> the 2-D op with the depth folded into channels.

Conv: ``Reshape [N,C,D,H,W] -> [N,C*D,H,W]`` (the same data), one 2-D Conv whose weight
``W2[o*Do+od, c*D+d] = W[o, c, t]`` for every depth tap t with ``d = od*sd - pd + t*dd`` inside the input
(taps that read depth padding get no weight), bias repeated per output depth, then
``Reshape [N,O*Do,Ho,Wo] -> [N,O,Do,Ho,Wo]``. Exact. Depth 1 (a 3-D conv over one frame) is the plain
squeeze: ``W2 = W[:, :, t]`` of the one live tap. A deeper input costs ``Do*D / live taps`` times the
MACs of the 3-D conv (each output depth reads every input depth, mostly with zero weights): folded
while that factor stays within ``MAX_FOLD_FACTOR``; groups only at depth 1 (folding a depthwise 3-D conv
of depth D > 1 would give a grouped, not depthwise, conv).

Pools: a window of one depth (kernel 1, stride 1, no depth pads), or an input and output of depth 1
(MaxPool; AveragePool with ``count_include_pad=0``: the depth padding is not counted) pool each depth
slice alone: ``Reshape [N,C*D,H,W]``, the 2-D pool, ``Reshape`` back.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import helper

from .base import Match, attr, match_rank, reshape

NAME = "conv_3d_to_2d"
OPS = ("Conv", "MaxPool", "AveragePool")
MAX_FOLD_FACTOR = 4


def match(node, g) -> Optional[Match]:
    return match_rank(node, g, OPS, 5)


def _geometry(node, g):
    sx = g.shape(node.input[0])
    k = list(attr(node, "kernel_shape") or g.shape(node.input[1])[2:])
    strides = list(attr(node, "strides") or [1, 1, 1])
    dil = list(attr(node, "dilations") or [1, 1, 1])
    pads = list(attr(node, "pads") or [0] * 6)
    return sx, k, strides, dil, pads


def _live_taps(depth: int, out_depth: int, k: int, s: int, d: int, pb: int):
    """(output depth, input depth, tap) for every depth tap that reads the input."""
    return [(od, od * s - pb + t * d, t) for od in range(out_depth) for t in range(k)
            if 0 <= od * s - pb + t * d < depth]


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if attr(node, "auto_pad", "NOTSET") != "NOTSET":
        return "auto_pad not yet resolved"
    sy = g.shape(node.output[0])
    if sy is None or len(sy) != 5:
        return "output shape is not static"
    if len(node.output) > 1 and any(o and g.used(o) for o in node.output[1:]):
        return "MaxPool indices output is used"
    sx, k, s, d, pads = _geometry(node, g)
    depth, out_depth = sx[2], sy[2]
    if node.op_type != "Conv":
        per_slice = k[0] == 1 and s[0] == 1 and pads[0] == pads[3] == 0
        single = (depth == 1 and out_depth == 1 and any(t * d[0] == pads[0] for t in range(k[0]))
                  and (node.op_type == "MaxPool" or not attr(node, "count_include_pad", 0)))
        if not (per_slice or single):
            return (f"3-D pool window over depth {depth} (kernel {k[0]}, stride {s[0]}, pads {pads[0]},{pads[3]}) "
                    f"mixes depth slices")
        return None
    if not g.is_const(node.input[1]) or (len(node.input) > 2 and node.input[2] and not g.is_const(node.input[2])):
        return "weight or bias is not constant"
    group = int(attr(node, "group", 1))
    if group != 1 and depth != 1:
        return f"grouped 3-D conv (group {group}) of depth {depth} > 1"
    live = _live_taps(depth, out_depth, k[0], s[0], d[0], pads[0])
    if not live:
        return "no depth tap reads the input"
    factor = out_depth * depth / len(live)
    if factor > MAX_FOLD_FACTOR:
        return (f"depth {depth} folded into channels would cost {factor:.1f}x the MACs "
                f"(limit {MAX_FOLD_FACTOR}x)")
    w = g.shape(node.input[1])
    if sx[1] * depth > target.max_channels or w[0] * out_depth > target.max_channels:
        return f"{sx[1]}x{depth} input / {w[0]}x{out_depth} output channels exceed {target.max_channels}"
    m.data["live"] = live
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    sx, k, s, d, pads = _geometry(node, g)
    n, c, depth, h, w = sx
    sy = g.shape(node.output[0])
    out_depth = sy[2]
    origin = m.origin
    g.remove(node)
    x4 = reshape(g, node.input[0], [n, c * depth, h, w], near=node, origin=origin, tag="fold_depth")
    attrs = {}
    if node.op_type == "Conv":
        wt = g.const(node.input[1])
        o, cg = wt.shape[:2]
        w2 = np.zeros((o, out_depth, cg, depth, k[1], k[2]), wt.dtype)
        for od, di, t in m.data["live"]:
            w2[:, od, :, di] += wt[:, :, t]
        inputs = [x4, g.add_const(f"{node.name}/W2d", w2.reshape(o * out_depth, cg * depth, k[1], k[2]))]
        if len(node.input) > 2 and node.input[2]:
            inputs.append(g.add_const(f"{node.name}/B2d", np.repeat(g.const(node.input[2]), out_depth)))
        attrs.update(dilations=d[1:], group=int(attr(node, "group", 1)))
    else:
        inputs = [x4]
        for a in node.attribute:
            if a.name in ("ceil_mode", "count_include_pad", "storage_order"):
                attrs[a.name] = helper.get_attribute_value(a)
        if attr(node, "dilations") is not None:
            attrs["dilations"] = d[1:]
    attrs.update(kernel_shape=k[1:], strides=s[1:], pads=[pads[1], pads[2], pads[4], pads[5]])
    y4 = g.fresh(f"{node.output[0]}/2d")
    g.make(node.op_type, inputs, [y4], near=node, origin=origin, name=node.name, **attrs)
    g.set_shape(y4, [sy[0], sy[1] * out_depth, sy[3], sy[4]], g.dtype(node.output[0]))
    reshape(g, y4, list(sy), near=node, origin=origin, out=node.output[0], tag="unfold_depth")
    return f"3-D {node.op_type} of depth {depth} -> 2-D with the depth folded into channels"
