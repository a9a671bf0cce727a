"""Split / Slice of a 2-D to 5-D tensor along non-channel axes (a fused qkv projection ``[1, T, 3D]``
split into q, k, v; PyTorch's ``chunk`` / dynamo's ``Slice``; ``torch.roll`` and window / patch
slicing of ``[B, H, W, C]`` tokens in Swin-style models), constant parameters: per output a Mrvl
``Slice2D`` of the 4-D view ``[1, A, X, R]`` of the stored data (A: the stored axes before the sliced
one, X: the sliced axis, R: the axes after it), between two Mrvl ``Reshape``s (the view and back);
no data moves but the slice itself. 4-D channel slices stay slices.py's (one Slice2D, or a one-hot
conv for spatial crops next to convs); a 4-D Slice that path refuses comes here, and so does a 4-D
Split of tokens (MaxViT's qkv ``[B, G, T, 3C]`` split on its last axis; a spatial op's output split
on H / W stays on the CPU, on the NHWC data).

    mrvl.slice   Split(x[..., X, ...], axis) -> (Reshape [1, A, X, R] -> Slice2D(axis 2) -> Reshape) x k

A Slice with step s > 1 (``x[:, a::s]``, Swin's patch merging ``x[:, 0::2, 1::2, :]``) on an axis that
s divides, starting at a < s and running to the end, is phase a of the view ``[1, A*X/s, s, R]``
(Slice2D of ``[a, a + 1)`` on axis 2); a Slice on several axes is one such cut per axis, each reading
the last one's view (Reshapes between them move no data). The leading axis is sliced too when the
model holds one image (``groups.model_images``: then it is no batch, e.g. timm's ``qkv.unbind(0)`` of
``[3, B*P, H, N, d]`` in MobileViT); with a batch of images it stays on the CPU. A 4-D tensor no
spatial op wrote leads with rows, not images, in a one-image model (``batch_limit(spatial=False)``):
rotate_half's Slices on the last axis of wav2vec2-Conformer's sequence-first heads ``[T, 1, H, d]``.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np
import onnx

from .. import opset
from ..graph_index import GraphIndex, attr, slice_bounds
from ..target import Target
from .groups import Group, batch_limit, float_static, model_images
from . import slices, take

RANKS = (2, 3, 4, 5)


def build(g: GraphIndex, n: onnx.NodeProto, target: Target):
    """The 4-D channel slices of slices.py, else a SliceND group, else the reason."""
    shape = g.shape(n.input[0])
    if shape is None or len(shape) not in RANKS:
        return slices.build(g, n, target)
    if len(shape) == 4:
        first = slices.build(g, n, target)
        if not isinstance(first, str) or (n.op_type == "Split" and _image(g, n.input[0])):
            return first                # a spatial op's output split on H / W stays (on its NHWC data)
        nd = _build_nd(g, n, shape, target)
        return nd if not isinstance(nd, str) else f"{first}; as an N-D slice: {nd}"
    return _build_nd(g, n, shape, target)


SPATIAL_OPS = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "Resize", "Upsample", "DepthToSpace",
               "SpaceToDepth", "BatchNormalization", "InstanceNormalization", "LRN")


def _image(g: GraphIndex, t: str) -> bool:
    """``t`` is written by a spatial op: an image, not a 4-D view of tokens."""
    p = g.producer.get(t)
    return p is not None and p.op_type in SPATIAL_OPS


def _feeds_convs(g: GraphIndex, n: onnx.NodeProto) -> bool:
    """Every output of ``n`` is read, and only by Convs (or by a Concat read only by Convs: an edge
    tile's window zero-padded by legalize's pad_concat): a model input's slice that is the input
    window of a conv (legalize's kernel tiles of DeepSpeech2's 41x11 conv), not a lone slice."""
    readers = [u for o in n.output if o for u in g.consumers.get(o, ())]

    def conv_input(u, depth: int = 2) -> bool:   # depth: the W then the H Concat of a padded window
        if u.op_type == "Conv":
            return True
        after = g.consumers.get(u.output[0], ()) if u.op_type == "Concat" and depth else ()
        return bool(after) and u.output[0] not in g.output_set and all(conv_input(v, depth - 1) for v in after)
    return bool(readers) and all(g.consumers.get(o) for o in n.output if o) and all(conv_input(u) for u in readers)


def _cut(s: int, e: int, st: int, dim: int):
    """(start, end, step) of one axis of a positive-step Slice (clamped as ONNX does), None when the
    whole axis, or the reason it cannot be a Slice2D of a view."""
    if st < 1:
        return f"slice with step {st} (the accelerator slices forward)"
    s, e = slice_bounds(s, e, dim)
    if st == 1:
        return None if (s, e) == (0, dim) else (s, e, 1)
    if dim % st or s >= st or len(range(s, e, st)) != dim // st:
        return (f"slice [{s}:{e}:{st}] of an axis of {dim} (a step is taken as one phase of a run to the "
                f"end, the axis a multiple of the step)")
    return s, e, st


def _build_nd(g: GraphIndex, n: onnx.NodeProto, shape, target: Target):
    rank = len(shape)
    reason = float_static(g, [n.input[0]] + [o for o in n.output if o]) or \
        (batch_limit(g, n.input[0], target, spatial=_image(g, n.input[0])) if rank == 4 else None)
    if reason:
        return reason
    if g.is_const(n.input[0]):
        return f"{n.op_type.lower()} of a constant"
    if n.input[0] in g.inputs and not _feeds_convs(g, n) or not any(g.consumers.get(o) for o in n.output if o):
        return (f"{rank}-D {n.op_type.lower()} of a model input or into model outputs only (a lone "
                f"slice is no accelerator work; N-D slices run between other ops)")
    if n.op_type == "Split":
        axis = attr(n, "axis", 0) % rank
        parts = slices.split_ranges(g, n, shape[axis])
        if isinstance(parts, str):
            return parts
        cuts = [(axis, 0, shape[axis], 1)]
    else:
        params = slices.slice_params(g, n)
        if isinstance(params, str):
            return params
        if params[0] is None or params[1] is None:
            return "slice without starts/ends"
        cuts = []
        for s, e, ax, st in zip(*params):
            c = _cut(s, e, st, shape[ax % rank])
            if isinstance(c, str):
                return c
            if c is not None:
                cuts.append((ax % rank,) + c)
        if not cuts:
            return "a slice of the whole tensor"
        axis, s, e, _ = cuts[0]
        parts = [(n.output[0], s, e)]
    if any(c[0] == 0 for c in cuts) and model_images(g) != 1:   # one image: axis 0 is no batch
        return "split or slice on the leading axis (rows or batch)"
    want = list(shape)
    for ax, s, e, st in cuts:
        want[ax] = len(range(s, e, st))
    for o, s, e in parts:
        if n.op_type == "Split":
            want[axis] = e - s
        if e <= s or g.shape(o) != want:
            return f"output '{o}' has shape {g.shape(o)}, not {want} (an empty or inconsistent slice)"
    used = [p for p in parts if p[0] in g.output_set or g.consumers.get(p[0])] or parts[:1]
    attrs = {"slices": used, "axis": axis}
    if len(cuts) > 1 or cuts[0][3] != 1:
        attrs["cuts"] = cuts
    return Group("SliceND", "mrvl.slice", [n], [n.input[0]], used[0][0], attrs)


def materialize(m, grp: Group) -> None:
    """Reshape to the 4-D view of the stored data, one Slice2D per used output, Reshape back; the
    outputs keep the input's storage order (take.py's range materialisation); stepped or multi-axis
    slices: one view + Slice2D per cut."""
    if "cuts" in grp.attrs:
        _materialize_cuts(m, grp)
    else:
        take.materialize(m, grp)


def _materialize_cuts(m, grp: Group) -> None:
    src = grp.inputs[0]
    name, order, stored = take.stored_source(m, grp)
    base, out = grp.anchor.name, grp.attrs["slices"][0][0]
    folded = [a for a in m.alias_of.get(src, []) if a not in m.alias_owner]
    cur, slice_name = name, None
    for j, (axis, s, e, st) in enumerate(grp.attrs["cuts"]):
        k = order.index(axis)
        before, dim, after = int(np.prod(stored[:k])), stored[k], int(np.prod(stored[k + 1:]))
        view, (lo, hi) = ([1, before, dim, after], (s, e)) if st == 1 else ([1, before * (dim // st), st, after],
                                                                             (s, s + 1))
        v_in, v_out = m.fresh(f"{src}__view"), m.fresh(f"{out}__view")
        m.add(opset.make_node("Reshape", [cur], [v_in], name=m.fresh(f"mrvl_{base}_view"),
                              origin=(folded if j == 0 else []) + grp.origin, attrs={"shape": view},
                              composite="mrvl.reshape"), None)
        slice_name = m.fresh(f"mrvl_{base}")
        m.add(opset.make_node("Slice2D", [v_in], [v_out], name=slice_name, origin=grp.origin,
                              attrs={"axis": 2, "start": int(lo), "end": int(hi)}, composite=grp.composite), None)
        for t, v in ((v_in, view), (v_out, view[:2] + [hi - lo, view[3]])):
            m.vinfo[t] = v
            m.mrvl_tensors.add(t)
        if j == 0:
            for a in folded:
                m.alias_owner[a] = slice_name
            m.mrvl_name[base] = slice_name
        stored[k] = len(range(s, e, st))
        cur = v_out
    out_perm: Tuple[int, ...] = None if order == sorted(order) else tuple(order)
    back = m.define(out, out_perm, mrvl=True)
    m.mrvl_producer[back] = slice_name
    m.add(opset.make_node("Reshape", [cur], [back], name=m.fresh(f"mrvl_{base}_back"), origin=grp.origin,
                          attrs={"shape": stored}, composite="mrvl.reshape"), out_perm)
    if out in m.g.output_set and back != out:
        m.get(out, None, for_mrvl=True, origin=grp.origin)
