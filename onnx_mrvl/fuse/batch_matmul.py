"""MatMul of two activations (attention's Q*K^T and softmax(..)*V) -> ``mrvl::BatchMatMul``.

    mrvl.batch_matmul   MatMul(a[..., M, K], b[..., K, N]) -> [Mul|Div by a scalar constant]
                        (both operands computed at run time, 3-D or 4-D, leading axes equal or 1)

The scale after it (``/ sqrt(d)``, ``* scale``) becomes the op's ``alpha`` (applied to the fp32
accumulator, before the fp16 rounding). When ``b`` is stored with its last two axes swapped (a
relabelled ``Transpose(K)``: K^T read as K's rows, the FC kernel's OI order) the op reads it as it
is with ``transpose_b=1``; any other storage is converted in the region (block rotations).
A MatMul with a constant second operand is an FC (``patterns.build_fc``).
"""
from __future__ import annotations

import numpy as np
import onnx

from ..graph_index import GraphIndex, attr
from ..opset_int8 import ALL_INT8_ATTRS
from ..target import Target
from .groups import Group, batch_limit, float_static
from .patterns import MAX_FC_ROWS, build_fc
from .perms import rotations

COMPOSITE = "mrvl.batch_matmul"
RANKS = (3, 4)   # batched (attention); a 2-D MatMul of two activations stays an FC question


def build(g: GraphIndex, n: onnx.NodeProto, target: Target):
    """MatMul: an FC when its second operand is a constant, else a BatchMatMul (or the reason not)."""
    shape = g.shape(n.input[0])
    if g.is_const(n.input[1]) or (shape is not None and len(shape) < 3):
        return build_fc(g, n, target)
    return build_batch_matmul(g, n, target)


def build_batch_matmul(g: GraphIndex, n: onnx.NodeProto, target: Target):
    a, b = n.input[0], n.input[1]
    reason = float_static(g, [a, b, n.output[0]])
    if reason:
        return reason
    if g.is_const(a):
        return "constant first operand of a MatMul (the accelerator takes a constant as the FC's weights, second)"
    sa, sb = g.shape(a), g.shape(b)
    if len(sa) != len(sb) or len(sa) not in RANKS:
        return (f"MatMul of operands of shapes {sa} and {sb} (the accelerator multiplies operands of "
                f"one rank, 3-D or 4-D)")
    for da, db in zip(sa[:-2], sb[:-2]):
        if da != db and 1 not in (da, db):
            return f"MatMul operands {sa} and {sb} do not broadcast over their leading axes"
    m, k, n_out = sa[-2], sa[-1], sb[-1]
    if sb[-2] != k:
        return f"MatMul operands {sa} and {sb} disagree on the inner dimension"
    if max(k, n_out) > target.max_fc_features:
        return f"{max(k, n_out)} features exceed the limit {target.max_fc_features}"
    reason = batch_limit(g, n.output[0], target, spatial=False)      # 4-D: [B, H, T, T] with B images
    if reason:
        return reason
    batch = int(np.prod([max(x, y) for x, y in zip(sa[:-2], sb[:-2])] or [1]))
    if batch * m > MAX_FC_ROWS:
        return f"{batch * m} rows of a MatMul over {sa} exceed the limit {MAX_FC_ROWS}"
    grp = Group("BatchMatMul", COMPOSITE, [n], [a, b], n.output[0], {"alpha": 1.0})
    _absorb_scale(g, grp, target)
    return grp


def _absorb_scale(g: GraphIndex, grp: Group, target: Target) -> None:
    """``y * c`` / ``y / c`` / ``c * y`` with a scalar constant c after the MatMul -> alpha."""
    nxt = g.single_consumer(grp.output)
    if nxt is None or nxt.op_type not in ("Mul", "Div") or len(nxt.input) != 2:
        return
    other = nxt.input[1] if nxt.input[0] == grp.output else nxt.input[0]
    if other == grp.output or not g.is_const(other) or (nxt.op_type == "Div" and nxt.input[1] != other):
        return
    c = np.asarray(g.const(other), dtype=np.float64)
    if c.size != 1 or g.shape(nxt.output[0]) != g.shape(grp.output) or not g.is_float(nxt.output[0]):
        return
    v = float(c.reshape(-1)[0])
    alpha = v if nxt.op_type == "Mul" else (1.0 / v if v != 0 else np.inf)
    if not np.isfinite(alpha) or alpha == 0 or abs(alpha) > target.fp16_max:
        return
    grp.attrs["alpha"] = float(alpha)
    grp.nodes.append(nxt)
    grp.output = nxt.output[0]


