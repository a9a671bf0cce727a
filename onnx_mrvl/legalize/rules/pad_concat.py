"""A zero spatial Pad wider than ``max_pad`` (alone, or a chain of zero Pads each read only by the
next: conv_kernel_split's / conv_dilation_fold's padding of an edge tile) as ``Concat`` with constant
zero blocks, one per padded axis, instead of a chain of depthwise 1x1 convs (one per ``max_pad``:
19 layers for basic-pitch's 127-wide pads, ~670 for torchcrepe's 512-tap conv). A concat copies:
exact, and fuse's ``Concat`` carries the constant blocks as layer weights. Used by pad_to_conv when
the zero blocks are small (``MAX_BLOCK`` elements each: a wide pad of a large feature map keeps the
conv chain, whose weights are one per channel)."""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from .pad_fold import pad_spec

MAX_BLOCK = 1 << 16        # elements of one constant zero block (fp16: 128 KiB)


def zero_pads(g, node) -> Optional[List[int]]:
    """The 8 pads of a standard zero constant Pad of a 4-D float32 tensor on H / W only, or None."""
    if node is None or node.op_type != "Pad" or node.domain not in ("", "ai.onnx"):
        return None
    spec = pad_spec(node, g)
    if spec is None or spec[2] != 4 or spec[1] != 0.0 or g.dtype(node.input[0]) != 1:
        return None
    pads = spec[0]
    if pads[0] or pads[1] or pads[4] or pads[5] or any(p < 0 for p in pads):
        return None
    return pads


def _next(g, node):
    """The zero Pad reading ``node``'s output alone (the chain goes on), or None."""
    users = g.users(node.output[0])
    if len(users) != 1 or node.output[0] in g.pinned or zero_pads(g, users[0]) is None:
        return None
    return users[0]


def chain_of(g, node) -> List:
    """The chain of zero Pads through ``node``, first to last (each read only by the next)."""
    while _next(g, node) is not None:
        node = _next(g, node)
    chain = [node]
    p = g.producer.get(node.input[0])
    while p is not None and zero_pads(g, p) is not None and _next(g, p) is chain[0]:
        chain.insert(0, p)
        p = g.producer.get(p.input[0])
    return chain


def plan(g, chain, limit: int) -> Optional[List[int]]:
    """The chain's total [top, left, bottom, right] when the Concat form applies: wider than
    ``limit`` somewhere, every zero block at most MAX_BLOCK elements; else None."""
    total = [0, 0, 0, 0]
    for n in chain:
        p = zero_pads(g, n)
        if p is None:
            return None
        total = [t + q for t, q in zip(total, (p[2], p[3], p[6], p[7]))]
    shape = g.shape(chain[0].input[0])
    if shape is None or len(shape) != 4 or max(total) <= limit:
        return None
    n, c, h, w = shape
    blocks = [n * c * h * max(total[1], total[3]), n * c * max(total[0], total[2]) * (w + total[1] + total[3])]
    return total if max(blocks) <= MAX_BLOCK else None


def rewrite(g, chain, total, origin) -> str:
    """Replace ``chain`` by Concats with zero blocks (W first, then H); the last Pad's output kept."""
    last = chain[-1]
    x, y = chain[0].input[0], last.output[0]
    for n in chain:
        g.remove(n)
    n_, c, h, w = g.shape(x)
    top, left, bottom, right = total
    steps = [(3, left, right), (2, top, bottom)]
    steps = [s for s in steps if s[1] or s[2]]
    for k, (axis, b, e) in enumerate(steps):
        sx = list(g.shape(x))
        ins = []
        for tag, p in (("begin", b), ("end", e)):
            if p:
                bs = list(sx)
                bs[axis] = p
                ins.append((tag, g.add_const(f"{last.name}/zeros_{'hw'[axis - 2]}_{tag}", np.zeros(bs, np.float32))))
        inputs = ([z for t, z in ins if t == "begin"] + [x] + [z for t, z in ins if t == "end"])
        out = y if k == len(steps) - 1 else g.fresh(f"{y}/pad_w")
        g.make("Concat", inputs, [out], near=last, origin=origin,
               name=last.name if k == len(steps) - 1 else f"{last.name}/pad_w", axis=axis)
        sx[axis] += b + e
        g.set_shape(out, sx, g.dtype(x))
        x = out
    return f"zero Pad(s) x{len(chain)} {total} -> {len(steps)} Concat(s) with constant zero blocks"
