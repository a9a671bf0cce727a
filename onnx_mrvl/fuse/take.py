"""Ranges of one axis of 2-D/3-D tensors, and concats along their first axis, on the accelerator
(sequence models: a step ``y[-1]`` / ``y[:, -1]``, the gate chunks of an unrolled LSTM, the stack of
its per-step outputs), built from Mrvl ``Reshape``, ``Slice2D`` and ``Concat``:

    Gather(x, i, axis)
        -> Reshape [1, A, n, C] -> Slice2D(axis 2, [s, e)) per output -> Reshape [out]
    Concat(x_0, x_1, ..., axis 0)  (2-D / 3-D)
        -> Reshape [1, size_k] each -> Concat(axis 1) -> Reshape [out]

A range runs on the stored data as it is: with ``x`` stored in the order ``perm``, the sliced axis is
stored axis ``k``; A is the product of the stored dims before it, n its size, C the product after;
each output keeps the order of the remaining axes (a scalar Gather index drops the axis). A concat
along the first axis is a concat of the flattened operands (the first axis is outermost). Exact:
only fp16 values move.

Rules: float32 tensors with static shapes. Gather: data of rank 2-5, a result of rank 2 or more, a
constant integer index (a scalar or one element) in range. (Split / Slice ranges of 2-D / 3-D / 5-D
tensors are slices_nd.py's.) Concat: what patterns.build_concat refuses as a batch-axis concat, on 2-D / 3-D tensors, no
constant operand.
"""
from __future__ import annotations

import numpy as np
import onnx

from .. import opset
from ..graph_index import GraphIndex, attr
from ..target import Target
from .groups import Group, float_static
from .patterns import build_concat

RANKS = (2, 3, 4, 5)


def build(g: GraphIndex, n: onnx.NodeProto, target: Target):
    """The group of a constant-index Gather, or the reason it stays on the CPU."""
    x, idx = n.input[0], n.input[1]
    reason = float_static(g, [x, n.output[0]])
    if reason:
        return reason
    if g.is_const(x) and not g.is_const(idx):
        return ("Gather of a constant table by run-time indices (an embedding lookup: no accelerator op "
                "reads rows chosen by data; it runs on the CPU before the region)")
    if g.is_const(x):
        return "Gather of a constant (constant folding leaves this to the CPU)"
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
    i %= shape[axis]
    return Group("Take", "mrvl.slice", [n], [x], n.output[0],
                 {"axis": axis, "slices": [(n.output[0], i, i + 1)], "keep": iv.ndim == 1})


RANGE_RANKS = (2, 3)


def build_concat_rows(g: GraphIndex, n: onnx.NodeProto, target: Target):
    """Concat: patterns.build_concat's group, else a concat along the first axis of 2-D / 3-D
    tensors (a time-major stack of per-step outputs), else its reason."""
    first = build_concat(g, n, target)
    if not isinstance(first, str):
        return first
    out = n.output[0]
    shape = g.shape(out)
    if (shape is None or len(shape) not in RANGE_RANKS or int(attr(n, "axis", 0)) % len(shape) != 0
            or any(g.is_const(t) for t in n.input) or float_static(g, list(n.input))):
        return first
    return Group("ConcatRows", "mrvl.concat", [n], list(n.input), out, {"axis": 0})


def stored_source(m, grp: Group):
    """(name, order, stored dims) of the group's input as the region holds it: its storage order
    (logical axis per stored axis) and the dims in that order (a flat or row-stored input read as
    a plain array)."""
    src = grp.inputs[0]
    name, perm = m.loc[src]
    if src in m.flat or src in m.rows:
        name, perm = m.get(src, None, for_mrvl=True, origin=grp.origin), None
    shape = m.logical_shape(src)
    order = list(perm) if perm is not None else list(range(len(shape)))
    return name, order, [shape[a] for a in order]


