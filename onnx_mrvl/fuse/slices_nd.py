"""Split / Slice of a 2-D, 3-D or 5-D tensor along one non-leading axis (a fused qkv projection
``[1, T, 3D]`` split into q, k, v; PyTorch's ``chunk`` / dynamo's ``Slice``), step 1, constant
parameters: per output a Mrvl ``Slice2D`` of the 4-D view ``[1, A, X, R]`` of the stored data
(A: the stored axes before the sliced one, X: the sliced axis, R: the axes after it), between two
Mrvl ``Reshape``s (the view and back); no data moves but the slice itself.

    mrvl.slice   Split(x[..., X, ...], axis) -> (Reshape [1, A, X, R] -> Slice2D(axis 2) -> Reshape) x k
"""
from __future__ import annotations

import onnx

from ..graph_index import GraphIndex, attr
from ..target import Target
from .groups import Group, float_static
from . import slices, take

RANKS = (2, 3, 5)


def build(g: GraphIndex, n: onnx.NodeProto, target: Target):
    """The 4-D channel slices of slices.py, or for ranks 2, 3 and 5 a SliceND group; a 4-D slice
    slices.py refuses (another axis than the channels: Swin's ``torch.roll`` of its [B, H, W, C]
    windows as Slice + Concat) is a SliceND group too when it can be one and touches no spatial op
    (an image's slice on H / W stays slices.py's: on the CPU, on the NHWC data)."""
    shape = g.shape(n.input[0])
    if shape is None or len(shape) not in RANKS:
        found = slices.build(g, n, target)
        if shape is None or len(shape) != 4 or not isinstance(found, str) or _near_spatial(g, n):
            return found
        nd = _build_nd(g, n, shape)
        return nd if isinstance(nd, Group) else found
    return _build_nd(g, n, shape)


SPATIAL_OPS = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Resize",
               "BatchNormalization", "InstanceNormalization", "LRN", "DepthToSpace", "SpaceToDepth")


MOVES = ("Concat", "Slice", "Split", "Pad", "Identity", "Reshape", "Transpose")


def _near_spatial(g: GraphIndex, n: onnx.NodeProto, depth: int = 6) -> bool:
    """``n`` reads the output of a spatial op or feeds one, directly or through data-movement ops
    (``MOVES``: legalize's space-to-depth of a strided conv, a Focus block): its 4-D tensors are images."""
    p = g.producer.get(n.input[0])
    if p is not None and p.op_type in SPATIAL_OPS:
        return True
    todo, seen = [(n, 0)], set()
    while todo:
        x, k = todo.pop()
        for c in (c for o in x.output if o for c in g.consumers.get(o, [])):
            if c.op_type in SPATIAL_OPS:
                return True
            if c.op_type in MOVES and k + 1 < depth and c.name not in seen:
                seen.add(c.name)
                todo.append((c, k + 1))
    return False


def _build_nd(g: GraphIndex, n: onnx.NodeProto, shape):
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
    outputs keep the input's storage order (take.py's range materialisation)."""
    take.materialize(m, grp)
