"""In a dynamic-int8 model, ``DequantizeLinear(M(q), s, z)`` where ``q, s, z`` are the outputs of a
``DynamicQuantizeLinear(x)`` and M a chain of data moves (Transpose, Reshape, Squeeze, Unsqueeze,
Flatten: onnxruntime's ``quantize_dynamic`` passes the int8 codes through them) -> ``M(x)`` in float.

SegFormer's efficient attention transposes the quantized LayerNorm output before its reduction Conv
(``DQL -> Transpose -> DequantizeLinear -> Reshape -> DQL -> ConvInteger``): the codes' Transpose
and DequantizeLinear stayed on the CPU (3 regions). The float chain drops the dynamic
quantize-dequantize rounding, as rule 1c (``dynamic_int8``) does for every layer it rewrites
(fp16 on the dequantized weights: closer to the fp32 model than onnxruntime's dynamic run)."""
from __future__ import annotations

from typing import Optional

import onnx

from .base import Match, inp
from .qtensor import domain

NAME = "dynamic_dq_moves"
OPS = ("DequantizeLinear",)
MOVES = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten")


def match(node, g) -> Optional[Match]:
    if node.op_type != "DequantizeLinear" or domain(node) or not inp(node, 1):
        return None
    chain, t = [], node.input[0]
    while True:
        p = g.producer.get(t)
        if p is None or domain(p):
            return None
        if p.op_type == "DynamicQuantizeLinear":
            break
        if p.op_type not in MOVES or len(chain) >= 8:
            return None
        chain.append(p)
        t = p.input[0]
    if not chain or t != p.output[0] or node.input[1] != p.output[1] or \
            (inp(node, 2) and inp(node, 2) != p.output[2]):
        return None
    return Match([node], {"dql": p, "chain": chain[::-1]})


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    node, dql = m.node, m.data["dql"]
    x = dql.input[0]
    chain = m.data["chain"]
    g.remove(node)
    for k, c in enumerate(chain):
        out = node.output[0] if k == len(chain) - 1 else g.fresh(f"{c.output[0]}/float")
        g.add(onnx.NodeProto(op_type=c.op_type, input=[x] + list(c.input[1:]), output=[out], name=g.fresh_node_name(
            f"{c.name}/float"), attribute=c.attribute), near=node, origin=m.origin)
        if k < len(chain) - 1 and g.shape(c.output[0]) is not None:
            g.set_shape(out, g.shape(c.output[0]), g.dtype(x))
        x = out
    return f"DequantizeLinear of dynamically quantized codes moved by {', '.join(c.op_type for c in chain)} -> the moves in float"
