"""``op -> move -> ... -> Q(s, z)`` -> ``op -> Q(s, z) -> DQ(s, z) -> move -> ... -> Q(s, z)``: the
QuantizeLinear that ends a float op's output, behind data moves (Transpose / Reshape / Squeeze /
Unsqueeze / Flatten, each the only reader of the last), gets a copy right after the op.

tf2onnx writes Keras' squeeze-excite gate on NHWC data as ``HardSigmoid([N, C, 1, 1]) -> Transpose
to [N, 1, 1, C] -> Q`` (and its mean as ``ReduceMean -> Transpose -> Q``): onnxruntime quantizes the
moved values, so no Q -> DQ pair ends the op's own group and fuse ran it as an fp16 layer whose
rounding moved codes (MobileNetV3-style ``se_nhwc`` QDQ: 86-96% identical). With the copy the op
is an int8 group (a Lookup, a pool) and the moves carry its codes. Exact: a move only relabels
values and Q is element-wise with one scale and zero point, so ``Q(move(y)) == move(Q(y))``, and
``Q(DQ(Q(y))) == Q(y)`` (the codes come back unchanged): the original Q computes the same codes.
Per-tensor Q only; not after a DequantizeLinear (moves of codes: ``qdq_move_chain``) nor after a
Conv / MatMul / Gemm (onnxruntime fuses those with a Q right after them: a copy there would change
which kernel it runs), nor after a recurrent layer (LSTM / GRU / RNN: whether it writes int8 codes
is the recurrent fusion's choice, docs/fusion.md; a copy made the dynamic-int8 LSTM's documented
fp16 / "int8 in, fp16 out" layer an int8-out one).

A max (MaxPool, GlobalMaxPool, ReduceMax) counts as a move too: Q is monotone non-decreasing (a
positive scale), so ``Q(max(y)) == max(Q(y))`` and the copy is exact as well. facenet-pytorch's MTCNN
P-Net ``DQ -> PRelu -> MaxPool -> Q`` (onnxruntime moves the Q in front of the pool itself): the
per-channel PRelu was an fp16 layer whose rounding moved codes at ties (99.3% identical, 62% at the
outputs); with the copy it is an int8 lookup.

Only when the op reads DequantizeLinear outputs alone (it becomes an int8 group): after a float
layer, e.g. a calibrated dynamic-int8 model's int8-in / fp16-out ``Conv -> PRelu -> Transpose ->
Reshape -> Q`` (MTCNN R-Net), the copy made the Conv an int8-out layer whose float bias it cannot
take (the Conv on the CPU, 2 regions).
"""
from __future__ import annotations

from typing import Optional

from .base import Match, inp

NAME = "qdq_pair_before_move"
OPS = ("QuantizeLinear",)
MOVES = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten")
MAXES = ("MaxPool", "GlobalMaxPool", "ReduceMax")   # commute with a monotone per-tensor Q
NOT_AFTER = ("DequantizeLinear", "QuantizeLinear", "Conv", "ConvTranspose", "MatMul", "Gemm", "MatMulInteger",
             "ConvInteger", "LSTM", "GRU", "RNN")
DEPTH = 4


def _single(g, t: str) -> bool:
    return len(g.users(t)) == 1 and t not in g.pinned


def _reads_codes(g, op) -> bool:
    """Whether every computed input of ``op`` is a DequantizeLinear's output (the copy then makes
    ``op`` an int8 group; after a float layer, e.g. a calibrated dynamic-int8 model's int8-in / fp16-out
    Conv -> PRelu -> MaxPool -> Q, it would make that layer's output int8 instead)."""
    ins = [i for i in op.input if i and not g.is_const(i)]
    return bool(ins) and all(g.producer.get(i) is not None and g.producer[i].op_type == "DequantizeLinear"
                             for i in ins)


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx") or len(node.input) < 2:
        return None
    s = g.const(node.input[1])
    z = g.const(inp(node, 2)) if inp(node, 2) else None
    if s is None or s.size != 1 or (inp(node, 2) and (z is None or z.size != 1)):
        return None
    chain, t = [], node.input[0]
    for _ in range(DEPTH):
        p = g.producer.get(t)
        if p is None or p.op_type not in MOVES + MAXES or p.domain not in ("", "ai.onnx") or not _single(g, t) \
                or any(i and not g.is_const(i) for i in p.input[1:]) or any(o for o in p.output[1:]) \
                or (p.op_type in MAXES and not float(s.reshape(-1)[0]) > 0):
            break
        chain.append(p)
        t = p.input[0]
    if not chain:
        return None
    op = g.producer.get(t)
    if op is None or op.op_type in NOT_AFTER or op.domain not in ("", "ai.onnx") or len(op.output) != 1 \
            or not _single(g, t) or g.shape(t) is None or g.dtype(t) not in (None, 1):
        return None
    if not _reads_codes(g, op):
        return None
    return Match([node, op] + chain, {"t": t, "first": chain[-1]})


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    q, op = m.nodes[:2]
    t, first = m.data["t"], m.data["first"]
    params = list(q.input[1:])
    codes, back = g.fresh(f"{t}_QuantizeLinear"), g.fresh(f"{t}_DequantizeLinear")
    g.make("QuantizeLinear", [t] + params, [codes], near=first, origin=m.origin,
           name=g.fresh_node_name(f"{q.name}/before_moves"))
    g.set_shape(codes, list(g.shape(t)), g.dtype(q.output[0]))
    g.make("DequantizeLinear", [codes] + params, [back], near=first, origin=m.origin,
           name=g.fresh_node_name(f"{q.name}/before_moves_dq"))
    g.set_shape(back, list(g.shape(t)), g.dtype(t) or 1)
    g.set_input(first, 0, back)
    moves = ", ".join(n.op_type for n in reversed(m.nodes[2:]))
    return f"a copy of {q.name}'s Q -> DQ pair after {op.op_type} {op.name}, before its {len(m.nodes) - 2} data " \
           f"move(s) ({moves})"
