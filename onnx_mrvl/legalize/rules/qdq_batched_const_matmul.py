"""``MatMul(x [B, M, K], DQ(C [B, K, N]))`` with C 3-D int8 / uint8 codes of one scale and zero point
-> per entry b ``MatMul(Gather(x, b, axis 0), DQ(C[b]))`` (an int8 FC each), the B results
concatenated along the first axis and reshaped to [B, M, N]; one ``MatMul(x, DQ(C[0]))`` when every
C[b] is the same (docs/legalize.md rule 7f*, the QDQ form of ``batched_const_matmul``).

onnxruntime's quantizer turns DeBERTa-v2/v3's and SEW-D's per-head relative-position projections
(constant-folded into a [B * H, d, 2S] tensor) into a DequantizeLinear of int8 codes with a zero
point: a MatMul neither an int8 FC (2-D weights) nor a BatchMatMul (two activations) takes, left on
the CPU with its DQ and cutting every attention block. The entries keep the model's quantization:
x's Q -> DQ pair (when x is a DequantizeLinear's output) is repeated after each Gather, the output's
(when one QuantizeLinear reads the MatMul) after each entry's MatMul, and each entry's weight is a
DequantizeLinear of C[b] with C's scale and zero point. Exact against onnxruntime: ``Q(DQ(q)) = q``
with one scale and zero point, a Gather and a Concat move values, and each entry is the [M, K] x
[K, N] product onnxruntime's batched QLinearMatMul / float MatMul computes for entry b (the per-entry
MatMuls carry the original's name as provenance, which says how onnxruntime runs it). Rules: x of
rank 3 with a static shape and x's first axis B, B <= ``batched_const_matmul.MAX_BATCH``."""
from __future__ import annotations

from typing import Optional

import numpy as np

from . import batched_const_matmul
from .base import Match, is_float, shape_const

NAME = "qdq_batched_const_matmul"
OPS = ("MatMul",)


def _const_dq(g, t: str):
    dq = g.producer.get(t)
    if dq is None or dq.op_type != "DequantizeLinear" or not all(g.is_const(i) for i in dq.input if i):
        return None
    return dq


def _pair_params(g, node) -> Optional[list]:
    """The scale (and zero point) inputs of a Q / DQ of one constant scale and zero point, else None."""
    ins = [t for t in node.input[1:3] if t]
    if not ins or not all(g.is_const(t) and np.asarray(g.const(t)).size == 1 for t in ins):
        return None
    return ins


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx") or len(node.input) != 2 or g.is_const(node.input[0]):
        return None
    dq = _const_dq(g, node.input[1])
    if dq is None or np.asarray(g.const(dq.input[0])).ndim != 3:
        return None
    return Match([node], {"dq": dq})


def check(m: Match, g, target) -> Optional[str]:
    x, y = m.node.input[0], m.node.output[0]
    dq = m.data["dq"]
    w = np.asarray(g.const(dq.input[0]))
    if w.dtype not in (np.int8, np.uint8):
        return f"weight codes of type {w.dtype} (int8 / uint8 only)"
    wp = _pair_params(g, dq)
    if wp is None:
        return "the weight's DequantizeLinear has no single scale and zero point (per-axis: not taken)"
    if not is_float(g, x):
        return "not a float MatMul"
    why = batched_const_matmul.shape_reason(g, x, y, w.shape)
    if why:
        return why
    src = g.producer.get(x)
    pin = _pair_params(g, src) if src is not None and src.op_type == "DequantizeLinear" and \
        not g.is_const(src.input[0]) else None
    users = g.users(y)
    pout = _pair_params(g, users[0]) if len(users) == 1 and users[0].op_type == "QuantizeLinear" and \
        y not in g.outputs else None
    m.data.update(w=w, wp=wp, pin=pin, pout=pout, qtype=g.dtype(users[0].output[0]) if pout else None,
                  xtype=g.dtype(src.input[0]) if pin else None)
    return None


def _pair(g, t: str, params, qtype, shape, node, origin, tag: str) -> str:
    """``DQ(Q(t))`` with ``params`` (the identity on the codes the model already holds)."""
    q, d = g.fresh(f"{t}/{tag}_q"), g.fresh(f"{t}/{tag}_dq")
    g.make("QuantizeLinear", [t] + params, [q], near=node, origin=origin, name=f"{node.name}/{tag}_q")
    g.set_shape(q, shape, qtype)
    g.make("DequantizeLinear", [q] + params, [d], near=node, origin=origin, name=f"{node.name}/{tag}_dq")
    g.set_shape(d, shape, g.dtype(t))
    return d


def rewrite(m: Match, g) -> str:
    node, dq = m.node, m.data["dq"]
    x, y = node.input[0], node.output[0]
    w, wp = m.data["w"], m.data["wp"]
    b, mm, n = g.shape(x)[0], g.shape(x)[1], w.shape[2]
    dt = g.dtype(x)

    def weight(k: int) -> str:
        out = g.fresh(f"{dq.output[0]}/entry{k}")
        codes = g.add_const(f"{node.name}/codes{k}", np.ascontiguousarray(w[k]))
        g.make("DequantizeLinear", [codes] + wp, [out], near=node, origin=m.origin, name=f"{node.name}/weight{k}")
        g.set_shape(out, w.shape[1:], dt)
        return out

    g.remove(node)
    if all(np.array_equal(w[0], w[k]) for k in range(1, b)):
        g.make("MatMul", [x, weight(0)], [y], near=node, origin=m.origin, name=node.name)
        detail = f"QDQ MatMul by {b} equal [K, N] int8 matrices -> one MatMul"
    else:
        parts = []
        for k in range(b):
            xk, yk = g.fresh(f"{x}/entry{k}"), g.fresh(f"{y}/entry{k}")
            g.make("Gather", [x, g.add_const(f"{node.name}/entry{k}", np.array(k, np.int64))], [xk], near=node,
                   origin=m.origin, name=f"{node.name}/take{k}", axis=0)
            g.set_shape(xk, [mm, w.shape[1]], dt)
            if m.data["pin"]:
                xk = _pair(g, xk, m.data["pin"], m.data["xtype"], [mm, w.shape[1]], node, m.origin, f"in{k}")
            g.make("MatMul", [xk, weight(k)], [yk], near=node, origin=m.origin, name=f"{node.name}/entry{k}")
            g.set_shape(yk, [mm, n], dt)
            if m.data["pout"]:
                yk = _pair(g, yk, m.data["pout"], m.data["qtype"], [mm, n], node, m.origin, f"out{k}")
            parts.append(yk)
        rows = g.fresh(f"{y}/rows")
        g.make("Concat", parts, [rows], near=node, origin=m.origin, name=f"{node.name}/rows", axis=0)
        g.set_shape(rows, [b * mm, n], dt)
        g.make("Reshape", [rows, shape_const(g, node, [b, mm, n])], [y], near=node, origin=m.origin,
               name=node.name)
        detail = f"QDQ MatMul by {b} constant [K, N] int8 matrices -> {b} int8 MatMuls of the entries, concatenated"
    if not g.used(dq.output[0]):
        g.remove(dq)
    return detail
