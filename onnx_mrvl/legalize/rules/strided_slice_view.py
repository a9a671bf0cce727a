"""A Slice with step k > 1 over one axis of size n = k * m, from a start s < k to the end ->
``Reshape(x, [..., m, k * R])`` -> ``Slice([s * R, (s + 1) * R))`` (step 1) -> ``Reshape`` back, with
R the product of the axes after the sliced one: every k-th row of the axis is one contiguous
block of the [m, k * R] view. Swin's patch merging (``x[:, 0::2, 0::2, :]`` of [B, H, W, C]) and
other strided subsamples of token tensors; exact (only data moves), and the step-1 slice is an
accelerator op (fuse's slices_nd) where a strided one is not.

Not for a 4-D tensor's axes 2 / 3 (an image's H / W: fuse takes YOLOv5's Focus slices as strided
depthwise convs), a constant input, or several sliced axes."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, is_float, shape_const, slice_params

NAME = "strided_slice_view"
OPS = ("Slice",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Slice" or node.domain not in ("", "ai.onnx") or g.opset < 10 or len(node.input) < 5:
        return None
    if g.is_const(node.input[0]) or not all(g.is_const(t) for t in node.input[1:5] if t):
        return None
    return Match([node])


def one_axis_cut(g, node):
    """``(shape, axis, start, end, step)`` of a Slice of one axis of a float tensor of static shape
    (start and end clamped as ONNX does, base.slice_params), or the reason it is not one."""
    shape = g.shape(node.input[0])
    if shape is None or any(d is None or d <= 0 for d in shape) or not is_float(g, node.input[0]):
        return "not a float tensor with a static shape"
    cuts = slice_params(g, node, shape)
    if isinstance(cuts, str):
        return cuts
    if len(cuts) != 1:
        return "slices several axes"
    return (list(shape),) + tuple(cuts[0])


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    got = one_axis_cut(g, node)
    if isinstance(got, str):
        return got
    shape, a, s, e, k = got
    rank, n = len(shape), shape[a]
    if k <= 1:
        return "step 1 (fuse's slices take it)"
    if rank == 4 and a in (2, 3):
        return "an image's H / W axis (fuse's strided depthwise conv takes it)"
    if n % k or s >= k or e < n:
        return f"start {s}, step {k} and end {e} do not take every {k}-th row of all {n}"
    m.data.update(axis=a, step=k, start=s)
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    shape = list(g.shape(node.input[0]))
    a, k, s = m.data["axis"], m.data["step"], m.data["start"]
    r = int(np.prod(shape[a + 1:], dtype=np.int64))
    view = shape[:a] + [shape[a] // k, k * r]
    out = shape[:a] + [shape[a] // k] + shape[a + 1:]
    dt = g.dtype(node.input[0])
    v1, v2 = g.fresh(f"{node.output[0]}/rows"), g.fresh(f"{node.output[0]}/block")
    g.remove(node)
    g.make("Reshape", [node.input[0], shape_const(g, node, view)], [v1], near=node, origin=m.origin,
           name=f"{node.name}/view")
    g.set_shape(v1, view, dt)
    ints = [g.add_const(f"{node.name}/{what}", np.array([v], np.int64))
            for what, v in (("start", s * r), ("end", (s + 1) * r), ("axis", a + 1))]
    g.make("Slice", [v1] + ints, [v2], near=node, origin=m.origin, name=node.name)
    g.set_shape(v2, shape[:a] + [shape[a] // k, r], dt)
    g.make("Reshape", [v2, shape_const(g, node, out)], [node.output[0]], near=node, origin=m.origin,
           name=f"{node.name}/back")
    return f"rows {s}::{k} of axis {a} -> a step-1 slice of the [..., {shape[a] // k}, {k * r}] view"
