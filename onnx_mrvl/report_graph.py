"""The report read from what the conversion produced, not from what a stage intended.

* :func:`assign_layers`: each offloaded original node's region, layers and precision, from the
  emitted Nodes-JSON layers whose ``origin_nodes`` name it (the precision is the emitted layer's:
  ``precision`` attribute ``int8`` / ``int8_in`` / ``int8_out``, absent: fp16).
* :func:`account_cpu_nodes`: every node of the deployable graph outside the regions is accounted
  for: an original node on the CPU (its record, ``runs_as`` naming its legalized nodes when they
  are not itself), a node a rewrite *created* from original nodes of which some were offloaded (a
  record per original node(s) and reason: ``origin``, ``runs_as`` the created nodes, why they
  stayed on the CPU), or a transform fuse / split added at a region boundary (a layout change, a
  batch chunk, a cast: ``Report.transforms``).
* :func:`check_report`: the invariants, for tests and ``onnx-mrvl`` users who want to verify a
  report: the report's CPU nodes are exactly the deployable graph's non-region nodes (modulo the
  listed transforms), in the top graph and in each converted If / Loop / Scan body (``report.bodies``),
  and each layer's precision in the report is the emitted layer's.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Set

import onnx

from .decisions import Decision, Decisions
from .provenance import get_origin

INT8_OUT = "fp32, int8 out"   # a float layer writing int8 codes (docs/fusion.md, int8 in transformers, rule 2)
PRECISIONS = {"int8": "int8", "int8_in": "int8 in, fp16 out", "int8_out": INT8_OUT, "fp32": "fp32"}
WHERE = {"accelerator": "offloaded", "cpu": "CPU"}
DATA_MOVES = ("layout_transform", "reshape", "squeeze")   # layers that only move data
ONLY_MOVE = DATA_MOVES + ("transpose", "Reshape", "Squeeze", "Flatten", "nn.batch_flatten", "Slice2D", "Concat",
                          "GatherElements")   # ... and those that select or join data
COMPUTE_OPS = ("MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "MatMulInteger", "ConvInteger",
               "QLinearMatMul", "QLinearConv")


def layer_precision(attrs: dict) -> str:
    """The arithmetic of an emitted Nodes-JSON layer, from its ``precision`` attribute."""
    return PRECISIONS.get((attrs.get("precision") or [""])[0], "fp16")


def emitted_layers(subgraphs) -> List[dict]:
    """One row per emitted layer: region, layer, op (``layer_name``), precision, origin."""
    rows = []
    for sg in subgraphs:
        for node in sg.nodes_json["nodes"]:
            if node.get("op") != "tvm_op":
                continue
            a = node["attrs"]
            rows.append({"region": sg.name, "layer": node["name"], "op": (a.get("layer_name") or ["?"])[0],
                         "precision": layer_precision(a), "origin": list((a.get("origin_nodes") or [[]])[0]),
                         "mrvl_node": (a.get("onnx_node_name") or [None])[0]})
    return rows


def assign_layers(decisions: Decisions, subgraphs) -> List[dict]:
    """Set ``subgraph``, ``layer`` (the node's layer: the one emitted from the Mrvl node fuse put
    it in, else its first layer that does more than move data, else its first), ``layers`` and
    ``precision`` (that layer's) of every original node an emitted layer names; returns
    :func:`emitted_layers`."""
    rows = emitted_layers(subgraphs)
    of: Dict[str, List[dict]] = {}
    for r in rows:
        for name in r["origin"]:
            of.setdefault(name, []).append(r)
    for name, rs in of.items():
        d = decisions.get(name)
        if d is None:
            continue
        own = [r for r in rs if d.mrvl_node and r["mrvl_node"] == d.mrvl_node] or rs
        main = next((r for r in own if r["op"] not in DATA_MOVES), None)
        if main is None and d.op_type in COMPUTE_OPS:   # a MatMul rewritten into per-head FCs behind a
            # Reshape (its own Mrvl node): reported with its first layer that computes
            main = next((r for r in rs if r["op"] not in ONLY_MOVE), None)
        main = main or own[0]
        d.subgraph, d.layer, d.precision = main["region"], main["layer"], main["precision"]
        d.layers = [r["layer"] for r in rs] if len(rs) > 1 else None
    return rows


def set_layer(decision, row: Optional[dict]) -> None:
    """A node folded into a region node's layout (e.g. a Transpose): that node's layer and precision."""
    if row is not None:
        decision.layer, decision.precision = decision.layer or row["layer"], row["precision"]


def _is_region(node: onnx.NodeProto) -> bool:
    return node.domain == "mrvl" and node.op_type.startswith("Subgraph")


def account_cpu_nodes(model: onnx.ModelProto, decisions: Decisions, legal_names: Set[str],
                      cpu_reasons: Dict[str, str]) -> List[dict]:
    """Account for every top-level non-region node of the deployable ``model`` (see the module
    docstring); ``legal_names``: the legalized graph's node names (a node not among them and not
    an original was added by fuse / split: a transform); ``cpu_reasons``: legalized node name ->
    why fuse / split left it on the CPU. Adds records to ``decisions``; returns the transforms."""
    transforms: List[dict] = []
    created: Dict[str, List[str]] = {}    # offloaded original -> created CPU nodes
    groups: Dict[tuple, List[onnx.NodeProto]] = {}   # (origin, why) -> created CPU nodes
    for n in model.graph.node:
        if _is_region(n):
            continue
        own = decisions.get(n.name)
        if own is not None and own.origin is None and own.placement == "cpu":
            own.runs_as = (own.runs_as or []) + [n.name]  # an original node on the CPU (by its own name)
            continue
        origin = [o for o in get_origin(n) if o != n.name or o in decisions] or [n.name]
        on_cpu = [o for o in origin if o in decisions and decisions[o].placement == "cpu"
                  and decisions[o].origin is None]
        if n.name not in legal_names and own is None and n.op_type in TRANSFORMS:   # added by fuse / split
            transforms.append({"node": n.name, "op_type": n.op_type, "origin": origin,
                               "reason": _transform_reason(n, origin)})
            continue
        if on_cpu and len(on_cpu) == len([o for o in origin if o in decisions]):
            for o in on_cpu:                             # a legalized piece of CPU originals
                d = decisions[o]
                d.runs_as = (d.runs_as or []) + [n.name]
            continue
        why = cpu_reasons.get(n.name) or "no accelerator op took it"
        groups.setdefault((tuple(origin), why), []).append(n)
    for (origin, why), nodes in groups.items():   # one record per original node(s) and reason
        named = [o for o in origin if o in decisions]
        kinds = sorted({WHERE.get(decisions[o].placement, decisions[o].placement) for o in named}) or ["no original"]
        key = f"{origin[0]} (on the CPU)"
        while key in decisions:
            key += "'"
        decisions[key] = Decision(origin[0], "/".join(dict.fromkeys(n.op_type for n in nodes)), placement="cpu",
                                  origin=list(origin), runs_as=[n.name for n in nodes],
                                  reason=f"created by the conversion from {' / '.join(kinds)} node(s); on the CPU: {why}")
        for o in named:
            if decisions[o].placement != "cpu":
                created.setdefault(o, []).extend(n.name for n in nodes)
    for o, names in created.items():
        d = decisions[o]
        if "partly on the CPU" in d.reason:   # legalization's record already says so (placement_records.with_removed)
            continue
        note = (f"partly on the CPU: {len(names)} node(s) created from it ({', '.join(names[:4])}"
                f"{', ...' if len(names) > 4 else ''})")
        d.reason = f"{d.reason}; {note}" if d.reason else note
    for d in decisions.values():   # runs_as only when it says more than the node's own name
        if d.runs_as == [d.node] and d.origin is None:
            d.runs_as = None
    return transforms


TRANSFORMS = {"Transpose": "layout change", "Reshape": "layout change (unit axes)", "Identity": "graph output copy",
              "Cast": "type cast", "Split": "batch chunking", "Concat": "batch chunking", "Slice": "batch chunking",
              "Pad": "batch chunking"}   # what fuse (materialize, recurrent) and split (revert, batch_chunks) add


def _transform_reason(n: onnx.NodeProto, origin: List[str]) -> str:
    what = TRANSFORMS[n.op_type]
    return f"added by the conversion at a region boundary: {what} for {', '.join(origin[:3])}" \
           f"{', ...' if len(origin) > 3 else ''}"


def check_report(report, model: onnx.ModelProto, subgraphs: Iterable = ()) -> List[str]:
    """What is wrong with ``report`` as a description of ``model`` (the deployable graph) and
    ``subgraphs`` (its emitted regions): [] when every non-region node is a CPU node of the report
    (by name or ``runs_as``) or a listed transform and no CPU node of the report is missing from
    the graph -- in the top graph and, through ``report.bodies``, in every converted If / Loop / Scan
    body --, and when every layer the report names has the emitted layer's precision. Exempt: a body
    kept as it was (no accelerator region in it) runs whole on the CPU, as its control-flow node's
    record says; its nodes are not listed one by one."""
    problems: List[str] = []
    cpu = [d.to_dict() for d in report.cpu_nodes()]
    problems += _unlisted(model.graph, cpu, report.transforms, "")
    records = {tuple(r["path"]): r for r in getattr(report, "bodies", ())}
    for path, body in _bodies(model.graph, ()):
        rec = records.pop(path, None)
        if rec is not None:
            problems += _unlisted(body, rec["nodes"], rec["transforms"], f" of body {rec['body']}")
        elif any(_is_region(n) for n in body.node):
            problems.append(f"body {'.'.join(path)} has accelerator regions but the report has no record of it")
    for path, rec in records.items():
        problems.append(f"the report's body {rec['body']} ({'.'.join(path)}) is not in the model")
    layers = {r["layer"]: r for r in emitted_layers(subgraphs)}
    for d in report:
        if d.placement == "accelerator" and d.layer in layers and d.precision != layers[d.layer]["precision"]:
            problems.append(f"{d.node}: report says {d.precision}, layer {d.layer} is {layers[d.layer]['precision']}")
    for r in report.layers:
        if r["layer"] in layers and r["precision"] != layers[r["layer"]]["precision"]:
            problems.append(f"layer {r['layer']}: report says {r['precision']}, emitted {layers[r['layer']]['precision']}")
    return problems


def _unlisted(graph: onnx.GraphProto, cpu: List[dict], transforms: List[dict], where: str) -> List[str]:
    """``graph``'s non-region nodes (not those of its bodies) against CPU node records ``cpu`` (dicts
    as ``report.nodes``) and ``transforms``."""
    problems = []
    nodes = {n.name for n in graph.node if not _is_region(n)}
    reported: Set[str] = {t["node"] for t in transforms}
    for d in cpu:
        names = d.get("runs_as") or [d["node"]]
        if d.get("origin") is not None and not set(names) <= nodes:
            problems.append(f"created CPU node(s) {sorted(set(names) - nodes)} of {d['node']}{where} are not in the graph")
        reported.update(x for x in names if x in nodes)
    for name in sorted(nodes - reported):
        problems.append(f"graph node {name}{where} runs on the CPU but the report does not list it")
    return problems


def _bodies(graph: onnx.GraphProto, path: tuple):
    """(path, body graph) of every If / Loop / Scan body below ``graph``, nested ones too; ``path`` is
    (node, attribute, ...) from the top graph."""
    for n in graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                here = path + (n.name, a.name)
                yield here, a.g
                yield from _bodies(a.g, here)


def reconcile_quantization(decisions: Decisions, info: dict) -> None:
    """``report.quantization["layers"]`` says what was emitted: a layer the policy made int8 (or
    kept fp16) whose node ended with another precision, on the CPU or removed gets that precision
    (or placement), the policy's choice under ``planned`` and the reason; ``int8_layers`` counts
    the layers emitted as int8."""
    for r in info.get("layers", []):
        d = decisions.get(r.get("layer"))
        if d is None:
            continue
        now = d.precision if d.placement == "accelerator" else d.placement
        if now and now != r.get("precision"):
            r["planned"] = r.get("precision")
            where = f"layer {d.layer}" if d.placement == "accelerator" else d.reason
            r["reason"] = f"{r.get('reason')}; planned {r['planned']}, emitted {now} ({where})"
            r["precision"] = now
    if "int8_layers" in info:
        info["int8_layers"] = sum(1 for r in info.get("layers", []) if r.get("precision") == "int8")
