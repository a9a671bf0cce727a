"""``ScatterND(data, indices, updates)`` whose constant indices write one block ``[a, b)`` of one axis
(every position of the other indexed axes, in order) -> ``Concat(Slice(data, :a), updates,
Slice(data, b:))`` along that axis.

PyTorch's in-place slice assignment ``y[..., a:b] = u`` / ``+=`` exports as a ScatterND of constant
indices: TorchScript writes every element's index tuple (Conditional-DETR's
``tmp[..., :2] += reference``, the decode heads of YOLOv5 <= 6.0 / YOLOv7 ``y[..., 0:2] = ...``);
dynamo's ``slice_scatter`` moves the axis first and scatters rows. No accelerator op takes a
ScatterND: left on the CPU with everything after it (a cut in the decode head). Exact (the same
values, moved). Rules: reduction none, static shapes, the indices a box ``[a, b)`` on one axis and
full on the other indexed axes, in row-major order."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, is_float

NAME = "scatter_to_concat"
OPS = ("ScatterND",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "ScatterND" or node.domain not in ("", "ai.onnx") or len(node.input) != 3:
        return None
    if not g.is_const(node.input[1]) or g.is_const(node.input[0]):
        return None
    return Match([node])


def _block(idx: np.ndarray, shape):
    """(axis, a, b) when ``idx`` lists the positions of one block [a, b) of ``axis`` in row-major order."""
    q = idx.shape[-1]
    if q > len(shape) or idx.size == 0:
        return None
    for ax in range(q):
        a, b = int(idx[..., ax].min()), int(idx[..., ax].max()) + 1
        ranges = [np.arange(a, b) if k == ax else np.arange(shape[k]) for k in range(q)]
        want = np.stack(np.meshgrid(*ranges, indexing="ij"), -1)
        if want.shape == idx.shape and np.array_equal(want, idx) and 0 <= a and b <= shape[ax]:
            return ax, a, b
    return None


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    data, ind, upd = node.input
    red = attr(node, "reduction")
    if red not in (None, b"none", "none"):
        return f"reduction {red!r}"
    sd, su = g.shape(data), g.shape(upd)
    if sd is None or su is None or any(d is None for d in list(sd) + list(su)):
        return "a shape is unknown"
    if not is_float(g, data):
        return "not a float tensor"
    idx = np.asarray(g.const(ind)).astype(np.int64)
    idx = np.where(idx < 0, idx + np.asarray(sd[:idx.shape[-1]]), idx)
    blk = _block(idx, sd)
    if blk is None:
        return "the indices are no block [a, b) of one axis in order"
    ax, a, b = blk
    box = [b - a if k == ax else d for k, d in enumerate(sd)]
    if list(su) != box:
        return f"updates {list(su)} are not the block {box}"
    m.data.update(axis=ax, a=a, b=b)
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    data, _, upd = node.input
    ax, a, b = m.data["axis"], m.data["a"], m.data["b"]
    sd, dt = list(g.shape(data)), g.dtype(data)
    parts = []
    for lo, hi in ((0, a), (b, sd[ax])):
        if hi <= lo:
            parts.append(None)
            continue
        out = g.fresh(f"{data}/{lo}_{hi}")
        g.make("Slice", [data, g.add_const(f"{node.name}/starts", np.array([lo], np.int64)),
                         g.add_const(f"{node.name}/ends", np.array([hi], np.int64)),
                         g.add_const(f"{node.name}/axes", np.array([ax], np.int64))], [out],
               near=node, origin=m.origin, name=f"{node.name}/keep_{lo}_{hi}")
        g.set_shape(out, [hi - lo if k == ax else d for k, d in enumerate(sd)], dt)
        parts.append(out)
    ins = [p for p in (parts[0], upd, parts[1]) if p is not None]
    g.remove(node)
    if len(ins) == 1:
        g.make("Identity", ins, [node.output[0]], near=node, origin=m.origin, name=node.name)
    else:
        g.make("Concat", ins, [node.output[0]], near=node, origin=m.origin, name=node.name, axis=ax)
    return f"ScatterND of [{a}, {b}) on axis {ax} -> Concat of the kept slices and the updates"
