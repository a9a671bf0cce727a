"""Strided Conv with a kernel above max_kernel along one axis -> output-phase space-to-depth: one
stride-1 Conv with a small kernel (Keras ``Conv1D(k=80, strides=4)``, M5's first layer).

conv_kernel_split would cut such a kernel into tiles whose windows start inside the image (Slices, CPU
ops that cut the region) or whose pads exceed ``max_pad``. Instead, along that axis (length L, kernel
k, stride s, begin pad p) the input is cut into blocks of ``B = r*s`` samples (``Reshape`` ->
``Transpose`` -> ``Reshape``: channel ``m*C + c`` holds sample m of each block) and one Conv computes
r consecutive outputs per block (output phases) as ``O*r`` channels:

    y[o, u*r + ph] = sum_{c, m, q} W2[o*r + ph, m*C + c, q] * blocks[c, m, u + q - a]
    W2[o*r + ph, m*C + c, q] = W[o, c, q*B + m - ph*s - e]   (zero outside the kernel)

with ``a = ceil(p / B)`` whole blocks of begin padding and ``e = a*B - p`` leading zero taps; the kernel
is ``ceil((e + (r-1)*s + k) / B)`` blocks. The outputs go back in place (``Reshape`` ``[N,O,r,.,U]`` ->
``Transpose`` -> ``Reshape``), and a depthwise Conv with a ``crop+1`` kernel holding one 1 drops the
last phases when ``U*r`` exceeds the output length (as crop_to_conv would, without a CPU Slice). Exact. r is the smallest MAC cost among the
block sizes that divide L and keep the kernel, pads and channels within the target (no crop first).
Costs ``B * kernel_blocks / k`` times the MACs of the original conv (M5: 16 * 6 / 80 = 1.2x).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import helper

from .base import Match, attr, inp, reshape
from .conv_kernel_split import unclean_split

NAME = "conv_phase_s2d"
OPS = ("Conv",)
MAX_PHASES = 16


def match(node, g) -> Optional[Match]:
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx"):
        return None
    sw = g.shape(node.input[1])
    strides = attr(node, "strides")
    if sw is None or len(sw) != 4 or strides is None or attr(node, "pads") is None:
        return None
    big = [ax for ax in range(2) if sw[2 + ax] > g.target.max_kernel and 1 < strides[ax] <= g.target.max_stride]
    if len(big) != 1 or sw[3 - big[0]] > g.target.max_kernel:
        return None
    return Match([node], {"ax": big[0]})


def _plan(size, out, k, s, p, pe, cin, cout, target):
    """Best (r, B, e, a, kernel blocks, end pad blocks, crop) or None."""
    best = None
    for r in range(1, MAX_PHASES + 1):
        b = r * s
        if size % b or cin * b > target.max_channels or cout * r > target.max_channels:
            continue
        a = -(-p // b)
        e = a * b - p
        kb = -(-(e + (r - 1) * s + k) // b)
        u = -(-out // r)
        end = u + kb - 1 - a - size // b
        if end < 0:                      # trailing blocks no output reads: zero taps reach them
            kb, end = kb - end, 0
        crop = u * r - out
        if kb > target.max_kernel or max(a, end) > target.max_pad["conv"] or crop >= target.max_kernel:
            continue
        if (size + p + pe - k) // s + 1 != out:
            continue
        cost = (crop > 0, b * kb * r)
        if best is None or cost < best[0]:
            best = (cost, (r, b, e, a, kb, end, crop))
    return best[1] if best else None


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if not g.is_const(node.input[1]) or (inp(node, 2) and not g.is_const(node.input[2])):
        return "weight or bias is not constant"
    sx, sy = g.shape(node.input[0]), g.shape(node.output[0])
    if sx is None or sy is None:
        return "shapes are not static"
    if attr(node, "group", 1) != 1:
        return "grouped conv"
    ax = m.data["ax"]
    if (attr(node, "dilations") or [1, 1])[ax] != 1:
        return "dilated strided kernel"
    why = unclean_split(node, g)
    if why is None:
        return "conv_kernel_split tiles it without Slices or large pads"
    pads = list(attr(node, "pads"))
    w = g.shape(node.input[1])
    plan = _plan(sx[2 + ax], sy[2 + ax], w[2 + ax], attr(node, "strides")[ax], pads[ax], pads[ax + 2],
                 sx[1], w[0], target)
    if plan is None:
        return (f"{why}; no block of r * stride samples dividing {sx[2 + ax]} keeps the kernel, pads and "
                f"channels within the target")
    m.data.update(plan=plan, sx=sx, sy=sy)
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    ax, (r, b, e, a, kb, end, crop) = m.data["ax"], m.data["plan"]
    n, c, h, wd = m.data["sx"]
    sy = m.data["sy"]
    w = g.const(node.input[1])
    o, _, kh, kw = w.shape
    k, s = w.shape[2 + ax], attr(node, "strides")[ax]
    pads = list(attr(node, "pads"))
    origin = m.origin
    dtype = g.dtype(node.input[0])
    g.remove(node)
    fh, fw = (b, 1) if ax == 0 else (1, b)
    h2, w2 = h // fh, wd // fw
    x6 = reshape(g, node.input[0], [n, c, h2, fh, w2, fw], near=node, origin=origin, tag="phase_split")
    xt = g.fresh(f"{node.input[0]}/phase_t")
    g.make("Transpose", [x6], [xt], near=node, origin=origin, name=f"{node.name}/phase_transpose",
           perm=[0, 3, 5, 1, 2, 4])
    g.set_shape(xt, [n, fh, fw, c, h2, w2], dtype)
    x4 = reshape(g, xt, [n, b * c, h2, w2], near=node, origin=origin, tag="phase_merge")
    wa = np.moveaxis(w, 2 + ax, -1)                         # [O, C, other, k]
    other = wa.shape[2]
    w2d = np.zeros((o, r, b, c, other, kb), w.dtype)
    for ph in range(r):
        full = np.zeros((o, c, other, kb * b), w.dtype)
        full[..., ph * s + e:ph * s + e + k] = wa
        w2d[:, ph] = full.reshape(o, c, other, kb, b).transpose(0, 4, 1, 2, 3)
    w2d = np.moveaxis(w2d.reshape(o * r, b * c, other, kb), -1, 2 + ax)
    ins = [x4, g.add_const(f"{node.name}/W_phase", np.ascontiguousarray(w2d))]
    if inp(node, 2):
        ins.append(g.add_const(f"{node.name}/B_phase", np.repeat(g.const(node.input[2]), r)))
    u = -(-sy[2 + ax] // r)
    kern, strides = [kh, kw], list(attr(node, "strides"))
    dil = list(attr(node, "dilations") or [1, 1])
    kern[ax], strides[ax], dil[ax] = kb, 1, 1
    pads[ax], pads[ax + 2] = a, end
    z = g.fresh(f"{node.output[0]}/phases")
    conv = g.make("Conv", ins, [z], near=node, origin=origin, name=node.name)
    for at in node.attribute:
        if at.name not in ("pads", "kernel_shape", "strides", "dilations"):
            conv.attribute.append(at)
    conv.attribute.extend([helper.make_attribute("kernel_shape", kern), helper.make_attribute("strides", strides),
                           helper.make_attribute("dilations", dil), helper.make_attribute("pads", pads)])
    zs = list(sy)
    zs[1], zs[2 + ax] = o * r, u
    g.set_shape(z, zs, dtype)
    if ax == 1:
        z5, perm, t5 = [n, o, r, sy[2], u], [0, 1, 3, 4, 2], [n, o, sy[2], u, r]
    else:
        z5, perm, t5 = [n, o, r, u, sy[3]], [0, 1, 3, 2, 4], [n, o, u, r, sy[3]]
    z5n = reshape(g, z, z5, near=node, origin=origin, tag="phase_unsplit")
    zt = g.fresh(f"{node.output[0]}/phase_back")
    g.make("Transpose", [z5n], [zt], near=node, origin=origin, name=f"{node.name}/phase_back", perm=perm)
    g.set_shape(zt, t5, dtype)
    full = list(sy)
    full[2 + ax] = u * r
    if not crop:
        reshape(g, zt, full, near=node, origin=origin, out=node.output[0], tag="phase_place")
    else:
        y = reshape(g, zt, full, near=node, origin=origin, tag="phase_place")
        ck = [1, 1]
        ck[ax] = crop + 1
        eye = np.zeros([o, 1] + ck, np.float32)
        eye[:, 0, 0, 0] = 1.0                # depthwise "keep the first" kernel: drops the last phases
        g.make("Conv", [y, g.add_const(f"{node.name}/W_crop", eye)], [node.output[0]], near=node, origin=origin,
               name=f"{node.name}/phase_crop", kernel_shape=ck, group=o, pads=[0, 0, 0, 0], strides=[1, 1])
    return (f"{kh}x{kw} stride-{s} kernel -> space-to-depth x{b} + stride-1 {kern[0]}x{kern[1]} Conv "
            f"with {r} output phases")
