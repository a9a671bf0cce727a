"""A standalone BatchNormalization -> Mul(x, scale[C,1,1]) + Add(shift[C,1,1])."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr

NAME = "bn_to_mul_add"
OPS = ("BatchNormalization",)


def match(node, g) -> Optional[Match]:
    if node.op_type == "BatchNormalization" and node.domain in ("", "ai.onnx"):
        return Match([node])
    return None


def check(m: Match, g, target) -> Optional[str]:
    bn = m.node
    if any(not g.is_const(i) for i in bn.input[1:5]):
        return "parameters are not constant"
    if attr(bn, "training_mode", 0):
        return "training_mode=1"
    if any(o and g.used(o) for o in bn.output[1:]):
        return "running statistics outputs are used"
    sx = g.shape(bn.input[0])
    if sx is None or len(sx) < 2:
        return "input rank unknown"
    if attr(bn, "spatial", 1) == 0:
        return "spatial=0"
    if g.opset < 7:
        return "opset < 7: no broadcasting Mul/Add"
    return None


def rewrite(m: Match, g) -> str:
    bn = m.node
    dt = g.const(bn.input[1]).dtype
    eps = attr(bn, "epsilon", 1e-5)
    if dt == np.float32:   # onnxruntime's fp32 arithmetic (batch_norm.h), so Mul + Add equals its kernel
        scale, bias, mean, var = (g.const(i).astype(np.float32) for i in bn.input[1:5])
        s = (scale * (np.float32(1) / np.sqrt(var + np.float32(eps)))).astype(np.float32)
        shift = (bias - (mean * s).astype(np.float32)).astype(np.float32)
    else:
        scale, bias, mean, var = (g.const(i).astype(np.float64) for i in bn.input[1:5])
        s = scale / np.sqrt(var + eps)
        shift = bias - mean * s
    shape = (s.size,) + (1,) * (len(g.shape(bn.input[0])) - 2)
    g.remove(bn)
    mid = g.fresh(f"{bn.output[0]}/scaled")
    g.make("Mul", [bn.input[0], g.add_const(f"{bn.name}/scale", s.reshape(shape).astype(dt))],
           [mid], near=bn, origin=m.origin, name=f"{bn.name}/mul")
    g.make("Add", [mid, g.add_const(f"{bn.name}/shift", shift.reshape(shape).astype(dt))],
           [bn.output[0]], near=bn, origin=m.origin, name=f"{bn.name}/add")
    return "BatchNormalization -> Mul + Add"
