"""onnxruntime's fused activations (com.microsoft) -> the written-out forms fuse takes as one activation
(docs/fusion.md "Activations"):

    Gelu(x)              -> x * 0.5 * (1 + Erf(x * 1/sqrt 2))         (PyTorch's association)
    BiasGelu(a, b)       -> Gelu(a + b)
    GemmFastGelu(x, W[, bias]) -> FastGelu(MatMul(x, W) [+ bias])
    FastGelu(x[, bias])  -> 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))   of x [+ bias]
    QuickGelu(x; alpha)  -> x * Sigmoid(alpha * x)                    (alpha 1.702 by default)
    BiasAdd(x, bias, skip) -> x + bias + skip
    BiasSplitGelu(x, bias) -> (a, b) = halves of x + bias on the last axis; a * Gelu(b)
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .base import Match, inp, is_float
from .contrib_ops import Writer, float32_check, float_attr, shape_of
from .contrib_ops import REPORT_SKIPS, match  # noqa: F401  (the contrib rules' own)

NAME = "contrib_gelu"
RESTORABLE = True   # a float re-expression: put back when none of it is offloaded (split/restore.py)
OPS = ("Gelu", "BiasGelu", "FastGelu", "GemmFastGelu", "QuickGelu", "BiasAdd", "BiasSplitGelu")


@float32_check
def check(m: Match, g, n) -> Optional[str]:
    for t in n.input:
        if t and (shape_of(g, t) is None or not is_float(g, t)):
            return f"{n.op_type} '{n.name}': input '{t}' has no static float32 shape"
    if n.op_type == "BiasSplitGelu" and shape_of(g, n.input[0])[-1] % 2:
        return f"BiasSplitGelu '{n.name}': the last axis ({shape_of(g, n.input[0])[-1]}) is odd"
    return None


def _out_shape(g, a: str, b: str):
    return list(np.broadcast_shapes(shape_of(g, a), shape_of(g, b)))


def gelu_erf(w: Writer, x: str, shape, out: Optional[str] = None) -> str:
    s = w.op("Mul", [x, w.const("inv_sqrt2", 1.0 / math.sqrt(2.0))], shape, tag="gelu_scale")
    e = w.op("Add", [w.op("Erf", [s], shape, tag="gelu_erf"), w.const("one", 1.0)], shape, tag="gelu_one_plus")
    return w.op("Mul", [w.op("Mul", [x, e], shape, tag="gelu_x"), w.const("half", 0.5)], shape, tag="gelu_half",
                out=out)


def gelu_tanh(w: Writer, x: str, shape, out: Optional[str] = None) -> str:
    cube = w.op("Pow", [x, w.const("three", 3.0)], shape, tag="gelu_cube")
    inner = w.op("Add", [x, w.op("Mul", [cube, w.const("c", 0.044715)], shape, tag="gelu_c")], shape, tag="gelu_inner")
    k = w.op("Mul", [inner, w.const("k", math.sqrt(2.0 / math.pi))], shape, tag="gelu_k")
    t = w.op("Add", [w.op("Tanh", [k], shape, tag="gelu_tanh"), w.const("one", 1.0)], shape, tag="gelu_one_plus")
    return w.op("Mul", [w.op("Mul", [x, t], shape, tag="gelu_x"), w.const("half", 0.5)], shape, tag="gelu_half",
                out=out)


def rewrite(m: Match, g) -> str:
    n = m.node
    w = Writer(g, n, m.origin)
    out = n.output[0]
    op = n.op_type
    g.remove(n)
    x = n.input[0]
    shape = list(shape_of(g, x))
    if op == "GemmFastGelu":
        shape = shape[:-1] + [shape_of(g, n.input[1])[-1]]
        x = w.op("MatMul", [x, n.input[1]], shape, tag="matmul")
        if inp(n, 2):
            x = w.op("Add", [x, n.input[2]], shape, tag="bias_add")
        gelu_tanh(w, x, shape, out)
        return "GemmFastGelu -> MatMul + FastGelu's tanh form"
    if op in ("BiasGelu", "FastGelu", "BiasAdd", "BiasSplitGelu") and inp(n, 1):
        shape = _out_shape(g, x, n.input[1])
        x = w.op("Add", [x, n.input[1]], shape, tag="bias_add")
    if op in ("Gelu", "BiasGelu"):
        gelu_erf(w, x, shape, out)
        return f"{op} -> x * 0.5 * (1 + Erf(x / sqrt 2))"
    if op == "FastGelu":
        gelu_tanh(w, x, shape, out)
        return "FastGelu -> 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 x^3)))"
    if op == "QuickGelu":
        alpha = float_attr(n, "alpha", 1.702)
        sx = w.op("Mul", [x, w.const("alpha", alpha)], shape, tag="alpha") if alpha != 1.0 else x
        w.op("Mul", [x, w.op("Sigmoid", [sx], shape, tag="sigmoid")], shape, tag="gate", out=out)
        return f"QuickGelu -> x * Sigmoid({alpha:g} * x)"
    if op == "BiasAdd":
        shape = _out_shape(g, x, n.input[2])
        w.op("Add", [x, n.input[2]], shape, tag="skip_add", out=out)
        return "BiasAdd -> x + bias + skip"
    half = shape[-1] // 2
    hs = shape[:-1] + [half]
    axis = len(shape) - 1
    a = w.op("Slice", [x, w.const("a0", [0], np.int64), w.const("a1", [half], np.int64),
                       w.const("ax", [axis], np.int64)], hs, tag="left")
    b = w.op("Slice", [x, w.const("b0", [half], np.int64), w.const("b1", [2 * half], np.int64),
                       w.const("bx", [axis], np.int64)], hs, tag="right")
    w.op("Mul", [a, gelu_erf(w, b, hs)], hs, tag="gate", out=out)
    return "BiasSplitGelu -> left half * Gelu(right half) of x + bias"
