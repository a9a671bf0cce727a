"""A float element-wise op on dequantized codes whose result reaches its QuantizeLinear only through
layout ops (onnxruntime's quantizer leaves ops outside its list unquantized: SVTR's head
``DQ -> HardSwish -> Squeeze -> Transpose -> Q``, MobileNetV3's ``HardSwish -> Flatten -> Q``):
``DQ -> E -> L... -> Q`` -> ``DQ -> E -> Q' -> DQ' -> L... -> Q`` with ``Q'`` the final ``Q``'s scale and
zero point. Exact: layout ops (Squeeze, Unsqueeze, Reshape, Flatten, Transpose) only move elements, and
a max pool (MaxPool without indices, GlobalMaxPool) picks one of them, which commutes with the monotone
``Q`` (``Q(max(a, b)) = max(Q(a), Q(b))``), so quantizing before them gives the same codes, and
``Q(DQ'(c)) = c`` (codes lie on the grid). openWakeWord's embedding model (tf2onnx):
``DQ -> Max(x, -0.4) -> MaxPool -> Q``. The
element-wise group ``DQ -> E -> Q' -> DQ'`` is then one int8 Lookup (docs/fusion.md "Lookup"),
computed as onnxruntime computes E (fp32), where it ran in fp16 and flipped codes at rounding ties."""
from __future__ import annotations

from typing import Optional

from .base import Match, inp

NAME = "qdq_requant_before_layout"
OPS = ("QuantizeLinear",)
LAYOUT = ("Squeeze", "Unsqueeze", "Reshape", "Flatten", "Transpose", "MaxPool", "GlobalMaxPool")
ELEMENTWISE = ("Sigmoid", "Tanh", "Relu", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Elu", "Selu",
               "Softplus", "Softsign", "Exp", "Neg", "Abs", "Erf", "Mul", "Add", "Sub", "Div", "Pow", "Gelu", "Mish",
               "Max", "Min")
MAX_LAYOUT = 8


def _only_reader(g, t: str, node) -> bool:
    readers = g.users(t)
    return t not in g.outputs and len(readers) == 1 and readers[0] is node


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx"):
        return None
    chain, t, reader = [], node.input[0], node
    for _ in range(MAX_LAYOUT + 1):
        p = g.producer.get(t)
        if p is None or not _only_reader(g, t, reader) or p.domain not in ("", "ai.onnx"):
            return None
        if p.op_type not in LAYOUT:
            break
        if len([o for o in p.output if o]) != 1:    # a MaxPool writing its indices too
            return None
        chain.append(p)
        t, reader = p.input[0], p
    else:
        return None
    if not chain or p.op_type not in ELEMENTWISE or len(p.output) != 1:
        return None
    dq = g.producer.get(p.input[0]) if p.input else None
    if dq is None or dq.op_type != "DequantizeLinear":
        return None
    return Match([node, p] + chain[::-1])


def check(m: Match, g, target) -> Optional[str]:
    q, e = m.nodes[0], m.nodes[1]
    s, z = g.const(inp(q, 1)), g.const(inp(q, 2)) if inp(q, 2) else None
    if s is None or (inp(q, 2) and z is None):
        return "scale or zero point is not a constant"
    if s.size != 1 or (z is not None and z.size != 1):
        return "quantized per axis"
    for i in e.input[1:]:
        if i and (not g.is_const(i) or g.const(i).size != 1):
            return f"{e.op_type} '{e.name}' has an operand that is no one-element constant"
    if g.shape(e.output[0]) is None:
        return "the element-wise result has no static shape"
    return None


def rewrite(m: Match, g) -> str:
    q, e, first = m.nodes[0], m.nodes[1], m.nodes[2]
    y = e.output[0]
    qp = list(q.input[1:])
    qc = g.fresh(f"{y}_QuantizeLinear_Output")
    made = g.make("QuantizeLinear", [y] + qp, [qc], near=e, origin=m.origin, name=g.fresh_node_name(f"{e.name}/requant_q"))
    made.attribute.extend(q.attribute)
    g.set_shape(qc, g.shape(y), g.dtype(q.output[0]))
    dq = g.fresh(f"{y}_DequantizeLinear_Output")
    g.make("DequantizeLinear", [qc] + qp, [dq], near=e, origin=m.origin, name=g.fresh_node_name(f"{e.name}/requant_dq"))
    g.set_shape(dq, g.shape(y), g.dtype(y))
    g.set_input(first, 0, dq)
    return (f"{e.op_type} -> {' -> '.join(n.op_type for n in m.nodes[2:])} -> QuantizeLinear: quantized "
            f"right after the {e.op_type} (exact)")
