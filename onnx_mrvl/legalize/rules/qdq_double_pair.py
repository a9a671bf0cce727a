"""``Q1 -> DQ1 -> Q2 -> DQ2`` (two pairs of different scalar quantizations back to back) -> ``Q -> DQ``
with the scale and zero point onnxruntime's ``DoubleQDQPairsRemover`` (a basic-level optimizer,
core/optimizer/double_qdq_pairs_remover.cc) computes, because onnxruntime runs that single pair
instead of the two roundings the model writes.

Exporters write such chains when a no-op sits between two quantized tensors: paddle2onnx's Dropout
(an Identity at inference) between the SVTR attention's Softmax output and the attention MatMul,
each side quantized by onnxruntime's quantizer with its own calibrated scale (``softmax -> Q (1/255)
-> DQ -> Identity -> Q (1.2e-4) -> DQ -> MatMul``). onnxruntime removes the Identity, then the inner
``DQ1 -> Q2`` and gives the outer Q and DQ the intersection of both ranges:

    real_min_i = fp32(q_min - z_i) * s_i,  real_max_i = fp32(q_max - z_i) * s_i   (i = 1, 2)
    real_min = max(real_min_1, real_min_2),  real_max = min(real_max_1, real_max_2)
    s = fp32(real_max - real_min) / fp32(q_max - q_min),  z = round(fp32(q_min - real_min / s))

(fp32 arithmetic, ``std::round``: half away from zero). Its conditions are kept: each pair's Q and
DQ share a constant scalar scale and an explicit zero point (int8 or uint8, one type for both
pairs), Q1, DQ1 and Q2 are read by one node each and are no graph outputs. Pairs of one
quantization are left alone (the second rounding is exact), and so are pairs that another rule's
removal made adjacent: a no-op Reshape, and torch's ``_safe_softmax`` guard ``Where(IsNaN(p), 0, p)``
that ``nan_guard_dq`` drops after a DequantizeLinear of finite scales (it records the tensor), which
onnxruntime keeps between the pairs (merged, DETR's QDQ attention was 83.2% identical). Identity /
Dropout and a Cast to float32 (a no-op on the DQ's float32 output: BART's TorchScript export casts
its position embeddings) between them count as adjacent, as onnxruntime removes those first.
"""
from __future__ import annotations

from typing import Optional

import weakref

import numpy as np

from .base import Match

NAME = "qdq_double_pair"
OPS = ("DequantizeLinear",)
RANGES = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}


def _only_user(g, t: str, op: str):
    users = g.users(t)
    if len(users) != 1 or t in g.outputs or users[0].op_type != op or users[0].domain not in ("", "ai.onnx"):
        return None
    return users[0]


def match(node, g) -> Optional[Match]:
    _adjacent_in_source(g, node, None)   # the first call (sweep 0, the graph as given) records the pairs
    if node.domain not in ("", "ai.onnx") or len(node.input) < 3:
        return None
    q1 = g.producer.get(node.input[0])
    if q1 is None or q1.op_type != "QuantizeLinear" or _only_user(g, q1.output[0], "DequantizeLinear") is not node:
        return None
    q2 = _only_user(g, node.output[0], "QuantizeLinear")
    dq2 = _only_user(g, q2.output[0], "DequantizeLinear") if q2 is not None else None
    if dq2 is None:
        return None
    return Match([node], {"q1": q1, "q2": q2, "dq2": dq2})


def double_pair_head(q1, g) -> bool:
    """``q1`` (a QuantizeLinear of a constant) starts ``Q1 -> DQ1 -> [Identity / Dropout / float Cast]
    -> Q2 -> DQ2`` of two different scalar quantizations: fold_constants leaves it, so that this rule
    merges the pairs first (onnxruntime keeps DequantizeLinear out of its constant folding and runs the
    merged pair: BART's position embeddings, ``Gather(DQ(w)) -> Q -> DQ -> Cast -> Q -> DQ``);
    folded as written, the constant took both roundings."""
    dq1 = _only_user(g, q1.output[0], "DequantizeLinear")
    cur = dq1
    while cur is not None:
        users = g.users(cur.output[0]) if cur.output else []
        if len(users) != 1 or cur.output[0] in g.outputs:
            return False
        cur = users[0]
        if cur.op_type == "QuantizeLinear":
            break
        if not (cur.op_type in ("Identity", "Dropout") or _float_cast(cur)):
            return False
    if cur is None or _only_user(g, cur.output[0], "DequantizeLinear") is None:
        return False
    p = [_params(g, n) for n in (q1, dq1, cur)]
    return all(x is not None for x in p) and (float(p[1][0]), int(p[1][1])) != (float(p[2][0]), int(p[2][1]))


def _params(g, n):
    """(scale, zero point) of ``n`` as numpy scalars, or None (not constant scalars, zp absent)."""
    if len(n.input) < 3 or not all(n.input[1:3]) or not all(g.is_const(i) for i in n.input[1:3]):
        return None
    s, z = g.const(n.input[1]), g.const(n.input[2])
    if s is None or z is None or s.size != 1 or z.size != 1 or s.dtype != np.float32 or z.dtype not in RANGES:
        return None
    return s.reshape(()), z.reshape(())


