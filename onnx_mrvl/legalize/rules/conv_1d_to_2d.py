"""1-D Conv / ConvTranspose / MaxPool / AveragePool / GlobalAveragePool / GlobalMaxPool -> the 2-D op on a unit H
axis: Reshape [N,C,L] to [N,C,1,L], run the 2-D op (weight reshaped to [O,I,1,k], ConvTranspose's [I,O/g,1,k];
output_padding lifted to [0, p]), Reshape back to [N,O,L']. A Conv whose batch N exceeds target.max_batch
(Silero VAD's sequence exports: one row per 512-sample chunk, hundreds per call) puts the batch on the H axis
instead, ``Transpose [C, N, L] -> [1, C, N, L]``: its [1, k] kernel keeps the rows apart (exact), and the
batch-1 tensor is within the limit. A 2-D ConvTranspose then becomes a Conv
(convtranspose_phases / convtranspose_to_conv): Conv-TasNet / vocoder upsampling layers. A QDQ Conv
(its weight a DequantizeLinear of int8) and a QDQ pool (DQ -> pool -> Q) keep pairs around the 2-D op
(qdq_conv_1d.py)."""
from __future__ import annotations

from typing import Optional

from onnx import helper

from . import qdq_conv_1d
from .reduce_axis_to_pool import qdq_norm_mean
from .base import Match, attr, match_rank, reshape

NAME = "conv_1d_to_2d"
OPS = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")


def match(node, g) -> Optional[Match]:
    # a QDQ Conv (its weight a DequantizeLinear of int8): the 2-D QDQ layer (qdq_conv_1d.py)
    return qdq_conv_1d.match(node, g) or match_rank(node, g, OPS, 3)


def check(m: Match, g, target) -> Optional[str]:
    if m.data.get(qdq_conv_1d.QDQ):
        return qdq_conv_1d.check(m, g, target)
    node = m.node
    if node.op_type == "GlobalAveragePool" and qdq_norm_mean(node, g):
        return "the mean / variance of a QDQ layer norm over the last axis (fuse takes it as it is)"
    if len(node.output) > 1 and any(o and g.used(o) for o in node.output[1:]):
        return "MaxPool indices output is used"
    if node.op_type in ("Conv", "ConvTranspose") and not g.is_const(node.input[1]):
        return "weight is not constant"
    if attr(node, "output_shape") is not None:
        return "ConvTranspose output_shape attribute"
    if g.shape(node.output[0]) is None:
        return "output shape is not static"
    if attr(node, "auto_pad", "NOTSET") != "NOTSET":
        return "auto_pad not yet resolved"
    return None


def _lift(node, name, one):
    v = attr(node, name)
    if v is None:
        return None
    v = list(v)
    if name == "pads":
        return [0, v[0], 0, v[1]]
    if name == "output_padding":
        return [0] + v
    return [one] + v


def rewrite(m: Match, g) -> str:
    if m.data.get(qdq_conv_1d.QDQ):
        return qdq_conv_1d.rewrite(m, g)
    node = m.node
    n, c, l = g.shape(node.input[0])
    sy = g.shape(node.output[0])
    origin = m.origin
    pairs = qdq_conv_1d.pool_pairs(node, g) if node.op_type not in ("Conv", "ConvTranspose") else None
    rows = node.op_type == "Conv" and not pairs and g.target is not None and n > g.target.max_batch
    g.remove(node)
    if rows:   # the batch on the H axis: [N, C, L] -> [C, N, L] -> [1, C, N, L] (kernel [1, k] keeps rows apart)
        t = g.fresh(f"{node.input[0]}/rows")
        g.make("Transpose", [node.input[0]], [t], near=node, origin=origin, name=f"{node.name}/to_rows", perm=[1, 0, 2])
        g.set_shape(t, [c, n, l], g.dtype(node.input[0]))
        x4 = reshape(g, t, [1, c, n, l], near=node, origin=origin, tag="to2d")
    else:
        x4 = reshape(g, node.input[0], [n, c, 1, l], near=node, origin=origin, tag="to2d")
    if pairs:   # DQ -> pool -> Q: pairs around the 2-D pool (exact: the values are on that grid)
        x4 = qdq_conv_1d.pair(g, x4, pairs[0], node, origin, "to2d")
    inputs = [x4]
    if node.op_type in ("Conv", "ConvTranspose"):
        w = g.const(node.input[1])
        inputs.append(g.add_const(f"{node.name}/W", w.reshape(w.shape[0], w.shape[1], 1,
                                                                w.shape[2])))
        inputs += list(node.input[2:3])
    y4 = g.fresh(f"{node.output[0]}/2d")
    new = g.make(node.op_type, inputs, [y4], near=node, origin=origin, name=node.name)
    for a in node.attribute:
        lifted = _lift(node, a.name, 1) if a.name in ("kernel_shape", "strides", "dilations",
                                                      "pads", "output_padding") else None
        if lifted is not None:
            new.attribute.append(helper.make_attribute(a.name, lifted))
        else:
            new.attribute.append(a)
    if rows:
        g.set_shape(y4, [1, sy[1], sy[0], sy[2]], g.dtype(node.output[0]))
        y3 = reshape(g, y4, [sy[1], sy[0], sy[2]], near=node, origin=origin, tag="to1d")
        g.make("Transpose", [y3], [node.output[0]], near=node, origin=origin, name=f"{node.name}/from_rows",
               perm=[1, 0, 2])
        return (f"1-D Conv of batch {n} (above max_batch {g.target.max_batch}) -> 2-D with the batch as rows "
                f"([1, C, N, L], kernel [1, k])")
    g.set_shape(y4, [sy[0], sy[1], 1, sy[2]], g.dtype(node.output[0]))
    if pairs:
        y4 = qdq_conv_1d.pair(g, y4, pairs[1], node, origin, "out2d")
    reshape(g, y4, list(sy), near=node, origin=origin, out=node.output[0], tag="to1d")
    return f"{'QDQ ' if pairs else ''}1-D {node.op_type} -> 2-D on a unit H axis"
