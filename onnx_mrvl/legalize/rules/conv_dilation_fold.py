"""Conv dilation above target.max_dilation whose taps all see the image (DeepLabV3's ASPP rate 12 on a
33x33 map; rates past the map are conv_dead_taps' business) -> the same taps on a coarser grid.

Along an axis with dilation d > max_dilation, d = m * d' with d' <= max_dilation: the k taps at
multiples of d are taps ``0, m, 2m, ...`` of a ``(k-1)*m + 1`` kernel at dilation d' (zero weights in
between). Same receptive field, same pads, same output: exact. The smallest m whose kernel fits
``max_kernel`` is taken (rate 12, 3x3: 5x5 at dilation 6, 25/9 = 2.8x the MACs on a small map; rate 18
or 24: 7x7 at 6 or 8). Pads above ``max_pad["conv"]`` (rate 12 keeps its pad 12) move to ``Pad`` nodes of
at most ``max_pad`` each in front of the Conv (pad_to_conv runs them as depthwise convs on the accelerator).

Space-to-batch (the phase decomposition TensorFlow uses for atrous convs: d*d undilated convs over the
phase sub-images, stacked in the batch) was weighed and not taken: 144 phases for rate 12 exceed
``max_batch``, and fuse keeps reshapes across the batch axis on the CPU; stacked in channels instead they
need a grouped conv of d*d groups, which conv_group_split splits into d*d convs.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import helper

from .base import Match, attr, pad_chain

NAME = "conv_dilation_fold"
OPS = ("Conv",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or attr(node, "pads") is None:
        return None
    dil = attr(node, "dilations")
    sw = g.shape(node.input[1])
    if dil is None or sw is None or len(sw) != 4 or max(dil) <= g.target.max_dilation:
        return None
    return Match([node])


def fold_factor(d: int, k: int, target):
    """(m, d') with d = m*d', d' <= max_dilation and (k-1)*m + 1 <= max_kernel, smallest m; None."""
    if k == 1:
        return 1, 1
    if d <= target.max_dilation:
        return 1, d
    for m in range(2, d + 1):
        if d % m == 0 and d // m <= target.max_dilation and (k - 1) * m + 1 <= target.max_kernel:
            return m, d // m
    return None


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if not g.is_const(node.input[1]):
        return "weight is not constant"
    if g.shape(node.input[0]) is None or g.shape(node.output[0]) is None:
        return "shapes are not static"
    w, dil = g.shape(node.input[1]), list(attr(node, "dilations"))
    plan = [fold_factor(dil[ax], w[2 + ax], target) for ax in range(2)]
    for ax, p in enumerate(plan):
        if p is None:
            return (f"dilation {dil[ax]} has no factor <= {target.max_dilation} whose zero-filled kernel "
                    f"{w[2 + ax]} stays within {target.max_kernel}")
    m.data["plan"] = plan
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    (mh, dh), (mw, dw) = m.data["plan"]
    old = list(attr(node, "dilations"))
    w = g.const(node.input[1])
    o, c, kh, kw = w.shape
    w2 = np.zeros((o, c, (kh - 1) * mh + 1, (kw - 1) * mw + 1), w.dtype)
    w2[:, :, ::mh, ::mw] = w
    g.set_input(node, 1, g.add_const(f"{node.name}/W_dil", w2))
    set_ = [a for a in node.attribute if a.name not in ("dilations", "kernel_shape", "pads")]
    pads = list(attr(node, "pads"))
    limit = g.target.max_pad["conv"]
    extra = [max(p - limit, 0) for p in pads]
    if any(extra):                            # Pads of at most max_pad each (pad_to_conv takes them)
        x = node.input[0]
        g.set_input(node, 0, pad_chain(g, x, extra, limit, near=node, origin=m.origin, suffix="dil_pad",
                                       pads_const=f"{node.name}/dil_pads", node_name=f"{node.name}/dil_pad"))
    pads = [p - e for p, e in zip(pads, extra)]
    del node.attribute[:]
    node.attribute.extend(set_ + [helper.make_attribute("dilations", [dh, dw]),
                                  helper.make_attribute("kernel_shape", list(w2.shape[2:])),
                                  helper.make_attribute("pads", pads)])
    g.changed = True
    return (f"{kh}x{kw} dilation {old} x{mh},{mw} -> {w2.shape[2]}x{w2.shape[3]} "
            f"dilation {[dh, dw]}" + (f", pads {extra} moved to a Pad" if any(extra) else ""))
