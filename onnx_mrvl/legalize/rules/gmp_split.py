"""GlobalMaxPool over H or W above what one GlobalMaxPool2D takes (``max_pool_kernel ** 2`` per side,
fuse/patterns.py) -> non-overlapping MaxPools (window = stride = ``max_pool_kernel`` on that axis,
``ceil_mode`` when the window does not divide the size: the last window holds the remaining
positions only) until the rest fits, then one GlobalMaxPool. A max of maxima is the max, and a max
rounds nothing (every stage returns one of its inputs), so the chain is exact for any size -- unlike
gap_split's averages, no exact factorisation is needed. The max-over-time pooling of 1-D text / byte
CNNs (Kim-style classifiers, magika's 508 positions) is the usual source: conv_1d_to_2d makes their
``[N, C, L]`` pool a ``[N, C, 1, L]`` one. Int8 pools (a DequantizeLinear in front, every reader a
QuantizeLinear) are left whole: the stage outputs would need their own Q / DQ pairs."""
from __future__ import annotations

from typing import Optional

from .base import Match, is_float
from .gap_split import MOVES, global_limit

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


def _int8(node, g) -> bool:
    dq = g.producer.get(node.input[0])
    for _ in range(4):
        if dq is None or dq.op_type not in MOVES or len(g.users(dq.output[0])) != 1:
            break
        dq = g.producer.get(dq.input[0])
    readers = g.users(node.output[0])
    return dq is not None and dq.op_type == "DequantizeLinear" and bool(readers) and \
        all(r.op_type == "QuantizeLinear" for r in readers)


def check(m: Match, g, target) -> Optional[str]:
    if not is_float(g, m.node.input[0]):
        return "not a float tensor"
    if _int8(m.node, g):
        return "an int8 global max pool (DequantizeLinear -> GlobalMaxPool -> QuantizeLinear)"
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
    g.make("GlobalMaxPool", [x], [node.output[0]], near=node, origin=m.origin, name=f"{node.name}/gmp")
    return ("GlobalMaxPool -> " + " then ".join(f"{a}x{b}" for a, b in m.data["steps"]) +
            f" MaxPool (exact: a max of maxima) then a global max pool over {h}x{w}")