def _swap_last(rank: int):
    return tuple(range(rank - 2)) + (rank - 1, rank - 2)


def _strided(m, t: str, inner) -> bool:
    """``t`` is stored permuted with one of the logical axes ``inner`` innermost: the operand
    stream reads it as it is (DMA with strides over the outer axes, rows contiguous)."""
    have = m.loc[t][1]
    return t not in m.flat and t not in m.rows and have is not None and have[-1] in inner


def _out_perm(m, grp: Group, rank: int):
    """The storage to write the output in: the permutation of the one relabelling Transpose that
    reads it when N stays innermost (P*V -> Transpose(0,2,1,3) -> Reshape [B,T,D]: the heads are
    written back in token order, the Reshape merges in place), else the logical order."""
    users = m.g.consumers.get(grp.output, [])
    if grp.output in m.g.output_set or len(users) != 1:
        return None
    lead = 0
    if users[0].op_type == "Reshape" and m.g.shape(users[0].output[0]) == [1] + m.g.shape(grp.output):
        # HF Whisper's bmm: [B*H, T, d] -> view [B, H, T, d] (B = 1) -> Transpose(0,2,1,3)
        out = users[0].output[0]
        users = m.g.consumers.get(out, [])
        if out in m.g.output_set or len(users) != 1:
            return None
        lead = 1
    if users[0].name not in m.aliases:
        return None
    p = tuple(int(x) for x in attr(users[0], "perm", list(range(rank + lead))[::-1]))
    if lead:
        if p[0] != 0:
            return None
        p = tuple(x - 1 for x in p[1:])
    return p if p[-1] == rank - 1 and p != tuple(range(rank)) else None


def materialize(m, grp: Group) -> None:
    """Emit ``mrvl::BatchMatMul`` into the Materializer ``m``. Each operand is read as it is stored
    when its innermost axis is the one its rows run along (A: K; B: N, or K with ``transpose_b``):
    ``a_perm`` / ``b_perm`` give the storage (stored axis k holds logical axis perm[k]), so the head
    Transposes of attention move no data; otherwise it is converted (block rotations) to its
    logical order, or B to the swapped order (``transpose_b=1``, the FC kernel's OI order) when
    that needs fewer rotations. The output is written in the order ``out_perm``."""
    a, b = grp.inputs
    rank = len(m.logical_shape(b))
    swap = _swap_last(rank)
    origin = grp.origin
    attrs = {"alpha": float(grp.attrs.get("alpha", 1.0)), "rank": rank}
    if _strided(m, a, (rank - 1,)) and not m.available(a, None):
        xa = m.loc[a][0]
        attrs["a_perm"] = list(m.loc[a][1])
    else:
        xa = m.get(a, None, for_mrvl=True, origin=origin)
    have = m.loc[b][1]
    if b in m.flat or b in m.rows or have is None or m.available(b, None):
        tb, want = 0, None
    elif have == swap or m.available(b, swap):
        tb, want = 1, swap
    elif _strided(m, b, (rank - 2, rank - 1)):
        tb, want = int(have[-1] == rank - 2), have
        attrs["b_perm"] = list(have)
    else:   # convert: to whichever of the two orders needs fewer block rotations
        stored = [m.logical_shape(b)[i] for i in have]
        cost = {w: len(rotations(stored, [list(have).index(x) for x in (w or range(rank))]) or [0] * 9)
                for w in (None, swap)}
        want = min((None, swap), key=lambda w: cost[w])
        tb = int(want is not None)
    xb = m.loc[b][0] if "b_perm" in attrs else m.get(b, want, for_mrvl=True, origin=origin)
    attrs["transpose_b"] = tb
    out_perm = _out_perm(m, grp, rank)
    if out_perm is not None:
        attrs["out_perm"] = list(out_perm)
    attrs.update({k: v for k, v in grp.attrs.items() if k in ALL_INT8_ATTRS})   # an int8 one (qdq_transformer.py)
    m._emit(grp, "BatchMatMul", [xa, xb], attrs, out_perm)
