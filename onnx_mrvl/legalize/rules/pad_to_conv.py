"""A constant-mode spatial Pad of a 4-D float tensor that ``pad_fold`` could not fold (it feeds
several nodes, or a MaxPool whose input may be negative) becomes a depthwise 1x1 Conv with unit
weights and those pads: exact for pad value 0 (x * 1 = x in fp16), else ``Conv(x - v) + v`` (the
bias puts v in the border). It then runs on the accelerator instead of cutting the region (the
PP-HGNetV2 stem pads once for a conv and a ceil-mode max pool; TF ZeroPadding2D, NASNet reduction
cells). Only next to an op the accelerator runs, so a Pad between CPU ops does not become a lone
region. A zero Pad (or a chain of them) wider than ``max_pad`` becomes Concats with constant zero
blocks instead of a chain of convs, when the blocks are small (pad_concat.py)."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from . import pad_concat
from .base import Match, is_float
from .pad_fold import pad_spec

NAME = "pad_to_conv"
OPS = ("Pad",)
NEIGHBOURS = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "Add",
              "Mul", "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Concat",
              "Resize", "BatchNormalization", "Max", "Min", "Tanh", "Elu", "Softplus", "Sqrt", "Gelu",
              "Mish", "PRelu", "MatMul", "Gemm")


MAX_CHAIN = 64   # Pads in a chain (conv_kernel_split's edge tiles pad by max_pad per Pad)


def beside_accelerator_op(g, node) -> bool:
    """Its producer or one of its readers is an op the accelerator runs (a data-movement op turned
    into a conv between CPU ops would only make a lone region), looking through a chain of Pads read
    only by the next Pad (conv_kernel_split's padding of an edge tile: one Pad per sweep became a conv
    from the tile's end, the rest of a long chain stayed on the CPU) and through Slices read by such
    an op (the tiles of a kernel split by conv_kernel_split read slices of the padded input)."""
    p = g.producer.get(node.input[0])
    if p is not None and p.op_type in NEIGHBOURS:
        return True
    n = node
    for _ in range(MAX_CHAIN):
        users = g.users(n.output[0])
        if any(u.op_type in NEIGHBOURS for u in users):
            return True
        # read through Slices by convs (conv_kernel_split's tiles of a long kernel)
        if any(u.op_type == "Slice" and any(v.op_type in NEIGHBOURS for v in g.users(u.output[0]))
               for u in users):
            return True
        if len(users) != 1 or users[0].op_type != "Pad":
            return False
        n = users[0]
    return False


def match(node, g) -> Optional[Match]:
    if node.op_type != "Pad" or node.domain not in ("", "ai.onnx"):
        return None
    spec = pad_spec(node, g)
    if spec is None or spec[2] != 4:
        return None
    return Match([node], {"spec": spec})


def check(m: Match, g, target) -> Optional[str]:
    pads, value, _ = m.data["spec"]
    if not is_float(g, m.node.input[0]) or g.dtype(m.node.input[0]) != 1:
        return "not float32"
    if pad_concat.zero_pads(g, m.node) is not None:   # wider than max_pad: one Concat (pad_concat.py)
        chain = pad_concat.chain_of(g, m.node)
        total = pad_concat.plan(g, chain, target.max_pad["conv"])
        if total is not None:
            if chain[-1] is not m.node:
                return "a zero Pad of a chain its last Pad turns into a Concat"
            if not beside_accelerator_op(g, chain[0]):
                return "no accelerator op next to it"
            m.data["concat"] = (chain, total)
            return None
    if pads[0] or pads[1] or pads[4] or pads[5]:
        return "pads the batch or channel axis"
    if any(p < 0 for p in pads):
        return "negative pads (cropping)"
    if max(pads) > target.max_pad["conv"] * MAX_CHAIN:
        return f"pads {pads} exceed {MAX_CHAIN} x target.max_pad ({target.max_pad['conv']})"
    if not math.isfinite(value):
        return f"pad value {value}"
    user = g.only_consumer(m.node.output[0])
    if user is not None and user.op_type in ("Transpose", "Reshape"):
        return "read by a Transpose / Reshape (pad_sink moves it below first)"
    if not beside_accelerator_op(g, m.node):
        return "no accelerator op next to it"
    m.data["limit"] = target.max_pad["conv"]
    return None


def rewrite(m: Match, g) -> str:
    if "concat" in m.data:
        chain, total = m.data["concat"]
        return pad_concat.rewrite(g, chain, total, m.origin)
    node = m.node
    pads, value, _ = m.data["spec"]
    c = g.shape(node.input[0])[1]
    x, origin = node.input[0], m.origin
    g.remove(node)
    if value != 0.0:
        shifted = g.fresh(f"{x}/minus_pad_value")
        g.make("Add", [x, g.add_const(f"{node.name}/neg_value", np.array(-value, np.float32))], [shifted],
               near=node, origin=origin, name=f"{node.name}/shift")
        x = shifted
    left, limit = [pads[2], pads[3], pads[6], pads[7]], target_limit(m)
    convs = 0
    while any(left):   # pads above max_pad: a chain of convs, each padding at most max_pad per side
        step = [min(p, limit) for p in left]
        left = [p - q for p, q in zip(left, step)]
        last = not any(left)
        out = node.output[0] if last else g.fresh(f"{node.output[0]}/pad{convs}")
        g.make("Conv", [x, g.add_const(f"{node.name}/W", np.ones((c, 1, 1, 1), np.float32)),
                        g.add_const(f"{node.name}/B", np.full(c, value if last else 0.0, np.float32))], [out],
               near=node, origin=origin, name=node.name if last else f"{node.name}/pad{convs}",
               kernel_shape=[1, 1], strides=[1, 1], dilations=[1, 1], pads=step, group=c)
        if not last:
            sx = g.shape(x)
            g.set_shape(out, [sx[0], sx[1], sx[2] + step[0] + step[2], sx[3] + step[1] + step[3]], g.dtype(x))
        x, convs = out, convs + 1
    return f"Pad {pads[2:4] + pads[6:8]} (value {value}) -> {convs} depthwise 1x1 Conv(s)"


def target_limit(m: Match) -> int:
    return m.data["limit"]
