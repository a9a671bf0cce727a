"""Gather of one constant index on any axis (a sequence model's last step ``y[-1]`` / ``y[:, -1]``,
an RNN's first direction) -> Mrvl ``Reshape`` -> ``Slice2D`` -> ``Reshape``.

    Gather(x, i, axis)  ->  Reshape [1, A, n, C]  ->  Slice2D(axis 2, [i, i + 1))  ->  Reshape [out]

on the stored data as it is: with ``x`` stored in the order ``perm``, the gathered axis is stored
axis ``k``; A is the product of the stored dims before it, n its size, C the product after. The
output keeps the order of the remaining axes (the index may be a scalar, which drops the axis, or
a one-element 1-D tensor, which keeps it with size 1). Exact: only fp16 values move.

Rule: float32 data with a static shape of rank 2-5, a result of rank 2 or more, a constant integer
index (a scalar or one element) in range.
"""
from __future__ import annotations

import numpy as np
import onnx

from .. import opset
from .._graph import GraphIndex, attr
from ..target import Target
from .groups import Group, _float_static

RANKS = (2, 3, 4, 5)


def build(g: GraphIndex, n: onnx.NodeProto, target: Target):
    """The group of a constant-index Gather, or the reason it stays on the CPU."""
    x, idx = n.input[0], n.input[1]
    reason = _float_static(g, [x, n.output[0]])
    if reason:
        return reason
    if not g.is_const(idx):
        return "Gather indices are not constant"
    iv = np.asarray(g.const(idx))
    if iv.size != 1 or iv.ndim > 1 or iv.dtype.kind not in "iu":
        return f"Gather of {iv.size} indices of shape {list(iv.shape)} (one constant index is taken)"
    shape = g.shape(x)
    if len(shape) not in RANKS:
        return f"Gather on a {len(shape)}-D tensor (2-D to 5-D taken)"
    if len(shape) - (iv.ndim == 0) < 2:
        return "Gather to a 1-D tensor (2-D to 5-D results taken)"
    axis = int(attr(n, "axis", 0)) % len(shape)
    i = int(iv.reshape(-1)[0])
    if not -shape[axis] <= i < shape[axis]:
        return f"Gather index {i} is out of range for axis {axis} of size {shape[axis]}"
    return Group("Gather", "mrvl.gather", [n], [x], n.output[0],
                 {"axis": axis, "index": i % shape[axis], "keep": iv.ndim == 1})


def materialize(m, grp: Group) -> None:
    src, out = grp.inputs[0], grp.output
    name, perm = m.loc[src]
    if src in m.flat or src in m.rows:
        name, perm = m.get(src, None, for_mrvl=True, origin=grp.origin), None
    shape = m.logical_shape(src)
    order = list(perm) if perm is not None else list(range(len(shape)))
    stored = [shape[a] for a in order]
    axis, i = grp.attrs["axis"], grp.attrs["index"]
    k = order.index(axis)
    view = [1, int(np.prod(stored[:k])), stored[k], int(np.prod(stored[k + 1:]))]
    base = grp.anchor.name
    folded = [a for a in m.alias_of.get(src, []) if a not in m.alias_owner]
    v_in = m.fresh(f"{src}__take_view")
    m.add(opset.make_node("Reshape", [name], [v_in], name=m.fresh(f"mrvl_{base}_view"), origin=folded + grp.origin,
                          attrs={"shape": view}, composite="mrvl.reshape"), None)
    m.vinfo[v_in] = view
    m.mrvl_tensors.add(v_in)
    v_out = m.fresh(f"{out}__take")
    slice_name = m.fresh(f"mrvl_{base}")
    m.add(opset.make_node("Slice2D", [v_in], [v_out], name=slice_name, origin=folded + grp.origin,
                          attrs={"axis": 2, "start": i, "end": i + 1}, composite="mrvl.slice"), None)
    m.vinfo[v_out] = view[:2] + [1, view[3]]
    m.mrvl_tensors.add(v_out)
    for a in folded:
        m.alias_owner[a] = slice_name
    m.mrvl_name[base] = slice_name
    if grp.attrs["keep"]:
        out_order = order
    else:   # the axis goes: renumber the rest
        out_order = [a - (a > axis) for a in order if a != axis]
    out_perm = None if out_order == sorted(out_order) else tuple(out_order)
    back = m.define(out, out_perm, mrvl=True)
    m.mrvl_producer[back] = slice_name
    out_shape = m.logical_shape(out)
    m.add(opset.make_node("Reshape", [v_out], [back], name=m.fresh(f"mrvl_{base}_back"), origin=grp.origin,
                          attrs={"shape": [out_shape[a] for a in out_order]}, composite="mrvl.reshape"), out_perm)
    if out in m.g.output_set and back != out:
        m.get(out, None, for_mrvl=True, origin=grp.origin)
