"""A DequantizeLinear of constants read by several nodes -> one copy per reader (onnxruntime's
``EnsureUniqueDQForNodeUnit``, which runs before its QDQ fusion for the same reason).

Exporters share identical constants (the dynamo exporter dedups them: one ``sqrt(1/sqrt(d))`` for
q and k of every attention layer; a bias the layers of a cloned ``nn.TransformerEncoder`` share),
and onnxruntime's quantizer then writes one DQ for all of them. Each QDQ layer claims the DQ of its
own weight or constant operand (fuse/qdq*.py); a DQ shared by several could be claimed by one only,
so it stayed on the CPU and its float values became region inputs. The copies read the same
initializers: no values are duplicated, results are identical."""
from __future__ import annotations

from typing import Optional

from .base import Match

NAME = "qdq_unique_dq"
OPS = ("DequantizeLinear",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx") or not node.output:
        return None
    if not all(g.is_const(i) for i in node.input if i) or node.output[0] in g.outputs:
        return None
    readers = g.users(node.output[0])
    if len(readers) < 2 or any(r.op_type in ("If", "Loop", "Scan") for r in readers):
        return None
    return Match([node], {"readers": readers})


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    dq = m.node
    readers = m.data["readers"]
    attrs = {a.name: a for a in dq.attribute}
    for r in readers[1:]:
        out = g.fresh(f"{dq.output[0]}/for_{r.name}")
        copy = g.make("DequantizeLinear", list(dq.input), [out], near=dq, origin=m.origin,
                      name=f"{dq.name}/for_{r.name}")
        copy.attribute.extend(attrs.values())
        shape = g.shape(dq.output[0])
        if shape is not None:
            g.set_shape(out, shape, g.dtype(dq.output[0]))
        for k, t in enumerate(r.input):
            if t == dq.output[0]:
                g.set_input(r, k, out)
    return f"DequantizeLinear of constants read by {len(readers)} nodes -> one per reader"
