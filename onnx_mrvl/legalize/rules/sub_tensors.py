"""Sub(a, b) of two float tensors -> Add(a, Mul(b, -1)): the accelerator has an element-wise Add
(Sum2D) and a Mul by a constant but no Sub of two tensors. Complex arithmetic written on real and
imaginary parts (DCCRN's complex conv ``conv_r(x_r) - conv_i(x_i)``, complex masks), DBNet's
``P - T``, differences of two branches. Negation is exact, so the result is the same in fp32 and
fp16. Left alone: Subs with a constant (sub_div_const), a QDQ Sub (the result read by a
QuantizeLinear, directly or through one activation: fuse/qdq_sub.py's int8 Sum2D), integer tensors,
and ``x - reduce(x)`` (a decomposed LayerNorm / Softmax, also with a Q -> DQ pair on the mean:
reduce_axis_to_pool, layernorm_canonical and fuse's QDQ layer norms read that form).
A Sub of dequantized operands whose result is not quantized (a toolkit leaving the arithmetic between
its quantizers float: ``Concat(DQ(a) - DQ(b), ..) -> Q``) is rewritten as well: fuse has no float
Sub of two tensors (it stayed on the CPU and cut the region), and ``a + (-b)`` equals ``a - b`` bit
for bit in fp32, so an fp32 chain (fuse/qdq_f32chain.py) computes onnxruntime's value."""
from __future__ import annotations

from typing import Optional

from .base import Match, is_float, negated

NAME = "sub_tensors"
OPS = ("Sub",)
REDUCE = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceLogSumExp", "GlobalAveragePool",
          "GlobalMaxPool")
ACTIVATIONS = ("Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh")   # an int8 add folds


def match(node, g) -> Optional[Match]:
    if node.op_type != "Sub" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    a, b = node.input
    if g.is_const(a) or g.is_const(b):
        return None
    return Match([node])


def _behind_pairs(g, t: str):
    """The producer of ``t`` looking through ``Q -> DQ`` pairs (a quantized mean)."""
    p = g.producer.get(t)
    while p is not None and p.op_type == "DequantizeLinear":
        q = g.producer.get(p.input[0])
        if q is None or q.op_type != "QuantizeLinear":
            break
        p = g.producer.get(q.input[0])
    return p


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    a, b = node.input
    if not (is_float(g, a) and is_float(g, b)):
        return "integer (or mixed) tensors keep their Sub"
    if g.opset < 7:
        return "opset < 7: legacy broadcast attributes"
    for t in (a, b):
        p = _behind_pairs(g, t)
        if p is not None and p.op_type in REDUCE:
            return "x - reduce(x): a decomposed normalization, read as such by later rules"
    users = g.users(node.output[0])
    if len(users) == 1 and users[0].op_type in ACTIVATIONS and len(users[0].output) == 1:
        users = users + g.users(users[0].output[0])   # Sub -> Relu -> Q: the int8 Sum2D's activation
    if any(u.op_type == "QuantizeLinear" for u in users):
        return "a QDQ Sub (an int8 Sum2D with subtract, fuse/qdq_sub.py)"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    a, b = node.input
    g.remove(node)
    t = negated(g, b, near=node, origin=m.origin)
    g.make("Add", [a, t], [node.output[0]], near=node, origin=m.origin, name=node.name)
    return "tensor minus tensor -> Add of the Mul by -1"
