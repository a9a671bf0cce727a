"""GlobalAveragePool over H or W above what one GlobalAvgPool2D takes (``max_pool_kernel ** 2`` per
side: the pool unit walks the map in windows of at most ``max_pool_kernel``, adding each window's
sum into one fp32 accumulator per channel, then divides once and rounds once, docs/fusion.md
"Global average pools") -> non-overlapping AveragePools whose windows divide the spatial size
exactly (ONNC DivideGlobalAPIntoAPs; greedy largest divisor) until the rest fits, then one
GlobalAveragePool, e.g. 512x512 -> 16x16/s16 then a global pool over 32x32. A map that fits stays
one global pool: a chain of pools rounds every partial mean to fp16, and where the values cancel
(squeeze-excite means of signed features) those roundings are large against the final mean (seeded
smooth signed 64x64 / 128x128 maps: 1.3-3x the fp16 baseline's error). Sizes with a prime
factor above the window keep the global pool.
A global pool between a DequantizeLinear (or a Reshape / Transpose of one: reducemean_to_gap's token mean)
and QuantizeLinear (a QDQ model's int8 pool) stays whole:
the int8 GlobalAvgPool2D is one int32 sum and one requantization (onnxruntime's
QLinearGlobalAveragePool); a chain of pools would round between them."""
from __future__ import annotations

from typing import List, Optional

from .base import Match

NAME = "gap_split"
OPS = ("GlobalAveragePool",)


def factors(size: int, limit: int) -> Optional[List[int]]:
    """Window sizes <= limit whose product is ``size`` (largest first), or None."""
    out = []
    while size > 1:
        d = next((d for d in range(min(limit, size), 1, -1) if size % d == 0), None)
        if d is None:
            return None
        out.append(d)
        size //= d
    return out


def match(node, g) -> Optional[Match]:
    if node.op_type != "GlobalAveragePool" or node.domain not in ("", "ai.onnx"):
        return None
    sx = g.shape(node.input[0])
    if sx is None or len(sx) != 4 or max(sx[2:]) <= global_limit(g.target):
        return None
    return Match([node], {"sx": sx})


def global_limit(target) -> int:
    """Largest side of a map one GlobalAvgPool2D pools (fuse/patterns.py checks the same)."""
    return target.max_pool_kernel * target.max_pool_kernel


MOVES = ("Transpose", "Reshape", "Squeeze", "Unsqueeze")   # reducemean_to_gap's token mean: DQ -> Reshape -> Transpose


def int8_global_pool(node, g) -> bool:
    """DQ -> global pool -> Q (every reader a QuantizeLinear), the DQ possibly through moves."""
    dq = g.producer.get(node.input[0])
    for _ in range(4):
        if dq is None or dq.op_type not in MOVES or len(g.users(dq.output[0])) != 1:
            break
        dq = g.producer.get(dq.input[0])
    readers = g.users(node.output[0])
    return dq is not None and dq.op_type == "DequantizeLinear" and bool(readers) and \
        all(r.op_type == "QuantizeLinear" for r in readers)


def check(m: Match, g, target) -> Optional[str]:
    if int8_global_pool(m.node, g):
        return "an int8 global pool (DequantizeLinear -> GlobalAveragePool -> QuantizeLinear): one int32 sum"
    _, _, h, w = m.data["sx"]
    limit = target.max_pool_kernel
    fh, fw = factors(h, limit), factors(w, limit)
    if fh is None or fw is None:
        return f"{h}x{w} has no exact factorisation into windows <= {limit}"
    steps = []
    while max(h, w) > global_limit(target):      # window stages only until the global pool fits
        a = fh.pop(0) if h > global_limit(target) and fh else 1
        b = fw.pop(0) if w > global_limit(target) and fw else 1
        steps.append((a, b))
        h, w = h // a, w // b
    m.data["steps"] = steps
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    nb, c, h, w = m.data["sx"]
    steps = m.data["steps"]
    g.remove(node)
    x = node.input[0]
    for k, (a, b) in enumerate(steps):
        h, w = h // a, w // b
        y = g.fresh(f"{node.output[0]}/ap{k}")
        g.make("AveragePool", [x], [y], near=node, origin=m.origin, name=f"{node.name}/ap{k}",
               kernel_shape=[a, b], strides=[a, b], pads=[0, 0, 0, 0])
        g.set_shape(y, [nb, c, h, w], g.dtype(node.input[0]))
        x = y
    g.make("GlobalAveragePool", [x], [node.output[0]], near=node, origin=m.origin, name=f"{node.name}/gap")
    return ("GlobalAveragePool -> " + " then ".join(f"{a}x{b}" for a, b in steps) +
            f" AveragePool then a global pool over {h}x{w}")
