"""GatherElements with a constant index table -> Mrvl ``GatherElements`` (``mrvl.gather_elements``):
``y[..., i, ...] = x[..., idx[..., i, ...], ...]`` along one axis.

DeBERTa-v2/v3's and SEW-D's disentangled attention gather their content-to-position and
position-to-content scores along the last axis with an index built from the relative positions
only (clamped, log-bucketed): after constant folding the index is a constant [B * H, Q, K].
Before, the gathers stayed on the CPU and cut each attention block (DeBERTa 3 regions, 94% offload).

Lowering (assumed hardware-plausible): an indexed copy -- each output element reads one input
element at a compile-time offset (the DMA engine's gather, or the vector unit's indexed load), no
arithmetic, exact in fp16. The index is stored once as int32 (broadcast along leading axes on
which it does not change: DeBERTa's is the same for every batch-head). Runs on the tensor as it is
stored: the index is permuted with it (``axis`` the stored axis). Rules: float32 data with a static
shape, rank 2-5, a constant integer index of the data's rank, all values in range, at most
``MAX_INDEX`` index entries after the broadcast.
"""
from __future__ import annotations

import numpy as np
import onnx

from ..gather_index import compact_index
from ..graph_index import GraphIndex, attr
from ..target import Target
from .groups import Group, float_static

RANKS = (2, 3, 4, 5)
MAX_INDEX = 1 << 24


def build(g: GraphIndex, n: onnx.NodeProto, target: Target):
    x, i = n.input[0], n.input[1]
    reason = float_static(g, [x, n.output[0]])
    if reason:
        return reason
    if g.is_const(x):
        return "gather from a constant (constant folding leaves it to the CPU)"
    if not g.is_const(i):
        return "GatherElements with an index computed at run time (the accelerator takes a constant index table)"
    shape = g.shape(x)
    idx = np.asarray(g.const(i))
    if len(shape) not in RANKS:
        return f"GatherElements on a {len(shape)}-D tensor (the accelerator takes 2-D to 5-D)"
    if idx.dtype.kind not in "iu" or idx.ndim != len(shape):
        return "the index is not an integer tensor of the data's rank"
    a = attr(n, "axis", 0) % len(shape)
    if any(idx.shape[k] > shape[k] for k in range(len(shape)) if k != a):
        return f"index shape {list(idx.shape)} exceeds the data {shape} off the gather axis"
    if idx.size and (idx.min() < -shape[a] or idx.max() >= shape[a]):
        return f"index values outside [-{shape[a]}, {shape[a]})"
    full = np.where(idx < 0, idx + shape[a], idx).astype(np.int32)
    if compact_index(full).size > MAX_INDEX:
        return f"an index table of {compact_index(full).size} entries exceeds {MAX_INDEX}"
    return Group("GatherElements", "mrvl.gather_elements", [n], [x], n.output[0], {"axis": a}, {"indices": full})


def materialize(m, grp: Group) -> None:
    """On the input's storage: the index transposed with it, the axis its stored position."""
    src = grp.inputs[0]
    name, perm = m.loc[src]
    if src in m.flat or src in m.rows:
        name, perm = m.get(src, None, for_mrvl=True, origin=grp.origin), None
    idx, a = grp.weights["indices"], grp.attrs["axis"]
    if perm:
        idx, a = np.ascontiguousarray(np.transpose(idx, perm)), list(perm).index(a)
    m._emit(grp, "GatherElements", [name, m.init(f"{grp.anchor.name}_indices", idx, dtype=np.int32)],
            {"axis": a}, perm)
