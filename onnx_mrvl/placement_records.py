"""convert()'s placement records: the legalized nodes behind regions split dropped (sent back to
the CPU), the report's log of CPU reasons, and a record for every node of the original model."""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

import onnx

from .decisions import Decisions
from .provenance import get_origin


def newly_cpu(dropped: List[dict], by_name: Dict[str, onnx.NodeProto], fused_decisions,
              cpu: Dict[str, str], legal: Optional[onnx.ModelProto] = None) -> Dict[str, str]:
    """Legalized node names behind dropped compute/data Mrvl nodes (not layout changes) -> reason.

    Names of the legalized graph, not original names: legalization turns one original node into
    several (a 1-D Conv into Reshape + Conv + Reshape, a large kernel into tiles + Adds), and the
    whole family must not go to the CPU because one Reshape of it was left alone in a region.
    A constant's DequantizeLinear (of ``legal``) is left out: its copies (legalize's ``qdq_unique_dq``,
    one per reader, the same origin) belong to their readers, which an excluded name would also
    keep off the accelerator (Quark's one DQ of the layer norms' eps: one dropped layer norm took
    the others to the CPU)."""
    members: Dict[str, List[str]] = {}
    for name, d in fused_decisions.items():
        if d.mrvl_node:
            members.setdefault(d.mrvl_node, []).append(name)
    out = {}
    const_dq = set()
    if legal is not None:   # data of no node (or of a Constant) and no graph input: an initializer, also
        # in a structure-only copy without its initializers
        made = {o: n.op_type for n in legal.graph.node for o in n.output}
        inputs = {i.name for i in legal.graph.input}
        const_dq = {n.name for n in legal.graph.node if n.op_type == "DequantizeLinear" and n.input and
                    made.get(n.input[0], "Constant") == "Constant" and n.input[0] not in inputs}
    for d in dropped:
        for name in d["nodes"]:
            node = by_name.get(name)
            if node is None or node.op_type == "LayoutTransform":
                continue
            for o in members.get(name) or get_origin(node):
                if o not in cpu and o not in const_dq:
                    out[o] = d["reason"]
    return out


def dropped_log(cpu: Dict[str, str], user_exclude, legal: onnx.ModelProto) -> List[dict]:
    """One entry per reason, naming original nodes (the keys of ``cpu`` are legalized names)."""
    origin = {n.name: get_origin(n) or [n.name] for n in legal.graph.node}
    user = set(user_exclude or ())
    by_reason: Dict[str, List[str]] = {}
    for name, reason in cpu.items():
        if name not in user:
            names = by_reason.setdefault(reason, [])
            names.extend(o for o in origin.get(name, [name]) if o not in names)
    return [{"origin": names, "nodes": [], "reason": reason} for reason, names in by_reason.items()]


def with_removed(decisions: Decisions, original: onnx.ModelProto, legal: onnx.ModelProto) -> Decisions:
    """Every original node gets a record: nodes legalization removed or rewrote are mapped through
    provenance to what replaced them."""
    from .provenance import get_origin
    out = Decisions()
    origin_of: Dict[str, List[str]] = {}
    for n in legal.graph.node:
        for o in get_origin(n):
            origin_of.setdefault(o, []).append(n.name)
    names = original_names(original)
    for name, op_type in names:
        if name in decisions:
            out[name] = dataclasses.replace(decisions[name], op_type=op_type)   # fuse's record stays as it was
            continue
        successors = [decisions[s] for s in origin_of.get(name, []) if s in decisions]
        if successors:
            best = next((d for d in successors if d.placement == "accelerator"), successors[0])
            reason = f"legalized into {best.node}: {best.reason}"
            on_cpu = [d for d in successors if d.placement == "cpu"]
            if best.placement == "accelerator" and on_cpu:     # say so when only part of it is offloaded
                reason += (f"; partly on the CPU: {len(on_cpu)} of its {len(successors)} legalized nodes "
                           f"({on_cpu[0].node}: {on_cpu[0].reason})")
            out.record(name, op_type, placement=best.placement, mrvl_node=best.mrvl_node,
                       composite=best.composite, reason=reason)
        else:
            out.record(name, op_type, placement="removed", reason="removed by legalization (no effect at inference)")
    return out


def original_names(model: onnx.ModelProto):
    """(name, op_type) of every node, naming unnamed ones as legalization does."""
    out = []
    for i, n in enumerate(model.graph.node):
        out.append((n.name or f"{n.op_type}_{i}", n.op_type))
    return out
