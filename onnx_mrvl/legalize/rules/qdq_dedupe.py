"""QuantizeLinear / DequantizeLinear nodes that read the same tensor with the same scale, zero
point and attributes compute the same tensor: one is kept, the readers of the others read it.

onnxruntime's ``quantize_static(extra_options={"DedicatedQDQPair": True})`` (and tools that place a
pair per consumer) give every reader of a tensor its own ``Q -> DQ``: an int8 layer whose output
two Qs read would have two output quantizations, which the import takes as a float output
(an fp16 value quantized again in the next layer: codes flip near ties), and a layer output read
by a float op and a pair would keep it so too. Merged, the tensor has one Q (the shared form
onnxruntime writes by default). Exact: the nodes are deterministic functions of equal inputs.
Only activations: a Q / DQ of a constant (a weight, a bias) stays one per layer, as the int8
import absorbs it into its one reader.
"""
from __future__ import annotations

from typing import List, Optional

import onnx

from .base import Match

NAME = "qdq_dedupe"
OPS = ("QuantizeLinear", "DequantizeLinear")


def _param(g, name: str):
    if not name:
        return None
    v = g.const(name)
    return ("const", v.dtype.str, v.shape, v.tobytes()) if v is not None else ("tensor", name)


def _key(node, g):
    attrs = sorted((a.name, onnx.helper.get_attribute_value(a)) for a in node.attribute)
    return (node.op_type, node.domain, tuple(_param(g, i) for i in node.input[1:]), repr(attrs))


def _twins(node, g) -> List[onnx.NodeProto]:
    """The other nodes that compute what ``node`` computes (outputs that are no graph output)."""
    if node.op_type not in OPS or node.domain not in ("", "ai.onnx") or not node.input[0] or g.is_const(node.input[0]):
        return []   # a Q / DQ of a constant is a layer's weight or bias: each layer keeps its own
    key = _key(node, g)
    return [u for u in g.users(node.input[0])
            if u is not node and u.op_type == node.op_type and u.input[0] == node.input[0]
            and u.output[0] not in g.pinned and _key(u, g) == key]


def match(node, g) -> Optional[Match]:
    twins = _twins(node, g)
    return Match([node] + twins) if twins else None


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    keep = m.node
    for twin in m.nodes[1:]:
        g.replace_uses(twin.output[0], keep.output[0])
        g.remove(twin)
    return f"{len(m.nodes) - 1} identical {keep.op_type} of '{keep.input[0]}' merged into '{keep.name}'"

