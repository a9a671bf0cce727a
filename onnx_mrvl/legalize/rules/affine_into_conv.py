"""Per-channel (or scalar) ``Mul`` / ``Add`` constants right before a Conv without padding fold into
that Conv: ``conv(a*x + b) = conv_{W*a}(x) + sum(W*b)`` per output channel, exact (with padding the
border would see 0, not b, so padded Convs are left alone). PP-LCNetV3 / PP-HGNetV2 learnable
affine blocks after an activation (``act(y) * s + t``, which no conv chain can absorb) and a
BatchNormalization after an activation (Mul + Add) otherwise stay two element-wise layers before
the next 1x1 conv."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, inp


def _per_channel(g, node, c: int) -> Optional[np.ndarray]:
    """The constant [c] of an Add/Mul of a 4-D tensor and a per-channel or scalar constant."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in ("Add", "Mul") or len(node.input) != 2:
        return None
    k = 1 if g.is_const(node.input[1]) else 0 if g.is_const(node.input[0]) else None
    if k is None or g.is_const(node.input[1 - k]):
        return None
    v = g.const(node.input[k])
    if v.dtype != np.float32 or v.ndim > 4:
        return None
    if v.size == 1:
        return np.full(c, float(v.reshape(-1)[0]))
    if (1,) * (4 - v.ndim) + tuple(v.shape) != (1, c, 1, 1):
        return None
    return v.reshape(-1).astype(np.float64)


NAME = "affine_into_conv"
OPS = ("Conv",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or any(attr(node, "pads") or []):
        return None
    sx = g.shape(node.input[0])
    if sx is None or len(sx) != 4 or not g.is_const(node.input[1]) or (inp(node, 2) and not g.is_const(node.input[2])):
        return None
    chain, scale, shift, t = [], np.ones(sx[1]), np.zeros(sx[1]), node.input[0]
    while True:
        p = g.producer.get(t)
        if p is None or g.only_consumer(t) is not (chain[-1] if chain else node):
            break
        v = _per_channel(g, p, sx[1])
        if v is None:
            break
        chain.append(p)
        t = p.input[0] if not g.is_const(p.input[0]) else p.input[1]
    if not chain:
        return None
    for p in reversed(chain):                     # innermost first: x -> a*x + b
        v = _per_channel(g, p, sx[1])
        if p.op_type == "Mul":
            scale, shift = scale * v, shift * v
        else:
            shift = shift + v
    return Match([node] + chain, {"x": t, "scale": scale, "shift": shift})


def check(m: Match, g, target) -> Optional[str]:
    if attr(m.node, "auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return "auto_pad not resolved"
    if g.dtype(m.data["x"]) != 1:
        return "not float32"
    if _gelu_product(g, m.data["x"]):
        return "the constant factor of a written-out GELU (fuse takes the whole GELU as an activation)"
    return None


def _gelu_product(g, t: str) -> bool:
    """``t = x * (1 + Erf(.))`` or ``x * (1 + Tanh(.))``: the body of a GELU whose 0.5 follows."""
    p = g.producer.get(t)
    if p is None or p.op_type != "Mul":
        return False
    for i in p.input:
        q = g.producer.get(i)
        if q is not None and q.op_type == "Add" and any(
                g.producer.get(j) is not None and g.producer[j].op_type in ("Erf", "Tanh") for j in q.input):
            return True
    return False


def rewrite(m: Match, g) -> str:
    conv = m.node
    w = g.const(conv.input[1]).astype(np.float64)
    o, ig = w.shape[:2]
    group = attr(conv, "group", 1)
    cin = np.arange(o)[:, None] // (o // group) * ig + np.arange(ig)[None, :]   # input channel of w[o, i]
    scale, shift = m.data["scale"][cin], m.data["shift"][cin]
    b = g.const(conv.input[2]).astype(np.float64) if inp(conv, 2) else np.zeros(o)
    b2 = b + (w * shift[:, :, None, None]).sum(axis=(1, 2, 3))
    w2 = w * scale[:, :, None, None]
    origin = m.origin
    for n in m.nodes:
        g.remove(n)
    dt = g.const(conv.input[1]).dtype
    node = g.make("Conv", [m.data["x"], g.add_const(f"{conv.name}/W", w2.astype(dt)),
                           g.add_const(f"{conv.name}/B", b2.astype(dt))], [conv.output[0]], near=conv,
                  origin=origin, name=conv.name)
    node.attribute.extend(conv.attribute)
    return f"{len(m.nodes) - 1} per-channel Mul/Add folded into the unpadded Conv {conv.name}"
