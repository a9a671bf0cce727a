"""Resize that is a pixel repeat -> nearest Resize(s) with integer scales <= ``target.resize_max_scale``.

* A spatial axis of size 1 resized in any mode (linear, cubic, nearest; any coordinate mode but
  ``tf_crop_and_resize``) is a broadcast: every output pixel is the one input pixel. PyTorch exports
  DeepLabV3's ASPP pooling branch (global pool -> conv -> bilinear upsample to the feature size)
  this way. Such a Resize becomes a nearest one (``asymmetric``/``floor``: output o reads o // s).
* A nearest Resize that repeats pixels with an integer scale above the limit (the broadcast above
  to 20x20, 64x64, ...) becomes a chain of nearest Resizes whose scales multiply to it, each within
  the limit (greedy largest factor); a scale with a prime factor above the limit stays.

Both are exact (every output is a copy of an input value).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ...resize_index import nearest_indices
from .base import Match, attr
from .gap_split import factors

NAME = "resize_nearest"
OPS = ("Resize",)


def _pixel_repeat(node, sx, sy) -> bool:
    ctm = attr(node, "coordinate_transformation_mode", "half_pixel")
    mode = attr(node, "nearest_mode", "round_prefer_floor")
    for i, o in zip(sx[2:], sy[2:]):
        idx = nearest_indices(o, i, float(o // i), ctm, mode)
        if idx is None or not np.array_equal(idx, np.arange(o) // (o // i)):
            return False
    return True


def match(node, g) -> Optional[Match]:
    if node.op_type != "Resize" or node.domain not in ("", "ai.onnx") or g.opset < 11:
        return None
    sx, sy = g.shape(node.input[0]), g.shape(node.output[0])
    if sx is None or sy is None or len(sx) != 4 or sx[:2] != sy[:2]:
        return None
    if attr(node, "coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize":
        return None
    if any(o % i for i, o in zip(sx[2:], sy[2:])):
        return None
    scales = [o // i for i, o in zip(sx[2:], sy[2:])]
    if attr(node, "mode", "nearest") == "nearest":
        if not _pixel_repeat(node, sx, sy):
            return None
        broadcast = False
    elif all(i == 1 or s == 1 for i, s in zip(sx[2:], scales)):
        broadcast = True
    else:
        return None
    return Match([node], {"scales": scales, "broadcast": broadcast})


def check(m: Match, g, target) -> Optional[str]:
    limit = target.resize_max_scale
    chains = [factors(s, limit) for s in m.data["scales"]]
    if any(c is None for c in chains):
        return f"scale {m.data['scales']} has a prime factor above the limit {limit}"
    if not m.data["broadcast"] and max(m.data["scales"]) <= limit:
        return "already a nearest pixel repeat within the limit"
    m.data["chains"] = chains
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    x, out = node.input[0], node.output[0]
    ch, cw = m.data["chains"]
    steps = max(len(ch), len(cw), 1)
    ch, cw = ch + [1] * (steps - len(ch)), cw + [1] * (steps - len(cw))
    n, c, h, w = g.shape(x)
    dtype = g.dtype(x)
    g.remove(node)
    roi = g.add_const(f"{node.name}/roi", np.zeros(0, np.float32)) if g.opset < 13 else ""
    cur = x
    for k, (fh, fw) in enumerate(zip(ch, cw)):
        h, w = h * fh, w * fw
        dst = out if k == steps - 1 else g.fresh(f"{out}/repeat{k}")
        scales = g.add_const(f"{node.name}/scales", np.array([1, 1, fh, fw], np.float32))
        g.make("Resize", [cur, roi, scales], [dst], near=node, origin=m.origin,
               name=node.name if k == steps - 1 else f"{node.name}/repeat{k}",
               mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        g.set_shape(dst, [n, c, h, w], dtype)
        cur = dst
    what = "broadcast" if m.data["broadcast"] else "pixel repeat"
    return f"{what} x{m.data['scales']} -> {steps} nearest Resize(s) x{list(zip(ch, cw))}"
