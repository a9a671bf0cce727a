"""2-D ConvTranspose -> nearest Resize by the stride, Mul by a constant 0/1 mask (zero insertion:
one value per stride x stride cell), Conv with the flipped, transposed kernel. Exact: the mask keeps
x[i] at s*i and zeroes the copies, and ConvTranspose is the correlation of that zero-inserted map with
the flipped kernel (begin pad (k-1)*d - pad_begin, end pad (k-1)*d + 1 + output_padding - pad_end -
s). DBNet / PP-OCR DB heads, U-Net and FPN decoders then run on the accelerator (Resize, Mul, Conv)
instead of leaving an op with no accelerator layer on the CPU; the conv does s*s times the MACs of the
transposed one."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, inp

NAME = "conv_transpose_to_conv"
OPS = ("ConvTranspose",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "ConvTranspose" or node.domain not in ("", "ai.onnx"):
        return None
    sx, sw = g.shape(node.input[0]), g.shape(node.input[1])
    if sx is None or sw is None or len(sx) != 4 or len(sw) != 4:
        return None
    return Match([node])


def _params(node, k):
    s = list(attr(node, "strides") or [1, 1])
    d = list(attr(node, "dilations") or [1, 1])
    p = list(attr(node, "pads") or [0, 0, 0, 0])
    op = list(attr(node, "output_padding") or [0, 0])
    begin = [(k[i] - 1) * d[i] - p[i] for i in range(2)]
    end = [(k[i] - 1) * d[i] + 1 + op[i] - p[i + 2] - s[i] for i in range(2)]
    return s, d, begin, end


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if g.opset < 11:
        return "opset < 11 (no Resize with scales)"
    if not g.is_const(node.input[1]) or (inp(node, 2) and not g.is_const(node.input[2])):
        return "weight or bias is not constant"
    if g.shape(node.output[0]) is None:
        return "output shape is not static"
    auto_pad = attr(node, "auto_pad", "NOTSET")
    if (auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad) not in ("NOTSET", ""):
        return "auto_pad"
    if attr(node, "output_shape") is not None:
        return "output_shape attribute"
    k = list(g.shape(node.input[1])[2:])
    s, d, begin, end = _params(node, k)
    if max(s) > target.resize_max_scale:
        return f"stride {s} exceeds the nearest-resize limit {target.resize_max_scale}"
    if min(begin + end) < 0:
        return f"pads/output_padding give negative conv pads {begin + end}"
    _, _, h, w = g.shape(node.input[0])
    want = [s[i] * ((h, w)[i] - 1) + (attr(node, "output_padding") or [0, 0])[i] + (k[i] - 1) * d[i] + 1
            - (attr(node, "pads") or [0, 0, 0, 0])[i] - (attr(node, "pads") or [0, 0, 0, 0])[i + 2] for i in range(2)]
    if list(g.shape(node.output[0])[2:]) != want:
        return "output shape does not follow the pads"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    x, out = node.input[0], node.output[0]
    n, cin, h, w = g.shape(x)
    wt = g.const(node.input[1])
    groups = int(attr(node, "group", 1))
    k = list(wt.shape[2:])
    cout = wt.shape[1] * groups
    s, d, begin, end = _params(node, k)
    origin = m.origin
    g.remove(node)
    dt = g.dtype(x)
    up = g.fresh(f"{x}/up")
    scales = g.add_const(f"{node.name}/scales", np.array([1, 1, s[0], s[1]], np.float32))
    g.make("Resize", [x, "", scales], [up], near=node, origin=origin, name=f"{node.name}/upsample",
           mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    g.set_shape(up, [n, cin, h * s[0], w * s[1]], dt)
    mask = np.zeros((1, 1, h * s[0], w * s[1]), wt.dtype)
    mask[..., ::s[0], ::s[1]] = 1
    zi = g.fresh(f"{x}/zero_insert")
    g.make("Mul", [up, g.add_const(f"{node.name}/mask", mask)], [zi], near=node, origin=origin,
           name=f"{node.name}/zero_insert")
    g.set_shape(zi, [n, cin, h * s[0], w * s[1]], dt)
    # [Cin, Cout/G, kh, kw] -> [Cout, Cin/G, kh, kw], spatially flipped
    wc = wt.reshape(groups, cin // groups, cout // groups, k[0], k[1]).transpose(0, 2, 1, 3, 4)
    wc = np.ascontiguousarray(wc.reshape(cout, cin // groups, k[0], k[1])[:, :, ::-1, ::-1])
    ins = [zi, g.add_const(f"{node.name}/W", wc)] + ([node.input[2]] if inp(node, 2) else [])
    g.make("Conv", ins, [out], near=node, origin=origin, name=node.name, kernel_shape=k, strides=[1, 1],
           dilations=d, group=groups, pads=[begin[0], begin[1], end[0], end[1]])
    return f"ConvTranspose stride {s} -> Resize + zero-insert Mul + {k[0]}x{k[1]} Conv"
