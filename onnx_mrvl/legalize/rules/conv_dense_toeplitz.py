"""A 1-D Conv whose kernel sees mostly padding -> a MatMul by its unrolled (Toeplitz) matrix:

    y[n, o, j] = sum_{c, k} W[o, c, k] x[n, c, j * s + k * d - p]     (taps outside x read zeros)
    -> Reshape(x, [N, C * L]) @ Wd[C * L, O * Lo] (+ bias per o) -> Reshape [N, O, Lo]

PESTO's ``ToeplitzLinear`` (a trained pitch estimator: a dense layer written as Conv1d with
``kernel = in + out - 1``, ``padding = out - 1``) is the source: its kernel (647 taps over a
264-long input) would be cut by conv_kernel_split into ~93 tile convs whose fp16 partial sums add up
(9x the fp16 baseline's error on its logits); as a MatMul it is one fully-connected layer, one fp32
accumulation and one rounding. Taken only when the kernel exceeds ``max_kernel`` (a kernel that
fits stays a Conv) and the unrolled matrix needs no more multiply-accumulates than the convolution's
taps (C * L * O * Lo <= C * K * O * Lo: the kernel is at least as long as the input, the rest of its
taps read padding) and holds at most 2^22 weights."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, inp, is_float

NAME = "conv_dense_toeplitz"
OPS = ("Conv",)
MAX_WEIGHTS = 1 << 22


def match(node, g) -> Optional[Match]:
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx"):
        return None
    sw, sx = g.shape(node.input[1]), g.shape(node.input[0])
    if sw is None or sx is None or len(sw) != 3 or len(sx) != 3 or sw[2] <= g.target.max_kernel:
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if not is_float(g, node.input[0]):
        return "not a float tensor"
    if not g.is_const(node.input[1]) or (inp(node, 2) and not g.is_const(node.input[2])):
        return "weight or bias is not constant"
    sx, sy = g.shape(node.input[0]), g.shape(node.output[0])
    if sy is None or any(not isinstance(d, int) for d in list(sx) + list(sy)):
        return "shapes are not static"
    if attr(node, "group", 1) != 1:
        return "grouped conv"
    if attr(node, "auto_pad", "NOTSET") not in ("NOTSET", ""):
        return "auto_pad not resolved to explicit pads"
    o, c, k = g.shape(node.input[1])
    length, lo = sx[2], sy[2]
    if length > k:
        return f"the input ({length}) is longer than the kernel ({k}): a convolution, not a dense layer"
    if c * length * o * lo > MAX_WEIGHTS:
        return f"the unrolled matrix would hold {c * length * o * lo} weights (limit {MAX_WEIGHTS})"
    return None


def unrolled(w: np.ndarray, length: int, lo: int, stride: int, dil: int, pad: int) -> np.ndarray:
    """The [C * L, O * Lo] matrix of a 1-D convolution with weights ``w`` [O, C, K] over length L."""
    o, c, k = w.shape
    out = np.zeros((c, length, o, lo), np.float64)
    j = np.arange(lo)
    for t in range(k):
        i = j * stride + t * dil - pad
        ok = (i >= 0) & (i < length)
        out[:, i[ok], :, j[ok]] += w[:, :, t].T[None]   # [valid j, C, O] at (c, i_j, o, j)
    return out.reshape(c * length, o * lo)


def rewrite(m: Match, g) -> str:
    node = m.node
    x, y = node.input[0], node.output[0]
    n, c, length = g.shape(x)
    lo = g.shape(y)[2]
    w = np.asarray(g.const(node.input[1]), np.float64)
    o, k = w.shape[0], w.shape[2]
    stride = list(attr(node, "strides", [1]))[0]
    dil = list(attr(node, "dilations", [1]))[0]
    pad = list(attr(node, "pads", [0, 0]))[0]
    dt = g.dtype(x)
    wd = unrolled(w, length, lo, stride, dil, pad)
    g.remove(node)
    flat = g.fresh(f"{x}/flat")
    g.make("Reshape", [x, g.add_const(f"{node.name}/flat_shape", np.array([n, c * length], np.int64))], [flat],
           near=node, origin=m.origin, name=f"{node.name}/flatten")
    g.set_shape(flat, [n, c * length], dt)
    prod = g.fresh(f"{y}/dense")
    g.make("MatMul", [flat, g.add_const(f"{node.name}/toeplitz", wd.astype(np.float32))], [prod],
           near=node, origin=m.origin, name=f"{node.name}/dense")
    g.set_shape(prod, [n, o * lo], dt)
    if inp(node, 2):
        b = np.repeat(np.asarray(g.const(node.input[2]), np.float32).reshape(o), lo)
        biased = g.fresh(f"{y}/biased")
        g.make("Add", [prod, g.add_const(f"{node.name}/toeplitz_bias", b)], [biased], near=node, origin=m.origin,
               name=f"{node.name}/bias")
        g.set_shape(biased, [n, o * lo], dt)
        prod = biased
    g.make("Reshape", [prod, g.add_const(f"{node.name}/out_shape", np.array([n, o, lo], np.int64))], [y],
           near=node, origin=m.origin, name=f"{node.name}/unflatten")
    return (f"1-D Conv with a {k}-tap kernel over a {length}-long input -> MatMul by its unrolled "
            f"[{c * length}, {o * lo}] Toeplitz matrix")
