"""``ReduceSum`` over one short axis (2 to ``MAX_PARTS`` entries) -> ``Split`` of that axis + a chain of
``Add`` + ``Reshape`` to the reduced shape: ResNeSt's split attention sums its radix branches as
``x.view(B, radix, C, H, W).sum(1)`` (8 CPU ReduceSums cut timm's resnest14d into 9 regions). The
accelerator has no reduction along an arbitrary axis, but slices (fuse ``slices_nd``) and adds. Exact
for two parts (one addition); more parts add left to right in fp32 (onnxruntime's order may differ by
an fp32 rounding). Left alone: several axes, a longer axis (a real reduction), integer tensors."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, axes_of, is_float, reshape, sum_kept

NAME = "reduce_sum_split"
OPS = ("ReduceSum",)
MAX_PARTS = 8


def match(node, g) -> Optional[Match]:
    if node.op_type != "ReduceSum" or node.domain not in ("", "ai.onnx"):
        return None
    sx = g.shape(node.input[0])
    axes = axes_of(g, node, 1)
    if sx is None or not axes or len(axes) != 1:
        return None
    axis = axes[0] % len(sx)
    if not 2 <= sx[axis] <= MAX_PARTS:
        return None
    return Match([node], {"sx": sx, "axis": axis})


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if not is_float(g, node.input[0]) or g.is_const(node.input[0]):
        return "constant or non-float input"
    if g.shape(node.output[0]) is None:
        return "output shape is not static"
    return sum_kept(g, node)


def rewrite(m: Match, g) -> str:
    node = m.node
    sx, axis = list(m.data["sx"]), m.data["axis"]
    k, origin, dt = sx[axis], m.origin, g.dtype(node.input[0])
    g.remove(node)
    parts = [g.fresh(f"{node.output[0]}/part{i}") for i in range(k)]
    if g.opset >= 13:
        g.make("Split", [node.input[0], g.add_const(f"{node.name}/sizes", np.ones(k, np.int64))], parts,
               near=node, origin=origin, name=f"{node.name}/split", axis=axis)
    else:
        g.make("Split", [node.input[0]], parts, near=node, origin=origin, name=f"{node.name}/split", axis=axis,
               split=[1] * k)
    one = list(sx)
    one[axis] = 1
    for p in parts:
        g.set_shape(p, one, dt)
    acc = parts[0]
    for i, p in enumerate(parts[1:], 1):
        y = g.fresh(f"{node.output[0]}/sum{i}")
        g.make("Add", [acc, p], [y], near=node, origin=origin, name=f"{node.name}/add{i}")
        g.set_shape(y, one, dt)
        acc = y
    reshape(g, acc, list(g.shape(node.output[0])), near=node, origin=origin, out=node.output[0], tag="reduced")
    return f"ReduceSum over axis {axis} of {k} -> Split + {k - 1} Add"
