"""Global Response Normalization (ConvNeXt-V2: HF ``ConvNextV2GRN``, timm ``GlobalResponseNorm``,
the official code) -> pools, square roots and an RMS norm the accelerator runs.

GRN's divisor ``n = G / (mean_c(G) + eps)`` with ``G = ||x||_2`` over the two spatial axes (per image
and channel) is a spatial L2 norm and a tensor / tensor divide, neither an accelerator op. Exactly:

* ``G = sqrt(HW) * m`` with ``m = sqrt(mean_HW(x^2))``, so ``n = m / (mean_c(m) + eps / sqrt(HW))``;
* with ``u = sqrt(m)`` (m >= 0): ``n = u^2 / (mean_c(u^2) + eps') = RMSNorm_eps'(u)^2``.

Written as ``Mul(x, 1/16)`` squared (the scale keeps the fp16 squares finite up to |x| = 4096 and
enters eps: ``eps' = eps / (16 sqrt(HW))``), ``GlobalAveragePool`` (gap_split tiles a large map),
``Reshape [N, C]``, two ``Sqrt``, the written-out RMS norm over C that fuse's ``rmsnorm`` takes as its
LayerNorm (``u / Sqrt(ReduceMean(u * u) + eps')``), a square, ``Reshape`` back to n's shape. The
channels-last form (``[N, H, W, C]``, axes {1, 2}, HF's and the official code) pools through a
``Transpose`` to NCHW (a relabelling of the NHWC-stored data). Matched: ``Div(G, Add(ReduceMean(G,
channel axis, keepdims), eps))`` with G a ``ReduceL2`` (or ``Sqrt(ReduceSumSquare)``) over the two
spatial axes with keepdims, G read only by the mean and the Div. Left alone: QDQ forms, dynamic shapes.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import onnx

from .base import Match, attr, axes_of, is_float, reshape, scalar

NAME = "grn_norm"
RESTORABLE = True   # a float re-expression: put back when none of it is offloaded (split/restore.py)
OPS = ("Div",)
PRESCALE = 1.0 / 16


def _l2(g, name):
    """(x, axes, nodes) when ``name`` is a keepdims L2 norm of x over some axes, else None."""
    p = g.producer.get(name)
    if p is None or p.domain not in ("", "ai.onnx"):
        return None
    nodes = [p]
    if p.op_type == "Sqrt":
        p = g.producer.get(p.input[0])
        if p is None or p.op_type != "ReduceSumSquare" or g.only_consumer(p.output[0]) is None:
            return None
        nodes.append(p)
    elif p.op_type != "ReduceL2":
        return None
    if not int(attr(p, "keepdims", 1)) or attr(p, "noop_with_empty_axes", 0):
        return None
    axes = axes_of(g, p, 1)
    return (p.input[0], axes, nodes) if axes else None


def match(node, g) -> Optional[Match]:
    if node.op_type != "Div" or node.domain not in ("", "ai.onnx"):
        return None
    gname, dname = node.input[0], node.input[1]
    add = g.producer.get(dname)
    if add is None or add.op_type != "Add" or g.only_consumer(dname) is not node:
        return None
    mean = eps = None
    for a, b in ((0, 1), (1, 0)):
        p = g.producer.get(add.input[a])
        if p is not None and p.op_type == "ReduceMean" and p.input[0] == gname:
            mean, eps = p, scalar(g.const(add.input[b]))
    if mean is None or eps is None or g.only_consumer(mean.output[0]) is not add:
        return None
    l2 = _l2(g, gname)
    if l2 is None:
        return None
    x, axes, l2_nodes = l2
    sx = g.shape(x)
    if sx is None or len(sx) != 4:
        return None
    spatial = sorted(a % 4 for a in axes)
    if spatial not in ([1, 2], [2, 3]):
        return None
    channel = 3 if spatial == [1, 2] else 1
    maxes = axes_of(g, mean, 1)
    if not maxes or [a % 4 for a in maxes] != [channel] or not int(attr(mean, "keepdims", 1)):
        return None
    return Match([node, add, mean, *l2_nodes], {"x": x, "eps": eps, "channel": channel, "spatial": spatial})


def check(m: Match, g, target) -> Optional[str]:
    div, x = m.node, m.data["x"]
    if not is_float(g, x):
        return "not a float tensor"
    if set(u.op_type for u in g.users(div.input[0])) - {"ReduceMean", "Div"} or len(g.users(div.input[0])) != 2 \
            or div.input[0] in g.pinned:
        return "the L2 norm is read outside GRN's divide"
    p = g.producer.get(x)
    if p is not None and p.op_type == "DequantizeLinear" or \
            any(u.op_type == "QuantizeLinear" for u in g.users(div.output[0])):
        return "a QDQ form"
    if g.shape(div.output[0]) is None:
        return "the divide has no static shape"
    if m.data["eps"] < 0:
        return f"eps {m.data['eps']} is negative"
    return None


def rewrite(m: Match, g) -> str:
    div, x, ch = m.node, m.data["x"], m.data["channel"]
    sx, out_shape = g.shape(x), g.shape(div.output[0])
    n, c = sx[0], sx[ch]
    hw = int(np.prod([sx[a] for a in m.data["spatial"]]))
    eps2 = m.data["eps"] * PRESCALE / math.sqrt(hw)
    origin, name, f32 = m.origin, div.name, onnx.TensorProto.FLOAT
    for node in m.nodes:
        g.remove(node)

    def op(kind, inputs, shape, tag, **attrs):
        y = g.fresh(f"{div.output[0]}/{tag}")
        g.make(kind, inputs, [y], near=div, origin=origin, name=f"{name}/{tag}", **attrs)
        g.set_shape(y, shape, f32)
        return y

    nchw = [n, c, sx[1], sx[2]] if ch == 3 else list(sx)
    t = op("Transpose", [x], nchw, "nchw", perm=[0, 3, 1, 2]) if ch == 3 else x
    s = op("Mul", [t, g.scalar_like(f"{name}/prescale", PRESCALE, x)], nchw, "scaled")
    sq = op("Mul", [s, s], nchw, "square")
    ms = op("GlobalAveragePool", [sq], [n, c, 1, 1], "mean_square")
    q = reshape(g, ms, [n, c], near=div, origin=origin, tag="rows")
    r = op("Sqrt", [q], [n, c], "rms")
    u = op("Sqrt", [r], [n, c], "root")
    uu = op("Mul", [u, u], [n, c], "u_square")
    if g.opset >= 18:
        mu = op("ReduceMean", [uu, g.add_const(f"{name}/axes", np.array([-1], np.int64))], [n, 1], "u_mean", keepdims=1)
    else:
        mu = op("ReduceMean", [uu], [n, 1], "u_mean", axes=[-1], keepdims=1)
    ve = op("Add", [mu, g.scalar_like(f"{name}/eps", eps2, x)], [n, 1], "u_mean_eps")
    sd = op("Sqrt", [ve], [n, 1], "u_rms")
    nr = op("Div", [u, sd], [n, c], "u_norm")
    n2 = op("Mul", [nr, nr], [n, c], "response")
    reshape(g, n2, out_shape, near=div, origin=origin, out=div.output[0], tag="back")
    return (f"GRN over {'NHWC' if ch == 3 else 'NCHW'} {list(sx)}: spatial L2 / its channel mean -> "
            f"GlobalAveragePool of squares, Sqrt x2, RMS norm over C (eps {eps2:.3g}), square")
