"""``Div(x, d)`` with a divisor ``d`` computed from integer / boolean model inputs alone (token masks,
lengths: ``mask.sum(1).clamp(min=1e-9)``) -> ``Mul(x, Reciprocal(d))``.

The masked mean pooling of sentence encoders (sentence-transformers, ``(h * m).sum(1) / m.sum(1)``)
and of seq2seq bridges (arabic-name-romanizer's GRU encoder) divide the pooled hidden states by the
number of real tokens. The accelerator has no division by a tensor, so the Div stayed on the CPU and
cut the region before the layers that read the pooled vector (the romanizer's bridge Gemm: 2 regions).
The divisor is bookkeeping of the host's inputs, already on the CPU: its reciprocal is computed there
in fp32 (one value per sentence), and the Mul joins the region. Left alone: a divisor that reads any
float input, constant-only divisors (sub_div_const's), and the pooling tails of static QDQ models (a dividend computed
from dequantized int8 activations: that float tail stays
onnxruntime's fp32 ops on the host, where ``x * (1 / d)`` would differ from ``x / d`` in the last bit)."""
from __future__ import annotations

from typing import Optional

import onnx

from .base import Match, is_float

NAME = "div_host_divisor"
OPS = ("Div",)
MAX_CONE = 32
HOST_INPUTS = (onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.BOOL)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Div" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    if g.is_const(node.input[1]) or not is_float(g, node.input[0]):
        return None
    return Match([node])


def _host_only(g, name: str) -> Optional[str]:
    """None when ``name`` is computed from integer / boolean model inputs and constants alone."""
    todo, seen, inputs = [name], set(), 0
    while todo:
        t = todo.pop()
        if t in seen or g.is_const(t):
            continue
        seen.add(t)
        if len(seen) > MAX_CONE:
            return "the divisor's cone is large"
        p = g.producer.get(t)
        if p is None:
            if t not in g.inputs or g.dtype(t) not in HOST_INPUTS:
                return f"the divisor reads '{t}', not an integer / boolean model input"
            inputs += 1
            continue
        if p.domain not in ("", "ai.onnx") or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                                  for a in p.attribute):
            return f"the divisor comes from {p.op_type}"
        todo.extend(i for i in p.input if i)
    return None if inputs else "the divisor is constant"


def from_int8_activation(g, t: str, depth: int = 4) -> bool:
    """``t`` is computed (within ``depth`` nodes) from a DequantizeLinear of an activation's codes (a
    static QDQ model's Q -> DQ pair): a QDQ pooling tail. A dynamic-int8 model (quantize_dynamic's
    DequantizeLinear of weights, the Q/DQ legalize writes for its MatMulInteger) has none there."""
    todo, seen = [(t, 0)], set()
    while todo:
        name, d = todo.pop()
        p = g.producer.get(name)
        if p is None or name in seen or d > depth:
            continue
        seen.add(name)
        if p.op_type == "DequantizeLinear":
            q = g.producer.get(p.input[0])
            if q is not None and q.op_type == "QuantizeLinear":
                return True
            continue
        todo.extend((i, d + 1) for i in p.input if i)
    return False


def check(m: Match, g, target) -> Optional[str]:
    if from_int8_activation(g, m.node.input[0]):
        return "a QDQ pooling tail: the division stays onnxruntime's fp32 op on the host (its last bit)"
    return _host_only(g, m.node.input[1])


def rewrite(m: Match, g) -> str:
    node = m.node
    rec = g.fresh(f"{node.input[1]}/reciprocal")
    g.remove(node)
    g.make("Reciprocal", [node.input[1]], [rec], near=node, origin=m.origin, name=f"{node.name}/reciprocal")
    g.make("Mul", [node.input[0], rec], [node.output[0]], near=node, origin=m.origin, name=node.name)
    return "Div by a divisor of the host's integer inputs -> Mul by its Reciprocal (computed on the host)"
