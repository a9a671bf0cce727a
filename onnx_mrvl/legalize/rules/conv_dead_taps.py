"""Kernel taps that read only padding are dropped from a Conv (exact: they multiply zeros).

Atrous convolutions whose dilation reaches past the feature map (DeepLabV3's ASPP rates 12/24/36 on
a 20x20 or 33x33 map) keep only the taps that ever see the image: a 3x3 kernel with dilation 24 on a
20x20 map is the 1x1 centre tap, with no padding and no dilation, which the accelerator takes
(dilation and padding above ``target.max_dilation`` / ``max_pad`` do not fit otherwise).

Along each spatial axis (input length L, kernel k, stride s, dilation d, pads pb/pe, output Lo) tap
j reads rows ``o*s - pb + j*d`` for o < Lo; the live taps form a range [j0, j1]. The new kernel is
that range, with pads ``pb - j0*d`` and ``pe - (k-1-j1)*d`` (same output size); an axis left with one
tap gets dilation 1. Not applied when a new pad would be negative.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr
from ..graph import set_attr

NAME = "conv_dead_taps"
OPS = ("Conv",)


def _live(L: int, Lo: int, k: int, s: int, d: int, pb: int):
    pos = np.arange(Lo)[:, None] * s - pb + np.arange(k)[None, :] * d
    live = np.nonzero(((pos >= 0) & (pos < L)).any(axis=0))[0]
    return (int(live[0]), int(live[-1])) if live.size else None


def match(node, g) -> Optional[Match]:
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx"):
        return None
    if attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"", "") or attr(node, "pads") is None:
        return None
    w = g.const(node.input[1])
    sx, sy = g.shape(node.input[0]), g.shape(node.output[0])
    if w is None or w.ndim != 4 or sx is None or sy is None or len(sx) != 4:
        return None
    k = list(w.shape[2:])
    s = list(attr(node, "strides", [1, 1]))
    d = list(attr(node, "dilations", [1, 1]))
    p = list(attr(node, "pads"))
    ranges, pads = [], [0, 0, 0, 0]
    for a in range(2):
        r = _live(sx[2 + a], sy[2 + a], k[a], s[a], d[a], p[a])
        if r is None:
            return None                       # no tap ever sees the image: leave it alone
        ranges.append(r)
        pads[a], pads[a + 2] = p[a] - r[0] * d[a], p[a + 2] - (k[a] - 1 - r[1]) * d[a]
    if all(r == (0, kk - 1) for r, kk in zip(ranges, k)) or min(pads) < 0:
        return None
    return Match([node], {"ranges": ranges, "pads": pads, "dil": d, "k": k})


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    (h0, h1), (w0, w1) = m.data["ranges"]
    w = g.const(node.input[1])[:, :, h0:h1 + 1, w0:w1 + 1]
    g.set_input(node, 1, g.add_const(f"{node.name}/W_live", np.ascontiguousarray(w)))
    k = [h1 - h0 + 1, w1 - w0 + 1]
    dil = [dd if kk > 1 else 1 for dd, kk in zip(m.data["dil"], k)]
    set_attr(node, "kernel_shape", k)
    set_attr(node, "pads", m.data["pads"])
    set_attr(node, "dilations", dil)
    g.changed = True
    return f"kernel {m.data['k']} -> {k} (taps reading only padding dropped), pads {m.data['pads']}, dilations {dil}"
