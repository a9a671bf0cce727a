"""Control-flow bodies (If branches, Loop / Scan bodies) converted through the same stages.

After the outer graph is converted, each body with static shapes becomes a standalone model: its
formal inputs (Loop: iteration number, condition, carried values) plus the outer values it reads
(outer initializers are copied in as initializers, so its convs have constant weights; other outer
values become inputs typed from the legalized outer graph). That model goes through legalize -> fuse
-> split -> emit/compile like any other; its deployable graph replaces the body, with the formal inputs
and the declared outputs of the original body, outer values read by name again, and the copied outer
initializers dropped (the outer scope still holds them). Region names get the node and attribute as a
prefix (``If_0.then_branch.mrvl_region_0``, sanitized), so artifacts never clash; names the new body
defines that the outer scope also defines are renamed inside the body (a body may not shadow them).

A body is kept as it was, with the reason in the report, when a shape is not static, when nothing in it
runs on the accelerator, or when its conversion fails.
"""
from __future__ import annotations

import logging
import re
from typing import Callable, Dict, List, Set, Tuple

import onnx
from onnx import helper

from . import opset
from .errors import UsageError
from .graph_index import subgraph_reads
from .split.deploy import is_subgraph

log = logging.getLogger(__name__)


def _bodies(node: onnx.NodeProto):
    return [(a.name, a) for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]


def _scope(model: onnx.ModelProto):
    """(value infos by name, initializers by name) of a legalized graph."""
    g = model.graph
    types = {vi.name: vi for vi in list(g.input) + list(g.value_info) + list(g.output)}
    return types, {t.name: t for t in g.initializer}


def _names(graph: onnx.GraphProto) -> Set[str]:
    out = {vi.name for vi in list(graph.input) + list(graph.value_info) + list(graph.output)}
    out |= {t.name for t in graph.initializer}
    out |= {o for n in graph.node for o in n.output if o}
    return out


def _rename(graph: onnx.GraphProto, mapping: Dict[str, str]) -> None:
    """Rename tensors in ``graph`` and in the bodies nested in it."""
    for n in graph.node:
        for seq in (n.input, n.output):
            for i, t in enumerate(seq):
                if t in mapping:
                    seq[i] = mapping[t]
        for _, a in _bodies(n):
            _rename(a.g, mapping)
    for vi in list(graph.value_info) + list(graph.output):
        if vi.name in mapping:
            vi.name = mapping[vi.name]
    for t in graph.initializer:
        if t.name in mapping:
            t.name = mapping[t.name]


