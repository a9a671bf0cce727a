"""A float model input read only through chains of data moves that each end in a per-tensor
QuantizeLinear: ``x -> moves -> Q(s, z)`` (every reader) -> ``x -> Q(s, z) -> DQ(s, z) -> moves ->
Q(s, z)``, a pair per chain with its own Q's scale and zero point.

YOLOX's / YOLOv5's Focus stem slices the image (``x[..., ::2, ::2]`` and three more strided Slices)
and concatenates; onnxruntime's quantizer does not quantize Slice, so the QDQ model quantizes the
Concat (legalize then moves that Q in front of it, one per slice). The slices of the float input
stayed on the CPU and the region quantized their fp32 values after fp16 storage: codes moved at
ties for inputs with fractions (ddddocr's detector at opset 13 with noisy inputs: 61% identical).
With the pairs at the input, the Qs run on the host in fp32 as any model input's (exact), and the
slices move values of that grid, which the Q after them maps back to their own codes (exact, as in
``qdq_move_chain``). Exact: a move only selects values and Q is element-wise with one scale and zero
point, ``Q(move(x)) == move(Q(x))``. Only chains with a Slice in them (slices read by a Q alone are no
accelerator work and stayed on the CPU); an input that only a Transpose / Reshape moves before its Q
stays in the region as before (its fp16 storage is the accelerator's input format).
"""
from __future__ import annotations

from typing import Optional

from .base import Match, inp

NAME = "qdq_input_pair"
OPS = ("QuantizeLinear",)
MOVES = ("Slice", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity")
DEPTH = 4


def _params(g, q):
    s = g.const(q.input[1])
    z = g.const(inp(q, 2)) if inp(q, 2) else None
    if s is None or s.size != 1 or (inp(q, 2) and (z is None or z.size != 1)):
        return None
    return float(s.reshape(-1)[0]), (None if z is None else (z.dtype, int(z.reshape(-1)[0])))


def _chain_end(g, t: str, sliced: bool = False):
    """The QuantizeLinear that ends the chain of single-reader moves from ``t``'s reader, or None (also
    when no Slice is among the moves; ``sliced``: the move writing ``t`` was one)."""
    for _ in range(DEPTH + 1):
        users = g.users(t)
        if len(users) != 1 or t in g.outputs:
            return None
        u = users[0]
        if u.domain not in ("", "ai.onnx"):
            return None
        if u.op_type == "QuantizeLinear" and u.input[0] == t:
            return u if sliced else None
        sliced = sliced or u.op_type == "Slice"
        if u.op_type not in MOVES or u.input[0] != t or any(i and not g.is_const(i) for i in u.input[1:]) \
                or len(u.output) != 1:
            return None
        t = u.output[0]
    return None


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx") or _params(g, node) is None:
        return None
    t = node.input[0]
    for _ in range(DEPTH):
        p = g.producer.get(t)
        if p is None:
            break
        if p.op_type not in MOVES or p.domain not in ("", "ai.onnx"):
            return None
        t = p.input[0]
    if g.producer.get(t) is not None or t == node.input[0] or g.is_const(t) or g.dtype(t) not in (None, 1) \
            or t in g.outputs:
        return None
    return Match([node], {"x": t})


def check(m: Match, g, target) -> Optional[str]:
    x = m.data["x"]
    readers = g.users(x)
    ends = []
    for r in readers:
        if r.op_type == "QuantizeLinear":   # the input's own pair exists already
            return f"model input '{x}' is read by a QuantizeLinear itself"
        end = _chain_end_from(g, r)
        if end is None or _params(g, end) is None:
            return f"model input '{x}': not every reader is a chain of data moves ending in a per-tensor " \
                   f"QuantizeLinear"
        ends.append(end)
    m.data.update(firsts=list(readers), ends=ends)
    return None


def _chain_end_from(g, first):
    """As ``_chain_end`` from the node ``first`` (one reader of a tensor read by several)."""
    if first.op_type not in MOVES or first.domain not in ("", "ai.onnx") or len(first.output) != 1 or \
            any(i and not g.is_const(i) for i in first.input[1:]):
        return None
    return _chain_end(g, first.output[0], first.op_type == "Slice")


def rewrite(m: Match, g) -> str:
    x = m.data["x"]
    for f, q in zip(m.data["firsts"], m.data["ends"]):
        params = list(q.input[1:])
        codes, back = g.fresh(f"{x}_QuantizeLinear"), g.fresh(f"{x}_DequantizeLinear")
        g.make("QuantizeLinear", [x] + params, [codes], near=f, origin=m.origin + [f.name, q.name],
               name=g.fresh_node_name(f"{q.name}/at_input"))
        g.make("DequantizeLinear", [codes] + params, [back], near=f, origin=m.origin + [f.name, q.name],
               name=g.fresh_node_name(f"{q.name}/at_input_dq"))
        if g.shape(x) is not None:
            g.set_shape(codes, list(g.shape(x)), g.dtype(q.output[0]))
            g.set_shape(back, list(g.shape(x)), 1)
        g.set_input(f, 0, back)
    return f"a Q -> DQ pair at model input '{x}' for each of its {len(m.data['firsts'])} chain(s) of data moves " \
           f"ending in a QuantizeLinear (its scale and zero point)"


__all__ = ["NAME", "OPS", "match", "check", "rewrite"]
