"""A small spatial crop, ``Slice`` with step 1 on the H/W axes of a 4-D float tensor (Keras
Cropping2D: UNet skip connections, NASNet's adjust blocks), -> a depthwise Conv whose
``(b+e+1) x (b'+e'+1)`` kernel is one 1 at ``(b, b')`` (``b``/``e``: rows cut at the begin/end):
output[i, j] = x[i + b, j + b'] exactly, an accelerator op instead of a CPU Slice cutting the
region. Only within target.max_kernel and next to an op the accelerator runs."""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import TensorProto

from .base import Match, inp
from .pad_to_conv import beside_accelerator_op

NAME = "crop_to_conv"
OPS = ("Slice",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Slice" or node.domain not in ("", "ai.onnx") or len(node.input) < 3:
        return None
    sx = g.shape(node.input[0])
    if sx is None or len(sx) != 4:
        return None
    return Match([node], {"sx": sx})


def _crop(node, g, sx):
    """{axis: (begin cut, end cut)} or a reason."""
    starts, ends = g.const(node.input[1]), g.const(node.input[2])
    axes = g.const(node.input[3]) if inp(node, 3) else None
    steps = g.const(node.input[4]) if inp(node, 4) else None
    if starts is None or ends is None or (inp(node, 3) and axes is None) or \
            (inp(node, 4) and steps is None):
        return "non-constant starts / ends / axes / steps"
    starts, ends = starts.reshape(-1).tolist(), ends.reshape(-1).tolist()
    axes = list(range(len(starts))) if axes is None else [int(a) % 4 for a in axes.reshape(-1)]
    if steps is not None and any(int(s) != 1 for s in steps.reshape(-1)):
        return "step other than 1"
    cut = {}
    for a, s, e in zip(axes, starts, ends):
        d = sx[a]
        s = min(max(s + d if s < 0 else s, 0), d)
        e = min(max(e + d if e < 0 else e, 0), d)
        if (s, e) == (0, d):
            continue
        if a not in (2, 3):
            return f"slice on axis {a} (not a spatial crop)"
        if e <= s:
            return "empty slice"
        cut[a] = (s, d - e)
    if not cut:
        return "slices nothing"
    return cut


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if g.dtype(node.input[0]) != TensorProto.FLOAT:
        return "not float32"
    cut = _crop(node, g, m.data["sx"])
    if isinstance(cut, str):
        return cut
    if any(b + e + 1 > target.max_kernel for b, e in cut.values()):
        return f"crop {cut} needs a kernel above target.max_kernel ({target.max_kernel})"
    if not beside_accelerator_op(g, node):
        return "no accelerator op next to it"
    m.data["cut"] = cut
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    c = m.data["sx"][1]
    (bh, eh), (bw, ew) = m.data["cut"].get(2, (0, 0)), m.data["cut"].get(3, (0, 0))
    w = np.zeros((c, 1, bh + eh + 1, bw + ew + 1), np.float32)
    w[:, :, bh, bw] = 1.0
    g.remove(node)
    g.make("Conv", [node.input[0], g.add_const(f"{node.name}/tap", w)], [node.output[0]], near=node,
           origin=m.origin, name=node.name, kernel_shape=list(w.shape[2:]),
           strides=[1, 1], dilations=[1, 1], pads=[0, 0, 0, 0], group=c)
    return f"crop rows ({bh}, {eh}) cols ({bw}, {ew}) -> one-tap depthwise Conv {list(w.shape[2:])}"
