"""BatchNormalization right after a Conv (the Conv output read by nothing else) folds into the
Conv's weight and bias, computed in float64 and stored in the weight's type."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, inp

NAME = "bn_into_conv"
OPS = ("BatchNormalization",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "BatchNormalization" or node.domain not in ("", "ai.onnx"):
        return None
    conv = g.producer.get(node.input[0])
    if conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx"):
        return None
    if g.only_consumer(conv.output[0]) is not node:
        return None
    return Match([node, conv])


def check(m: Match, g, target) -> Optional[str]:
    bn, conv = m.nodes
    if any(not g.is_const(i) for i in bn.input[1:5]):
        return "BatchNormalization parameters are not constant"
    if not g.is_const(conv.input[1]) or (inp(conv, 2) and not g.is_const(conv.input[2])):
        return "Conv weight or bias is not constant"
    if attr(bn, "training_mode", 0):
        return "training_mode=1"
    if any(o and g.used(o) for o in bn.output[1:]):
        return "running statistics outputs are used"
    if attr(bn, "spatial", 1) == 0:
        return "spatial=0 (per-activation statistics)"
    return None


def rewrite(m: Match, g) -> str:
    bn, conv = m.nodes
    scale, bias, mean, var = (g.const(i).astype(np.float64) for i in bn.input[1:5])
    eps = attr(bn, "epsilon", 1e-5)
    w = g.const(conv.input[1])
    o = w.shape[0]
    b = g.const(conv.input[2]).astype(np.float64) if inp(conv, 2) else np.zeros(o)
    s = scale / np.sqrt(var + eps)
    # float64 products rounded once to the weight's type, computed in blocks (no float64 copy of the weight)
    w2 = np.multiply(w, s.reshape((o,) + (1,) * (w.ndim - 1)), dtype=np.float64,
                     out=np.empty(w.shape, w.dtype), casting="unsafe")
    b2 = ((b - mean) * s + bias).astype(w.dtype)
    origin = m.origin
    g.remove(bn)
    g.remove(conv)
    node = g.make("Conv", [conv.input[0], g.add_const(f"{conv.name}/W", w2),
                           g.add_const(f"{conv.name}/B", b2)], [bn.output[0]], near=conv,
                  origin=origin, name=conv.name)
    node.attribute.extend(conv.attribute)
    return f"BatchNormalization {bn.name} folded into Conv {conv.name}"