def _standalone(body: onnx.GraphProto, types, inits, model: onnx.ModelProto) -> Tuple[onnx.ModelProto, List[str]]:
    defined = {i.name for i in body.input} | {t.name for t in body.initializer} | \
        {o for n in body.node for o in n.output if o}
    direct = [i for n in body.node for i in n.input if i and i not in defined]
    nested = [t for t in sorted(subgraph_reads(body.node)) if t not in defined]
    inputs, copied = list(body.input), []
    g_inits = list(body.initializer)
    for t in dict.fromkeys(direct + nested):
        if t in inits:
            g_inits.append(inits[t])
            copied.append(t)
        elif t in types and types[t].type.HasField("tensor_type"):
            inputs.append(types[t])
        elif t in direct:
            raise ValueError(f"outer value '{t}' has no static type")
        # else: a value defined inside a nested body
    graph = helper.make_graph(list(body.node), body.name or "body", inputs, list(body.output), g_inits,
                              value_info=list(body.value_info))
    m = helper.make_model(graph, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    m.functions.extend(model.functions)
    return m, copied


def _prefix(node: onnx.NodeProto, attr_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{node.name}.{attr_name}")


def all_nodes(graph: onnx.GraphProto):
    """The nodes of ``graph`` and of the bodies nested in it."""
    for n in graph.node:
        yield n
        for _, a in _bodies(n):
            yield from all_nodes(a.g)


def _adopt(result, body: onnx.GraphProto, prefix: str, copied: List[str], outer: Set[str], embed: bool
           ) -> onnx.GraphProto:
    """The converted body's graph made a body again: regions renamed with ``prefix``, the original
    formal inputs and outputs, copied outer initializers dropped, shadowing names renamed."""
    new = onnx.GraphProto()
    new.CopyFrom(result.model.graph)
    nodes = list(all_nodes(new))    # a nested body's Subgraph nodes too (an If inside a branch)
    for sg in result.subgraphs:
        name = f"{prefix}.{sg.name}"
        for n in nodes:
            if is_subgraph(n) and any(x.name == "region" and x.s.decode() == sg.name for x in n.attribute):
                n.name = f"{prefix}.{n.name}"
                for x in n.attribute:
                    if x.name == "region":
                        x.s = name.encode()
                    elif x.name == "artifact" and not embed:
                        x.s = f"{name}.bin".encode()
        sg.name = name
    keep_inits = [t for t in new.initializer if t.name not in copied]
    del new.initializer[:]
    new.initializer.extend(keep_inits)
    del new.input[:]
    new.input.extend(body.input)
    del new.output[:]
    new.output.extend(body.output)
    mine = _names(new) - {i.name for i in body.input} - {o.name for o in body.output} - set(copied)
    clash = sorted(t for t in mine if t in outer)
    if clash:
        _rename(new, {t: f"{t}__{prefix}" for t in clash})
    new.name = body.name
    return new


def convert_bodies(deployable: onnx.ModelProto, legal: onnx.ModelProto,
                   convert_fn: Callable[[onnx.ModelProto], object], embed: bool):
    """Convert the bodies of the control-flow nodes of ``deployable`` in place. Returns (subgraphs,
    region summaries, {node name: note for its decision}, [MACs, offloaded MACs] of the bodies, one
    record per converted body (nested ones too): its CPU nodes and transforms, ``report.bodies``)."""
    types, inits = _scope(legal)
    outer = _names(deployable.graph)
    subgraphs, regions, notes, records = [], [], {}, []
    macs = [0, 0]     # total, offloaded over the converted bodies (every branch counted)
    for node in deployable.graph.node:
        for attr_name, a in _bodies(node):
            prefix = _prefix(node, attr_name)
            try:
                standalone, copied = _standalone(a.g, types, inits, deployable)
                result = convert_fn(standalone)
            except UsageError:            # the pinned input shapes do not fit the body (shape_fit.py)
                raise
            except Exception as exc:      # noqa: BLE001 - a body we cannot convert runs as it was
                log.info("body %s stays on the CPU (%s: %s)", prefix, type(exc).__name__, exc)
                notes.setdefault(node.name, []).append(f"{attr_name} on the CPU ({type(exc).__name__}: {exc})")
                continue
            if not result.subgraphs:
                notes.setdefault(node.name, []).append(f"{attr_name} on the CPU (nothing in it runs on the accelerator)")
                continue
            try:
                new = _adopt(result, a.g, prefix, copied, outer, embed)
            except Exception as exc:      # noqa: BLE001 - as above: the body runs as it was
                log.warning("body %s stays on the CPU (%s: %s)", prefix, type(exc).__name__, exc)
                notes.setdefault(node.name, []).append(f"{attr_name} on the CPU ({type(exc).__name__}: {exc})")
                continue
            old_funcs = {(f.domain, f.name, f.overload) for f in deployable.functions}
            deployable.functions.extend(f for f in result.model.functions
                                        if (f.domain, f.name, f.overload) not in old_funcs)
            a.g.CopyFrom(new)
            subgraphs.extend(result.subgraphs)
            macs[0] += result.report.macs_total
            macs[1] += result.report.macs_offloaded
            for r in result.report.regions:
                regions.append(dict(r, name=f"{prefix}.{r['name']}", body=prefix))
            records.append(body_record(prefix, [node.name, attr_name], result.report))
            records.extend(dict(r, body=f"{prefix}.{r['body']}", path=[node.name, attr_name] + r["path"])
                           for r in result.report.bodies)
            on = [d.node for d in result.report.decisions.values() if d.placement == "accelerator"]
            notes.setdefault(node.name, []).append(
                f"{attr_name}: {len(result.subgraphs)} regions ({', '.join(on[:6])}{', ...' if len(on) > 6 else ''})")
    if subgraphs:   # outer weights only the converted bodies read are in their binaries now
        g = deployable.graph
        used = {i for n in g.node for i in n.input} | subgraph_reads(g.node) | {o.name for o in g.output}
        keep = [t for t in g.initializer if t.name in used]
        if len(keep) != len(g.initializer):
            del g.initializer[:]
            g.initializer.extend(keep)
    if subgraphs and not any(o.domain == opset.DOMAIN for o in deployable.opset_import):
        deployable.opset_import.append(helper.make_opsetid(opset.DOMAIN, opset.DOMAIN_VERSION))
    return subgraphs, regions, notes, macs, records


def body_record(prefix: str, path: List[str], report) -> dict:
    """What runs on the CPU inside a converted body: ``path`` (control-flow node, attribute, ... from
    the top graph), its CPU node records (as ``report.nodes``) and the transforms its conversion added."""
    return {"body": prefix, "path": list(path), "nodes": [d.to_dict() for d in report.cpu_nodes()],
            "transforms": list(report.transforms)}
