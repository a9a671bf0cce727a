"""ReduceSum over the axes a pool can average (2 and 3 of a 4-D tensor, one axis >= 2 of a 3-D /
4-D one, or the token axis 1 of a 3-D ``[B, T, C]`` when the sum is divided, a mean: the masked mean pooling
of sentence encoders, ``(h * mask).sum(1) / mask.sum(1)``) -> ReduceMean times the number of elements summed, which reducemean_to_gap /
reduce_axis_to_pool then put on the accelerator as pools. DeepSpeech2 sums the two directions of
each BiGRU (``x.view(T, N, 2, -1).sum(2)``), audio models sum over frequency, pooling heads sum over
the map. The mean in fp32 times N is the sum up to rounding; in fp16 the mean of N values stays in
range where their sum might not. Left alone: ``x / sum(x)`` (a decomposed Softmax / normalization,
kept in fp32), QDQ reductions, integer tensors."""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from .base import Match, attr, axes_of, is_float, sum_kept

NAME = "reducesum_to_mean"
OPS = ("ReduceSum",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "ReduceSum" or node.domain not in ("", "ai.onnx"):
        return None
    sx = g.shape(node.input[0])
    if sx is None or len(sx) not in (3, 4):
        return None
    axes = axes_of(g, node, 1)
    if not axes:
        return None
    axes = sorted(a % len(sx) for a in axes)
    if not (axes == [2, 3] and len(sx) == 4 or len(axes) == 1 and (axes[0] >= 2 or axes[0] == 1 and len(sx) == 3)):
        return None
    return Match([node], {"axes": axes, "n": int(np.prod([sx[a] for a in axes]))})


def check(m: Match, g, target) -> Optional[str]:
    node, x = m.node, m.node.input[0]
    if not is_float(g, x):
        return "not a float tensor"
    if attr(node, "noop_with_empty_axes", 0):
        return "noop_with_empty_axes"
    if m.data["axes"] == [1]:   # the token axis of [B, T, C]: only a sum that is divided (a mean pooling)
        readers = g.users(node.output[0])
        if not readers or node.output[0] in g.outputs or not all(_divides(g, r, node.output[0]) for r in readers):
            return "a token-axis sum that is not divided (a real reduction, not a mean pooling)"
    return sum_kept(g, node)


def _divides(g, reader, name: str) -> bool:
    """``reader`` divides ``name``: ``Div(name, d)`` or ``Mul(name, Reciprocal(d))`` (div_host_divisor's)."""
    if reader.op_type == "Div":
        return reader.input[0] == name and reader.input[1] != name
    if reader.op_type == "Mul" and name in reader.input:
        other = reader.input[1] if reader.input[0] == name else reader.input[0]
        p = g.producer.get(other)
        return p is not None and p.op_type == "Reciprocal"
    return False


def rewrite(m: Match, g) -> str:
    node, axes, n = m.node, m.data["axes"], m.data["n"]
    x, y = node.input[0], node.output[0]
    keep = int(attr(node, "keepdims", 1))
    mean = g.fresh(f"{y}/mean")
    g.remove(node)
    if g.opset >= 18:
        ax = g.add_const(f"{node.name}/axes", np.array(axes, np.int64))
        g.make("ReduceMean", [x, ax], [mean], near=node, origin=m.origin, name=f"{node.name}/mean", keepdims=keep)
    else:
        g.make("ReduceMean", [x], [mean], near=node, origin=m.origin, name=f"{node.name}/mean", axes=axes,
               keepdims=keep)
    sy = g.shape(y)
    if sy is not None:
        g.set_shape(mean, sy, g.dtype(x) or onnx.TensorProto.FLOAT)
    count = g.scalar_like(f"{node.name}/count", float(n), x)
    g.make("Mul", [mean, count], [y], near=node, origin=m.origin, name=node.name)
    return f"ReduceSum over axes {axes} -> ReduceMean x {n}"
