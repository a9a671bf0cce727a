"""The L2 normalisation of an embedding over its last axis -> the RMS-norm form fuse's ``rmsnorm``
runs as one Mrvl ``LayerNorm`` (rms = 1):

    Div(x, ReduceL2(x, [last], keepdims=1))   (torch ``x / x.norm(dim=-1, keepdim=True)``: Resemblyzer,
                                               speaker / face embeddings; both torch exporters)
    LpNormalization(x, axis=last, p=2)
        -> x / Sqrt(ReduceMean(x * x, [last]) + 0) * (1 / sqrt(D))

``x / ||x|| = x / sqrt(D mean(x^2)) = x / sqrt(mean(x^2)) / sqrt(D)``: exact in real arithmetic (the
constant factor is the RMSNorm's gamma); eps 0 keeps ONNX's 0 / 0 = NaN for an all-zero row (the
simulator reports it: fail closed). Before, the ReduceL2 / Div stayed on the CPU after the last
region. F.normalize's ``x / max(||x||, eps)`` (``Clip(min=eps)`` or ``Max``, then ``Expand`` to x's
shape: facenet / speaker embeddings) takes RMS eps ``eps^2 / D``: ``x / sqrt(||x||^2 + eps^2)``, the
same where ``||x|| >> eps`` (relative ``eps^2 / 2||x||^2``: nil for eps 1e-12 wherever fp16 holds a
non-zero x) and 0 for x = 0 (ONNX: 0 / eps = 0). Left alone: another axis, ``keepdims=0``, a
ReduceL2 read by anything else, p = 1, and a static QDQ model's float tail (x computed from a Q -> DQ
pair's codes): no int8 layer takes it, so it stays onnxruntime's own fp32 ops on the host."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .base import Match, attr, inp, is_float
from .contrib_ops import Writer
from .div_host_divisor import from_int8_activation

NAME = "l2_normalize"
RESTORABLE = True   # a float re-expression: put back when none of it is offloaded (split/restore.py)
OPS = ("Div", "LpNormalization")


def _last_axis(node, g, rank: int) -> bool:
    axes = attr(node, "axes")
    if axes is None and inp(node, 1):
        c = g.const(node.input[1])
        if c is None:
            return False
        axes = c.reshape(-1).tolist()
    return axes is not None and len(axes) == 1 and int(axes[0]) % rank == rank - 1


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx") or not is_float(g, node.input[0]):
        return None
    shape = g.shape(node.input[0])
    if not shape or any(not isinstance(d, int) or d <= 0 for d in shape) or shape[-1] < 2:
        return None
    rank = len(shape)
    if node.op_type == "LpNormalization":
        if attr(node, "p", 2) != 2 or int(attr(node, "axis", -1)) % rank != rank - 1:
            return None
        return Match([node], {"x": node.input[0], "shape": list(shape)})
    if node.op_type != "Div" or list(g.shape(node.output[0]) or []) != list(shape):
        return None
    steps, eps = _denominator(g, node.input[1])
    red = steps[-1] if steps else None
    if red is None or red.op_type != "ReduceL2" or red.domain not in ("", "ai.onnx"):
        return None
    if red.input[0] != node.input[0] or not attr(red, "keepdims", 1) or not _last_axis(red, g, rank):
        return None
    return Match([node] + steps, {"x": node.input[0], "shape": list(shape), "eps": eps})


def _denominator(g, t: str):
    """The nodes from the Div's divisor back to its ReduceL2 (F.normalize's ``Expand`` to x's shape
    and ``Clip(min=eps)`` / ``Max(., eps)`` on the way, each read only by the next) and eps (0: none)."""
    steps, eps = [], 0.0
    while True:
        n = g.producer.get(t)
        if n is None or n.domain not in ("", "ai.onnx") or len(g.users(t)) != 1 or t in g.pinned:
            return [], 0.0
        steps.append(n)
        if n.op_type == "ReduceL2":
            return steps, eps
        if n.op_type == "Expand" and not eps and len(steps) == 1:
            t = n.input[0]
            continue
        if n.op_type in ("Clip", "Max") and not eps:
            lo = g.const(inp(n, 1))
            hi = g.const(inp(n, 2)) if n.op_type == "Clip" and inp(n, 2) else None
            if lo is None or lo.size != 1 or not float(lo.reshape(-1)[0]) > 0 or \
                    (n.op_type == "Clip" and inp(n, 2) and (hi is None or float(hi.reshape(-1)[0]) != np.inf)):
                return [], 0.0
            eps, t = float(lo.reshape(-1)[0]), n.input[0]
            continue
        return [], 0.0


def check(m: Match, g, target) -> Optional[str]:
    if from_int8_activation(g, m.data["x"], depth=8):
        # a static QDQ model's float tail (sentence-embedding pooling + normalise): no int8 layer takes it,
        # so it stays onnxruntime's fp32 ReduceL2 / Div on the host, bit for bit, not the rewritten form
        return "a QDQ model's float tail: the normalisation stays onnxruntime's fp32 ReduceL2 / Div on the host"
    return None


def rewrite(m: Match, g) -> str:
    n = m.node
    w = Writer(g, n, m.origin)
    x, shape, y = m.data["x"], m.data["shape"], n.output[0]
    for k in m.nodes:
        g.remove(k)
    gamma = w.const("l2_gamma", np.full([shape[-1]], 1.0 / math.sqrt(shape[-1]), np.float32))
    eps = m.data.get("eps", 0.0)
    w.rms_norm(x, shape, gamma, eps * eps / shape[-1], out=y)
    return f"{n.op_type} L2 normalisation over the last axis ({shape[-1]}) -> RMS norm (eps 0) * 1/sqrt({shape[-1]})"