def materialize(m, grp: Group) -> None:
    """Reshape to the 4-D view once, then per output a Slice2D and a Reshape to its stored shape
    (also slices_nd.py's N-D Split / Slice: the axis kept, the outputs in the input's storage)."""
    src = grp.inputs[0]
    name, order, stored = stored_source(m, grp)
    axis = grp.attrs["axis"]
    k = order.index(axis)
    view = [1, int(np.prod(stored[:k])), stored[k], int(np.prod(stored[k + 1:]))]
    base = grp.anchor.name
    folded = [a for a in m.alias_of.get(src, []) if a not in m.alias_owner]
    v_in = m.fresh(f"{src}__view")
    m.add(opset.make_node("Reshape", [name], [v_in], name=m.fresh(f"mrvl_{base}_view"), origin=folded + grp.origin,
                          attrs={"shape": view}, composite="mrvl.reshape"), None)
    m.vinfo[v_in] = view
    m.mrvl_tensors.add(v_in)
    # the axis stays (Split / Slice / one-element Gather index) or goes (scalar Gather index)
    out_order = order if grp.attrs.get("keep", True) else [a - (a > axis) for a in order if a != axis]
    out_perm = None if out_order == sorted(out_order) else tuple(out_order)
    for j, (out, start, end) in enumerate(grp.attrs["slices"]):
        v_out = m.fresh(f"{out}__view")
        slice_name = m.fresh(f"mrvl_{base}")
        m.add(opset.make_node("Slice2D", [v_in], [v_out], name=slice_name,
                              origin=(folded if j == 0 else []) + grp.origin,
                              attrs={"axis": 2, "start": int(start), "end": int(end)}, composite=grp.composite), None)
        m.vinfo[v_out] = view[:2] + [end - start, view[3]]
        m.mrvl_tensors.add(v_out)
        if j == 0:
            for a in folded:
                m.alias_owner[a] = slice_name
            m.mrvl_name[base] = slice_name
        back = m.define(out, out_perm, mrvl=True)
        m.mrvl_producer[back] = slice_name
        out_shape = m.logical_shape(out)
        m.add(opset.make_node("Reshape", [v_out], [back], name=m.fresh(f"mrvl_{base}_back"), origin=grp.origin,
                              attrs={"shape": [out_shape[a] for a in out_order]}, composite="mrvl.reshape"),
              out_perm)
        if out in m.g.output_set and back != out:
            m.get(out, None, for_mrvl=True, origin=grp.origin)


def materialize_concat_rows(m, grp: Group) -> None:
    """Each operand (logical order) as [1, size] -> Concat(axis 1) -> Reshape to the output."""
    base = grp.anchor.name
    flat = []
    for t in grp.inputs:
        x = m.get(t, None, for_mrvl=True, origin=grp.origin)
        size = int(np.prod(m.logical_shape(t)))
        v = m.fresh(f"{t}__flat")
        m.add(opset.make_node("Reshape", [x], [v], name=m.fresh(f"mrvl_{base}_flat"), origin=grp.origin,
                              attrs={"shape": [1, size]}, composite="mrvl.reshape"), None)
        m.vinfo[v] = [1, size]
        m.mrvl_tensors.add(v)
        flat.append(v)
    total = int(np.prod(m.logical_shape(grp.output)))
    cat = m.fresh(f"{grp.output}__flat")
    cat_name = m.fresh(f"mrvl_{base}")
    folded = [a for t in grp.inputs for a in m.alias_of.get(t, []) if a not in m.alias_owner]
    for a in folded:
        m.alias_owner[a] = cat_name
    m.add(opset.make_node("Concat", flat, [cat], name=cat_name, origin=folded + grp.origin,
                          attrs={"axis": 1, "num_inputs": len(flat)}, composite="mrvl.concat"), None)
    m.vinfo[cat] = [1, total]
    m.mrvl_tensors.add(cat)
    m.mrvl_name[base] = cat_name
    back = m.define(grp.output, None, mrvl=True)
    m.mrvl_producer[back] = cat_name
    m.add(opset.make_node("Reshape", [cat], [back], name=m.fresh(f"mrvl_{base}_back"), origin=grp.origin,
                          attrs={"shape": list(m.logical_shape(grp.output))}, composite="mrvl.reshape"), None)
