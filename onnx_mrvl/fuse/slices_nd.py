"""Split / Slice of a 2-D, 3-D or 5-D tensor along one non-leading axis (a fused qkv projection
``[1, T, 3D]`` split into q, k, v; PyTorch's ``chunk`` / dynamo's ``Slice``), step 1, constant
parameters: per output a Mrvl ``Slice2D`` of the 4-D view ``[1, A, X, R]`` of the stored data
(A: the stored axes before the sliced one, X: the sliced axis, R: the axes after it), between two
Mrvl ``Reshape``s (the view and back); no data moves but the slice itself.

    mrvl.slice   Split(x[..., X, ...], axis) -> (Reshape [1, A, X, R] -> Slice2D(axis 2) -> Reshape) x k
"""
from __future__ import annotations

import numpy as np
import onnx

from .. import opset
from .._graph import GraphIndex, attr
from ..target import Target
from .groups import Group, float_static
from . import slices

RANKS = (2, 3, 5)


def build(g: GraphIndex, n: onnx.NodeProto, target: Target):
    """The 4-D channel slices of slices.py, or for ranks 2, 3 and 5 a SliceND group."""
    shape = g.shape(n.input[0])
    if shape is None or len(shape) not in RANKS:
        return slices.build(g, n, target)
    reason = float_static(g, [n.input[0]] + [o for o in n.output if o])
    if reason:
        return reason
    if g.is_const(n.input[0]):
        return f"{n.op_type.lower()} of a constant"
    rank = len(shape)
    if n.input[0] in g.inputs or not any(g.consumers.get(o) for o in n.output if o):
        return (f"{rank}-D {n.op_type.lower()} of a model input or into model outputs only (a lone "
                f"slice is no accelerator work; N-D slices run between other ops)")
    if n.op_type == "Split":
        axis = attr(n, "axis", 0) % rank
        parts = slices.split_ranges(g, n, shape[axis])
        if isinstance(parts, str):
            return parts
    else:
        params = slices.slice_params(g, n)
        if isinstance(params, str):
            return params
        if params[0] is None or params[1] is None:
            return "slice without starts/ends"
        cut = {}
        for s, e, ax, st in zip(*params):
            ax %= rank
            if st != 1:
                return f"slice with step {st} (the accelerator slices with step 1)"
            s, e = (min(max(v + shape[ax] if v < 0 else v, 0), shape[ax]) for v in (s, e))
            if (s, e) != (0, shape[ax]):
                cut[ax] = (s, e)
        if len(cut) != 1:
            return f"slice on {len(cut)} axes (the accelerator slices one axis)"
        axis, (s, e) = next(iter(cut.items()))
        parts = [(n.output[0], s, e)]
    if axis == 0:
        return "split or slice on the leading axis (rows or batch)"
    for o, s, e in parts:
        want = list(shape)
        want[axis] = e - s
        if e <= s or g.shape(o) != want:
            return f"output '{o}' has shape {g.shape(o)}, not {want} (an empty or inconsistent slice)"
    used = [p for p in parts if p[0] in g.output_set or g.consumers.get(p[0])] or parts[:1]
    return Group("SliceND", "mrvl.slice", [n], [n.input[0]], used[0][0], {"slices": used, "axis": axis})


def materialize(m, grp: Group) -> None:
    """Reshape to the 4-D view of the stored data, one Slice2D per used output, Reshape back; the
    outputs keep the input's storage order."""
    src, axis = grp.inputs[0], grp.attrs["axis"]
    name, perm = m.loc[src]
    if src in m.flat or src in m.rows:
        name, perm = m.get(src, None, for_mrvl=True, origin=grp.origin), None
    shape = m.logical_shape(src)
    stored = list(shape) if perm is None else [shape[i] for i in perm]
    p = list(perm).index(axis) if perm else axis
    view = [1, int(np.prod(stored[:p], dtype=np.int64)), stored[p], int(np.prod(stored[p + 1:], dtype=np.int64))]
    base = grp.anchor.name
    folded = [a for a in m.alias_of.get(src, []) if a not in m.alias_owner]
    v = m.fresh(f"{src}__view4")
    m.add(opset.make_node("Reshape", [name], [v], name=m.fresh(f"mrvl_{base}_view"), origin=folded + grp.origin,
                          attrs={"shape": view}, composite="mrvl.reshape"), None)
    m.vinfo[v] = view
    m.mrvl_tensors.add(v)
    for k, (o, start, end) in enumerate(grp.attrs["slices"]):
        part = m.fresh(f"{o}__view4")
        sname = m.fresh(f"mrvl_{base}")
        if k == 0:
            m.mrvl_name[base] = sname
            for a in folded:
                m.alias_owner[a] = sname
        m.add(opset.make_node("Slice2D", [v], [part], name=sname, origin=grp.origin,
                              attrs={"axis": 2, "start": int(start), "end": int(end)}, composite=grp.composite), None)
        m.vinfo[part] = view[:2] + [end - start, view[3]]
        m.mrvl_tensors.add(part)
        out = m.define(o, perm, mrvl=True)
        m.mrvl_producer[out] = sname
        out_stored = list(stored)
        out_stored[p] = end - start
        m.add(opset.make_node("Reshape", [part], [out], name=m.fresh(f"mrvl_{base}_back"), origin=grp.origin,
                              attrs={"shape": out_stored}, composite="mrvl.reshape"), perm)
        if o in m.g.output_set and out != o:
            m.get(o, None, for_mrvl=True, origin=grp.origin)
