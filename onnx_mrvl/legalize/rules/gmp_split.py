"""GlobalMaxPool over H or W above what one GlobalMaxPool2D takes (``max_pool_kernel ** 2`` per side,
fuse/patterns.py) -> non-overlapping MaxPools (window = stride = ``max_pool_kernel`` on that axis,
``ceil_mode`` when the window does not divide the size: the last window holds the remaining
positions only) until the rest fits, then one GlobalMaxPool. A max of maxima is the max, and a max
rounds nothing (every stage returns one of its inputs), so the chain is exact for any size -- unlike
gap_split's averages, no exact factorisation is needed. The max-over-time pooling of 1-D text / byte
CNNs (Kim-style classifiers, magika's 508 positions) is the usual source: conv_1d_to_2d makes their
``[N, C, L]`` pool a ``[N, C, 1, L]`` one. An int8 pool (``DQ -> GlobalMaxPool -> Q``, the DQ possibly
through moves; one per-tensor Q with constant scale / zero point) gets a Q -> DQ pair of that Q's
quantization after every stage, so fuse's int8 pools take each: exact too (Q and DQ are monotone, so
they commute with max, and Q(DQ(Q(v))) = Q(v)): the same codes as onnxruntime's
``Q(max(DQ(x)))``."""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import TensorProto

from .base import Match, is_float
from .gap_split import global_limit, int8_global_pool

NAME = "gmp_split"
OPS = ("GlobalMaxPool",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "GlobalMaxPool" or node.domain not in ("", "ai.onnx"):
        return None
    sx = g.shape(node.input[0])
    if sx is None or len(sx) != 4 or any(not isinstance(d, int) or d < 1 for d in sx[2:]) or \
            max(sx[2:]) <= global_limit(g.target):
        return None
    return Match([node], {"sx": list(sx)})


def check(m: Match, g, target) -> Optional[str]:
    if not is_float(g, m.node.input[0]):
        return "not a float tensor"
    m.data["pair"] = None
    if int8_global_pool(m.node, g):
        q = g.only_consumer(m.node.output[0])
        if q is None or any(i and not g.is_const(i) for i in q.input[1:]) or \
                np.asarray(g.const(q.input[1])).size != 1:
            return "an int8 global max pool read by several or per-axis QuantizeLinears"
        m.data["pair"] = (q.input[1], q.input[2] if len(q.input) > 2 and q.input[2] else None,
                          g.dtype(q.output[0]) or (g.dtype(q.input[2]) if len(q.input) > 2 and q.input[2]
                                                   else TensorProto.UINT8), list(q.attribute))
    k, lim = target.max_pool_kernel, global_limit(target)
    h, w = m.data["sx"][2:]
    steps = []
    while max(h, w) > lim:
        a, b = (k if h > lim else 1), (k if w > lim else 1)
        steps.append((a, b))
        h, w = -(-h // a), -(-w // b)
    m.data["steps"] = steps
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    nb, c, h, w = m.data["sx"]
    g.remove(node)
    x = node.input[0]
    for i, (a, b) in enumerate(m.data["steps"]):
        ceil = int(h % a != 0 or w % b != 0)
        h, w = -(-h // a), -(-w // b)
        y = g.fresh(f"{node.output[0]}/mp{i}")
        g.make("MaxPool", [x], [y], near=node, origin=m.origin, name=f"{node.name}/mp{i}",
               kernel_shape=[a, b], strides=[a, b], pads=[0, 0, 0, 0], ceil_mode=ceil)
        g.set_shape(y, [nb, c, h, w], g.dtype(node.input[0]))
        x = y
        if m.data["pair"] is not None:   # requantized as the pool's own Q does (exact: see above)
            scale, zp, qtype, attrs = m.data["pair"]
            qy, dy = g.fresh(f"{y}/q"), g.fresh(f"{y}/dq")
            ins = [scale] + ([zp] if zp else [])
            qn = g.make("QuantizeLinear", [y] + ins, [qy], near=node, origin=m.origin, name=f"{node.name}/mp{i}_q")
            qn.attribute.extend(attrs)
            g.set_shape(qy, [nb, c, h, w], qtype)
            g.make("DequantizeLinear", [qy] + ins, [dy], near=node, origin=m.origin, name=f"{node.name}/mp{i}_dq")
            g.set_shape(dy, [nb, c, h, w], g.dtype(node.input[0]))
            x = dy
    g.make("GlobalMaxPool", [x], [node.output[0]], near=node, origin=m.origin, name=f"{node.name}/gmp")
    return ("GlobalMaxPool -> " + " then ".join(f"{a}x{b}" for a, b in m.data["steps"]) +
            f" MaxPool (exact: a max of maxima) then a global max pool over {h}x{w}")
