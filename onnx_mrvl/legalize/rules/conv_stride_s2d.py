"""Conv with a stride above target.max_stride (audio front ends: Conv1d kernel 400 stride 160,
patch embeddings) -> space-to-depth + a stride-1 Conv.

On every axis whose stride s is too large: when the length is a multiple of s, the begin pad is
rounded up to whole blocks (the difference becomes leading zero taps of the kernel) and the Conv pads
whole blocks; otherwise the input is cut/zero-padded (Slice/Pad) to s * (out - 1 + ceil(k/s))
samples starting at -pad_begin. Then Reshape [N,C,H/fh,fh,W/fw,fw] -> Transpose [N,fh,fw,C,H/fh,W/fw]
-> Reshape [N,fh*fw*C,H/fh,W/fw]; the Conv weight is re-indexed alike
(W'[o,(a*fw+b)*C+c,t,u] = W[o,c,t*fh+a,u*fw+b], zero beyond the kernel). Axes within the limit keep
their stride, pads and dilation. A kernel still above max_kernel is split by conv_kernel_split.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import helper

from .base import Match, attr, inp, reshape

# Not a rule of its own: conv_kernel_split dispatches here (same op, same place in the order).


def match(node, g) -> Optional[Match]:
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx"):
        return None
    sw = g.shape(node.input[1])
    strides = attr(node, "strides")
    if sw is None or len(sw) != 4 or strides is None or max(strides) <= g.target.max_stride:
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if not g.is_const(node.input[1]) or (inp(node, 2) and not g.is_const(node.input[2])):
        return "weight or bias is not constant"
    sx, sy = g.shape(node.input[0]), g.shape(node.output[0])
    if sx is None or sy is None or len(sx) != 4:
        return "shapes are not static"
    if attr(node, "pads") is None:
        return "attributes not explicit yet"
    if attr(node, "group", 1) != 1:
        return "grouped conv"
    strides = list(attr(node, "strides"))
    dil = list(attr(node, "dilations") or [1, 1])
    f = [s if s > target.max_stride else 1 for s in strides]
    if any(fi > 1 and d != 1 for fi, d in zip(f, dil)):
        return "dilated axis with a large stride"
    if sx[1] * f[0] * f[1] > target.max_channels:
        return f"space-to-depth would need {sx[1] * f[0] * f[1]} channels"
    if g.opset < 11:
        return "opset < 11 Pad/Slice have no input form"
    m.data.update(f=f, sx=sx, sy=sy, strides=strides, dil=dil)
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    f, (n, c, h, wd), sy = m.data["f"], m.data["sx"], m.data["sy"]
    strides, dil = m.data["strides"], m.data["dil"]
    w = g.const(node.input[1])
    o, _, kh, kw = w.shape
    pads = list(attr(node, "pads"))
    origin = m.origin
    g.remove(node)
    size, kern, lo, hi = [h, wd], [kh, kw], [0, 0], [0, 0]
    shift, cpad = [0, 0], [pads[0], pads[1], pads[2], pads[3]]   # leading zero taps, Conv pads
    limit = g.target.max_pad["conv"]
    for ax in range(2):
        if f[ax] == 1:
            continue
        s, k, p = f[ax], kern[ax], pads[ax]
        e = -(-p // s) * s - p                    # begin pad rounded up to whole blocks ...
        k2 = -(-(k + e) // s)                      # ... the difference as leading zero taps
        end = sy[2 + ax] - 1 + k2 - size[ax] // s - (p + e) // s
        if size[ax] % s == 0 and (p + e) // s <= limit and 0 <= end <= limit:
            shift[ax], kern[ax] = e, k2            # no data movement: blocks padded by the Conv
            cpad[ax], cpad[ax + 2] = (p + e) // s, end
            continue
        k2 = -(-k // s)                            # cut / zero-pad the input to whole blocks
        length = s * (sy[2 + ax] - 1 + k2)
        lo[ax], hi[ax] = p, length - p - size[ax]
        size[ax], kern[ax] = length, k2
        cpad[ax] = cpad[ax + 2] = 0
    x = node.input[0]
    dtype = g.dtype(x)
    if any(v < 0 for v in hi):                    # trailing samples no output window reads
        cut = g.fresh(f"{x}/s2d_cut")
        ends = [h + min(hi[0], 0), wd + min(hi[1], 0)]
        g.make("Slice", [x, g.add_const(f"{node.name}/cut_starts", [0, 0], np.int64),
                         g.add_const(f"{node.name}/cut_ends", ends, np.int64),
                         g.add_const(f"{node.name}/cut_axes", [2, 3], np.int64)], [cut],
               near=node, origin=origin, name=f"{node.name}/s2d_cut")
        g.set_shape(cut, [n, c] + ends, dtype)
        x = cut
    if any(lo) or any(v > 0 for v in hi):
        padded = g.fresh(f"{x}/s2d_pad")
        pv = [0, 0, lo[0], lo[1], 0, 0, max(hi[0], 0), max(hi[1], 0)]
        g.make("Pad", [x, g.add_const(f"{node.name}/s2d_pads", pv, np.int64)], [padded],
               near=node, origin=origin, name=f"{node.name}/s2d_pad", mode="constant")
        g.set_shape(padded, [n, c] + size, dtype)
        x = padded
    fh, fw = f
    h2, w2 = size[0] // fh, size[1] // fw
    x6 = reshape(g, x, [n, c, h2, fh, w2, fw], near=node, origin=origin, tag="s2d_split")
    xt = g.fresh(f"{x}/s2d_t")
    g.make("Transpose", [x6], [xt], near=node, origin=origin, name=f"{node.name}/s2d_transpose",
           perm=[0, 3, 5, 1, 2, 4])
    g.set_shape(xt, [n, fh, fw, c, h2, w2], dtype)
    x4 = reshape(g, xt, [n, fh * fw * c, h2, w2], near=node, origin=origin, tag="s2d_merge")
    wp = np.zeros((o, c, kern[0] * fh, kern[1] * fw), w.dtype)
    wp[:, :, shift[0]:shift[0] + kh, shift[1]:shift[1] + kw] = w
    w2d = wp.reshape(o, c, kern[0], fh, kern[1], fw).transpose(0, 3, 5, 1, 2, 4)
    w2d = np.ascontiguousarray(w2d.reshape(o, fh * fw * c, kern[0], kern[1]))
    ins = [x4, g.add_const(f"{node.name}/W_s2d", w2d)] + list(node.input[2:3])
    conv = g.make("Conv", ins, [node.output[0]], near=node, origin=origin, name=node.name)
    for a in node.attribute:
        if a.name not in ("pads", "kernel_shape", "strides", "dilations"):
            conv.attribute.append(a)
    conv.attribute.extend([
        helper.make_attribute("kernel_shape", kern),
        helper.make_attribute("strides", [1 if fi > 1 else s for fi, s in zip(f, strides)]),
        helper.make_attribute("dilations", [1 if fi > 1 else d for fi, d in zip(f, dil)]),
        helper.make_attribute("pads", cpad)])
    return f"stride {strides} Conv -> space-to-depth x{fh * fw} + stride-1 Conv"