def new_quantization(p1, p2):
    """onnxruntime's DoubleQDQPairsRemover scale and zero point for pairs ``p1`` then ``p2``."""
    f = np.float32
    qmin, qmax = RANGES[p1[1].dtype]
    rmin1, rmax1 = f(qmin - int(p1[1])) * f(p1[0]), f(qmax - int(p1[1])) * f(p1[0])
    rmin2, rmax2 = f(qmin - int(p2[1])) * f(p2[0]), f(qmax - int(p2[1])) * f(p2[0])
    rmin, rmax = max(rmin1, rmin2), min(rmax1, rmax2)
    s = f(f(rmax - rmin) / f(qmax - qmin))
    v = f(f(qmin) - f(rmin / s)) if s > 0 else f(np.nan)
    z = np.sign(v) * np.floor(np.abs(v) + f(0.5))   # std::round: half away from zero
    return s, z


_SOURCE_PAIRS = weakref.WeakKeyDictionary()   # graph -> {id(DQ1): id(Q2)} as first seen


def _adjacent_in_source(g, dq1, q2) -> bool:
    """Whether ``dq1`` fed ``q2`` directly or through Identity / Dropout only (what onnxruntime removes
    before its remover runs) when this rule first looked at the graph: not a chain made later by
    removing other ops (a no-op Reshape, which onnxruntime keeps between the pairs)."""
    pairs = _SOURCE_PAIRS.get(g)
    if pairs is None:
        pairs = {}
        for dq in g.nodes_of(("DequantizeLinear",)):
            cur = dq
            while True:
                users = g.users(cur.output[0]) if cur.output else []
                if len(users) != 1 or not (users[0].op_type in ("Identity", "Dropout", "QuantizeLinear")
                                           or _float_cast(users[0])):
                    break
                cur = users[0]
                if cur.op_type == "QuantizeLinear":
                    pairs[id(dq)] = id(cur)
                    break
        _SOURCE_PAIRS[g] = pairs
    return pairs.get(id(dq1)) == id(q2)


def _float_cast(n) -> bool:
    """A Cast to float32 of a float32 DequantizeLinear output (BART's TorchScript ``.to(dtype)`` of the
    position embeddings): a no-op onnxruntime's CastElimination removes before the pairs meet (the
    chain starts at a DQ whose scale ``_params`` requires float32, and every link carries float32)."""
    return n.op_type == "Cast" and n.domain in ("", "ai.onnx") and \
        any(a.name == "to" and a.i == 1 for a in n.attribute)


def check(m: Match, g, target) -> Optional[str]:
    dq1, q1, q2, dq2 = m.node, m.data["q1"], m.data["q2"], m.data["dq2"]
    if not _adjacent_in_source(g, dq1, q2) or dq1.output[0] in getattr(g, "nan_guard_bypassed", ()):
        return "other ops stood between the two pairs (onnxruntime keeps the chain)"
    p = [_params(g, n) for n in (q1, dq1, q2, dq2)]
    if any(x is None for x in p):
        return "a scale / zero point is not a constant scalar (or the zero point is absent)"
    if any(float(p[i][0]) != float(p[i + 1][0]) or int(p[i][1]) != int(p[i + 1][1]) for i in (0, 2)):
        return "a pair's Q and DQ differ in scale or zero point (onnxruntime keeps the chain)"
    if p[1][1].dtype != p[2][1].dtype:
        return "the two pairs' zero points have different types"
    if float(p[1][0]) == float(p[2][0]) and int(p[1][1]) == int(p[2][1]):
        return "both pairs quantize alike (the second rounding is exact)"
    s, z = new_quantization(p[1], p[2])
    lo, hi = RANGES[p[1][1].dtype]
    if not (np.isfinite(s) and s > 0 and np.isfinite(z) and lo <= z <= hi):
        return f"the pairs' ranges do not overlap (merged scale {s}, zero point {z})"
    m.data["new"] = (s, p[1][1].dtype.type(int(z)))
    return None


def rewrite(m: Match, g) -> str:
    dq1, q1, q2, dq2 = m.node, m.data["q1"], m.data["q2"], m.data["dq2"]
    s, z = m.data["new"]
    sn, zn = g.add_const(f"{q1.name}/merged_scale", np.array(s, np.float32)), g.add_const(f"{q1.name}/merged_zp", np.array(z))
    for n in (q1, dq2):
        g.set_input(n, 1, sn)
        g.set_input(n, 2, zn)
    g.set_input(dq2, 0, q1.output[0])
    g.remove(q2)
    g.remove(dq1)
    return f"two Q/DQ pairs as one (onnxruntime's DoubleQDQPairsRemover): scale {float(s):g}, zero point {int(z)}"
