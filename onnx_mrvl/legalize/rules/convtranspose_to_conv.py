"""2-D ConvTranspose (Keras Conv2DTranspose, PyTorch ConvTranspose2d: UNet / DB / FPN decoders)
-> zero insertion + a stride-1 Conv with the flipped kernel, all of it accelerator ops.

``ConvTranspose(x, W, B; strides s, pads, dilations d, output_padding, group)`` equals a Conv
(stride 1, dilation d, kernel ``flip(W)`` with its in/out axes swapped per group) over ``x``
with ``s - 1`` zeros inserted between pixels and ``d*(k-1) - pad_begin`` /
``d*(k-1) - pad_end + output_padding`` zeros around. The zero insertion is a nearest Resize by
``s`` (a pixel repeat) times a constant 0/1 mask that keeps the first pixel of every ``s x s``
block; the ``s - 1`` zeros it leaves after the last pixel are counted into the Conv's end pad.
The Conv does ``s*s`` times the transposed convolution's multiply-accumulates (most of them by
zero), but on the accelerator instead of a CPU round trip in the middle of a decoder.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import TensorProto

from .base import Match, attr, inp
from .convtranspose_phases import match  # noqa: F401  (the same: a 2-D ConvTranspose with static shapes)

NAME = "convtranspose_to_conv"
OPS = ("ConvTranspose",)


def _pads(node, sx, sy, k, s, d, op):
    """(begin, end) pads per spatial axis, or a reason."""
    auto = attr(node, "auto_pad", "NOTSET")
    if auto == "NOTSET" and attr(node, "output_shape") is None:
        p = list(attr(node, "pads") or [0, 0, 0, 0])
        return [(p[0], p[2]), (p[1], p[3])]
    out = []
    for a in range(2):
        total = s[a] * (sx[2 + a] - 1) + op[a] + d[a] * (k[a] - 1) + 1 - sy[2 + a]
        if total < 0 or total % 2:
            # the split of an odd total differs between the ONNX spec and onnxruntime
            return f"auto_pad {auto} / output_shape with total padding {total} (odd or negative)"
        out.append((total // 2, total // 2))
    return out


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    sx, sy = m.data["sx"], m.data["sy"]
    if g.dtype(node.input[0]) != TensorProto.FLOAT:
        return "not float32"
    w = g.const(node.input[1])
    if w is None or (inp(node, 2) and not g.is_const(node.input[2])):
        return "weight or bias is not constant"
    if w.ndim != 4:
        return "not a 2-D ConvTranspose"
    k = list(attr(node, "kernel_shape") or w.shape[2:])
    s = list(attr(node, "strides") or [1, 1])
    d = list(attr(node, "dilations") or [1, 1])
    op = list(attr(node, "output_padding") or [0, 0])
    group = attr(node, "group", 1)
    if list(w.shape[2:]) != k or w.shape[0] != sx[1] or sx[1] % group:
        return "weight shape does not match kernel_shape / input channels"
    pads = _pads(node, sx, sy, k, s, d, op)
    if isinstance(pads, str):
        return pads
    conv_pads = []
    for a in range(2):
        begin = d[a] * (k[a] - 1) - pads[a][0]
        end = d[a] * (k[a] - 1) - pads[a][1] + op[a] - (s[a] - 1)
        if begin < 0 or end < 0:
            return f"padding {pads[a]} crops more than the kernel reaches (axis {2 + a})"
        conv_pads.append((begin, end))
    limit = target.max_pad["conv"]
    if max(max(p) for p in conv_pads) > limit:
        return f"the equivalent Conv pads {conv_pads} exceed target.max_pad ({limit})"
    if max(s) > target.resize_max_scale:
        return f"stride {s} > target.resize_max_scale ({target.resize_max_scale})"
    for a in range(2):
        expect = sx[2 + a] * s[a] + conv_pads[a][0] + conv_pads[a][1] - d[a] * (k[a] - 1)
        if expect != sy[2 + a]:
            return f"output size {sy[2 + a]} != {expect} computed from the attributes"
    m.data.update(k=k, s=s, d=d, group=group, conv_pads=conv_pads)
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    sx = m.data["sx"]
    k, s, d, group, conv_pads = (m.data[x] for x in ("k", "s", "d", "group", "conv_pads"))
    origin = m.origin
    x = node.input[0]
    w = g.const(node.input[1])
    c, og = w.shape[0], w.shape[1]
    # [C, O/g, kh, kw] -> [g, C/g, O/g, kh, kw] -> [g, O/g, C/g, kh, kw] -> [O, C/g, kh, kw], flipped
    wc = w.reshape(group, c // group, og, k[0], k[1]).transpose(0, 2, 1, 3, 4)
    wc = np.ascontiguousarray(wc.reshape(group * og, c // group, k[0], k[1])[:, :, ::-1, ::-1])
    g.remove(node)
    if s != [1, 1]:
        hs, ws = sx[2] * s[0], sx[3] * s[1]
        up = g.fresh(f"{x}/repeat")
        scales = g.add_const(f"{node.name}/scales",
                             np.array([1, 1, s[0], s[1]], np.float32))
        g.make("Resize", [x, "", scales], [up], near=node, origin=origin,
               name=f"{node.name}/repeat", mode="nearest",
               coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        g.set_shape(up, [sx[0], sx[1], hs, ws], g.dtype(x))
        mask = np.zeros((1, 1, hs, ws), np.float32)
        mask[:, :, ::s[0], ::s[1]] = 1.0
        z = g.fresh(f"{x}/zero_inserted")
        g.make("Mul", [up, g.add_const(f"{node.name}/mask", mask)], [z], near=node,
               origin=origin, name=f"{node.name}/zero_insert")
        g.set_shape(z, [sx[0], sx[1], hs, ws], g.dtype(x))
        x = z
    ins = [x, g.add_const(f"{node.name}/W", wc)]
    if inp(node, 2):
        ins.append(node.input[2])
    g.make("Conv", ins, [node.output[0]], near=node, origin=origin, name=f"{node.name}/conv",
           kernel_shape=k, strides=[1, 1], dilations=d, group=group,
           pads=[conv_pads[0][0], conv_pads[1][0], conv_pads[0][1], conv_pads[1][1]])
    return (f"stride {s} ConvTranspose -> Resize x{s} + zero mask + Conv "
            f"(pads {conv_pads})")
