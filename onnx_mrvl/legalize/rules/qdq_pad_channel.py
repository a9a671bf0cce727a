"""A zero Pad on the channel axis between Q/DQ pairs (BlazeFace's widening residual blocks,
quantized: onnxruntime's quantizer puts a pair after the Pad):

    DQ(x_q; s, z) -> Pad(channels, 0) -> Q(s', z')   =>   DQ(x_q; s, z) -> Conv 1x1 (W) -> Q(s', z')

W is the one-hot [C + p, C, 1, 1] copy of the C input channels to their padded positions, as
``DequantizeLinear`` of int8 codes 1 / 0 with weight scale 1 per output channel (the quantizer's
per-channel weight form), so fuse takes a QDQ Conv: every kept channel's accumulator is ``q - z``
and requantizes as ``Q(s', z')(s * (q - z))`` (what onnxruntime computes for ``Q(Pad(DQ(q)))``),
every added channel's is 0, which quantizes to z' as the pad's 0 does. Exact. The float form is
``pad_channel_concat`` (a Concat with constant blocks; the int8 Concat takes no constants).

Rules: a 4-D tensor of static shape, non-negative pads on axis 1 only, value 0, per-tensor constant
scale / zero point on the DQ and on the Q that alone reads the Pad, C + p within ``max_channels``.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, inp
from .pad_fold import pad_spec

NAME = "qdq_pad_channel"
OPS = ("Pad",)


def _per_tensor(g, n) -> bool:
    s = g.const(inp(n, 1))
    z = g.const(inp(n, 2)) if inp(n, 2) else np.zeros(1)
    return s is not None and z is not None and s.size == 1 and z.size == 1


def match(node, g) -> Optional[Match]:
    if node.op_type != "Pad" or node.domain not in ("", "ai.onnx"):
        return None
    dq = g.producer.get(node.input[0])
    if dq is None or dq.op_type != "DequantizeLinear":
        return None
    users = g.users(node.output[0])
    if len(users) != 1 or users[0].op_type != "QuantizeLinear" or node.output[0] in g.pinned:
        return None
    spec = pad_spec(node, g)
    if spec is None or spec[2] != 4:
        return None
    pads = spec[0]
    if not (pads[1] or pads[5]) or any(p for k, p in enumerate(pads) if k % 4 != 1):
        return None
    return Match([node], {"spec": spec, "dq": dq, "q": users[0]})


def check(m: Match, g, target) -> Optional[str]:
    pads, value, _ = m.data["spec"]
    sx = g.shape(m.node.input[0])
    if sx is None or any(d is None or d <= 0 for d in sx):
        return "shape unknown"
    if pads[1] < 0 or pads[5] < 0:
        return "negative pads (cropping)"
    if value != 0.0:
        return f"pad value {value} (0 only: the zero point's code)"
    if not (_per_tensor(g, m.data["dq"]) and _per_tensor(g, m.data["q"])):
        return "the DequantizeLinear / QuantizeLinear around it is not per tensor with constant parameters"
    if sx[1] + pads[1] + pads[5] > target.max_channels:
        return f"{sx[1] + pads[1] + pads[5]} channels exceed target.max_channels ({target.max_channels})"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    pads = m.data["spec"][0]
    c = g.shape(node.input[0])[1]
    o = c + pads[1] + pads[5]
    w = np.zeros((o, c, 1, 1), np.int8)
    w[pads[1] + np.arange(c), np.arange(c), 0, 0] = 1
    wq = g.add_const(f"{node.name}/W_q", w)
    wdq = g.fresh(f"{node.name}/W")
    g.remove(node)
    g.make("DequantizeLinear", [wq, g.add_const(f"{node.name}/W_scale", np.ones(o, np.float32)),
                                g.add_const(f"{node.name}/W_zero_point", np.zeros(o, np.int8))], [wdq],
           near=node, origin=m.origin, name=f"{node.name}/W_dequant", axis=0)
    g.make("Conv", [node.input[0], wdq], [node.output[0]], near=node, origin=m.origin, name=node.name,
           kernel_shape=[1, 1], strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], group=1)
    return f"channel Pad [{pads[1]}, {pads[5]}] between Q/DQ pairs -> int8 one-hot 1x1 Conv"
