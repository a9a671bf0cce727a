"""Raise a model's default-domain opset (for an op a rule writes, e.g. LayerNormalization at 17)
only when every standard op the graph holds means the same at the new version: its schema is the
same, or it changed in types / added attributes whose defaults keep the old behaviour."""
from __future__ import annotations

from typing import Collection, Optional

from onnx import defs

# ops whose versions between 13 and 17 changed nothing a float model computes (types, or new
# attributes whose defaults are the old behaviour: Reshape allowzero=0, BatchNormalization
# training_mode=0, Shape start/end, RNN layout=0, Scatter reduction=none)
SAME_MEANING = {
    "Add", "Sub", "Mul", "Div", "Relu", "Identity", "Reshape", "BatchNormalization", "Pow", "LeakyRelu",
    "PRelu", "Where", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal", "Shape", "CumSum",
    "GRU", "LSTM", "RNN", "ScatterND", "ScatterElements", "If", "Loop", "Scan", "Trilu", "HardSwish",
    "CastLike", "Optional", "OptionalHasElement", "OptionalGetElement",
}


def _nodes(graph):
    for n in graph.node:
        yield n
        for a in n.attribute:
            for sg in list(a.graphs) + ([a.g] if a.HasField("g") else []):
                yield from _nodes(sg)


def _all_nodes(g):
    for n in g.node_list():
        yield n
        for a in n.attribute:
            for sg in list(a.graphs) + ([a.g] if a.HasField("g") else []):
                yield from _nodes(sg)


def reason(g, version: int, skip: Collection[str] = (), subgraphs: bool = True) -> Optional[str]:
    """Why the model of the legalize graph ``g`` cannot move to ``version``, or None. ``skip``:
    default-domain op types left out (ones the caller rewrites anyway); ``subgraphs`` False: a node
    holding a subgraph is itself the reason (else the subgraphs' nodes are checked too)."""
    old = g.opset
    for n in _all_nodes(g) if subgraphs else g.node_list():
        if n.domain not in ("", "ai.onnx") or n.op_type in skip:
            continue
        if not subgraphs and any(a.HasField("g") or a.graphs for a in n.attribute):
            return f"{n.op_type} '{n.name}' holds a subgraph"
        try:
            before = defs.get_schema(n.op_type, old).since_version
            after = defs.get_schema(n.op_type, version).since_version
        except Exception:   # noqa: BLE001  (onnx raises SchemaError for unknown ops)
            return f"op {n.op_type} has no schema at opset {old} or {version}"
        if before != after and n.op_type not in SAME_MEANING:
            return f"{n.op_type} ('{n.name}') changes between opset {old} and {version}"
    return None


def raise_to(g, version: int) -> None:
    """Set the default-domain opset of the legalize graph ``g`` to ``version`` (checked by ``reason``)."""
    for o in g.model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = version
    g.opset = version
    g.model.ir_version = max(g.model.ir_version, 8)
