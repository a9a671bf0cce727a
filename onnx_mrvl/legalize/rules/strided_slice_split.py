"""A Slice with step k > 1 over one axis that is not every k-th row of the whole axis (an axis no
multiple of k, a start >= k, an early end) -> slices the accelerator takes, then a Concat:

    x[s:e:k] (c rows)  ->  Concat(x[s : s + f k][::k], x[s + (c-1) k : s + (c-1) k + 1])   on that axis

with f = c when the c-th row's block of k fits in the axis (then no Concat), else c - 1 (the last
row taken alone). ``x[s : s + f k]`` is a step-1 slice, its ``[::k]`` every k-th row of an axis
that k divides (strided_slice_view / fuse's slices_nd phase), the last row a step-1 slice. LeViT's
subsampling ``x.view(B, 7, 7, C)[:, ::2, ::2]`` (7 is odd) and other strided subsamples of token
grids of odd size; exact (only data moves).

Not for an image's H / W (axes 2 / 3 of a 4-D tensor) read by a Conv, Concat or Slice (fuse's
strided depthwise conv takes those), the batch axis of a 4-D / 5-D tensor, constant inputs, several
sliced axes, negative steps."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match
from .strided_slice_view import match, one_axis_cut  # noqa: F401  (the same Slices)

NAME = "strided_slice_split"
OPS = ("Slice",)
IMAGE_READERS = ("Conv", "Concat", "Slice")


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    got = one_axis_cut(g, node)
    if isinstance(got, str):
        return got
    shape, a, s, e, k = got
    rank, n = len(shape), shape[a]
    if k <= 1:
        return "step 1 or negative (fuse's slices take step 1)"
    if n % k == 0 and s < k and e == n:
        return "every k-th row of the whole axis (strided_slice_view)"
    if rank >= 4 and a == 0:
        return "the batch axis of an image (a Concat there stays on the CPU)"
    if rank == 4 and a in (2, 3) and any(u.op_type in IMAGE_READERS for u in g.users(node.output[0])):
        return "an image's H / W axis read by a Conv / Concat / Slice (fuse's strided depthwise conv takes it)"
    c = -(-(e - s) // k) if e > s else 0
    if c < 1:
        return "an empty slice"
    m.data.update(axis=a, step=k, start=s, rows=c, full=c if s + c * k <= n else c - 1)
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    shape = list(g.shape(node.input[0]))
    a, k, s, c, f = (m.data[key] for key in ("axis", "step", "start", "rows", "full"))
    dt, x, y = g.dtype(node.input[0]), node.input[0], node.output[0]
    g.remove(node)

    def cut(src, lo, hi, step, tag, out=None):
        out = out or g.fresh(f"{y}/{tag}")
        ints = [g.add_const(f"{node.name}/{tag}_{what}", np.array([v], np.int64))
                for what, v in (("start", lo), ("end", hi), ("axis", a), ("step", step))]
        g.make("Slice", [src] + ints, [out], near=node, origin=m.origin, name=f"{node.name}/{tag}")
        g.set_shape(out, shape[:a] + [len(range(lo, hi, step))] + shape[a + 1:], dt)
        return out

    parts = []
    if f:
        run = cut(x, s, s + f * k, 1, "run") if (s, s + f * k) != (0, shape[a]) else x
        parts.append(cut(run, 0, f * k, k, "every", out=y if f == c else None))
    if f < c:
        last = s + (c - 1) * k
        parts.append(cut(x, last, last + 1, 1, "last", out=y if not f else None))
    if len(parts) == 2:
        g.make("Concat", parts, [y], near=node, origin=m.origin, name=node.name, axis=a)
    return (f"rows {s}::{k} ({c}) of axis {a} of {shape[a]} -> "
            f"{'a step-1 run, every ' + str(k) + '-th row of it' if f else ''}"
            f"{' + ' if f and f < c else ''}{'the last row alone, Concat' if f < c else ''}")
