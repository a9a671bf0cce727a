"""Partitioning: fused model -> deployable model (CPU nodes + one ``Subgraph`` node per region).

``split(fused, ...)`` groups Mrvl nodes into regions whose collapse keeps the graph acyclic
(regions.py), keeps them by the chosen strategy ("max", "single", "cost"; cost.py), reverts Mrvl
nodes left outside every region to standard ONNX (revert.py), puts legalize's restorable rewrites
that ended wholly on the CPU back as the original nodes (restore.py), and cuts each region out as a
standalone ONNX model (``Region.model``) for the emit stage. The ``Subgraph`` nodes get their
artifact attributes later, from ``deploy.attach_artifact``. Returns a ``SplitResult`` (the stage
contract, onnx_mrvl/stage.py): ``decisions`` is a copy of the ``decisions=`` handed in, updated with
each node's region (the argument is not modified); ``log`` one ``("region", origin, name)`` per region
and one ``("dropped", origin, reason)`` per group kept on the CPU (and one ``("restored", origin,
reason)`` per restored group). See docs/partition.md.
"""
from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional

import numpy as np
import onnx

from .. import opset_recurrent
from ..graph_index import GraphIndex, extend_copies, subgraph_reads, topological_order
from ..decisions import Decisions
from ..errors import UnsupportedError
from ..provenance import get_origin
from ..stage import StageResult, as_model
from ..target import Target, get_target
from . import batch_chunks
from . import cost as cost_model
from .deploy import region_model, region_model_taken, subgraph_node
from .merge import merge_independent
from .regions import boundary, find_regions, is_mrvl
from .restore import restore as restore_originals
from .revert import revert

log = logging.getLogger(__name__)
STRATEGIES = ("max", "single", "cost")
RECURRENT_OPS = set(opset_recurrent.CELLS)
COMPUTE_OPS = {"Conv2D", "FC", "BatchMatMul"} | RECURRENT_OPS   # MAC-array work (the minimum-work rule)
TAKE_SHARE = 0.9   # split(consume=True): a region with this share of the weight bytes takes the model


@dataclass
class Region:
    name: str
    nodes: List[str]                   # Mrvl node names, in topological order
    inputs: List[str]
    outputs: List[str]
    origin: List[str]
    macs: int
    model: Optional[onnx.ModelProto] = None
    estimate: Dict[str, float] = field(default_factory=dict)
    batches: Optional[tuple] = None    # (calls, chunk batch) when the batch exceeds max_batch
    arrays: Optional[Dict[str, np.ndarray]] = field(default=None, repr=False)   # emit's (compile_regions.py)

    def summary(self) -> dict:
        return {"name": self.name, "layers": len(self.nodes), "inputs": self.inputs, "outputs": self.outputs,
                "macs": self.macs, "origin": self.origin, **({"estimate": self.estimate} if self.estimate else {}),
                **({"hardware_batches": {"calls": self.batches[0], "batch": self.batches[1]}} if self.batches else {})}


@dataclass
class SplitResult(StageResult):
    regions: List[Region] = field(default_factory=list)
    dropped: List[dict] = field(default_factory=list)   # {"nodes": [...], "origin": [...], "reason": ...}
    macs_total: int = 0
    macs_offloaded: int = 0
    restored: List[dict] = field(default_factory=list)   # {"rules", "origin", "replaced"} (restore.py)

    @property
    def offload_fraction(self) -> float:
        return self.macs_offloaded / self.macs_total if self.macs_total else 0.0


def _matches(node: onnx.NodeProto, names: set) -> bool:
    """Node name, op type or (except for layout changes, which borrow their consumer's) original names."""
    if node.name in names or node.op_type in names:
        return True
    return node.op_type != "LayoutTransform" and any(o in names for o in get_origin(node))


def region_origin(nodes: Iterable[onnx.NodeProto]) -> List[str]:
    """Original node names of a region's nodes, each once, in order. Layout changes are left out:
    they borrow their consumer's names, which may be CPU nodes."""
    seen: Dict[str, None] = {}
    for n in nodes:
        if n.op_type != "LayoutTransform":
            for o in get_origin(n):
                seen.setdefault(o, None)
    return list(seen)


def node_macs(g: GraphIndex, node: onnx.NodeProto) -> int:
    """Multiply-accumulates of a Conv/ConvTranspose/Gemm/MatMul/LSTM/GRU/RNN, standard or Mrvl (0 for other ops)."""
    if node.op_type in RECURRENT_OPS:   # Mrvl recurrent nodes are layout 0 (opset_recurrent.py)
        layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
        return opset_recurrent.node_macs(node.op_type, g.shape(node.input[0]), g.shape(node.input[1]), layout)
    if node.op_type not in COMPUTE_OPS | {"Conv", "ConvTranspose", "Gemm", "MatMul"} or len(node.input) < 2:
        return 0
    out = g.shape(node.output[0])
    w = g.shape(node.input[1])
    if out is None or w is None or not out:
        return 0
    if node.op_type == "ConvTranspose":     # every input element meets Cout/g * kh * kw weights
        x = g.shape(node.input[0])
        return int(np.prod(x, dtype=np.int64)) * int(np.prod(w[1:], dtype=np.int64)) if x else 0
    if node.op_type in ("Conv", "Conv2D"):
        per_out = int(np.prod(w[1:], dtype=np.int64))
    elif node.op_type == "Gemm" and not any(a.name == "transB" and a.i for a in node.attribute):
        per_out = w[0]
    else:
        per_out = w[-1] if node.op_type == "FC" or node.op_type == "Gemm" else w[-2] if len(w) >= 2 else w[0]
    if node.op_type == "BatchMatMul":      # K: A's innermost stored axis (whatever B's storage)
        per_out = (g.shape(node.input[0]) or [0])[-1]
    return int(np.prod(out, dtype=np.int64)) * int(per_out)


def split(fused: onnx.ModelProto, target: Optional[Target] = None, *, partition: str = "max",
          exclude: Iterable[str] = (), cut_after: Iterable[str] = (), force: bool = False,
          reference: bool = False, decisions: Optional[Decisions] = None, consume: bool = False,
          restore=None) -> SplitResult:
    """Cut accelerator regions out of a fused model. See the module docstring.

    ``restore``: legalize's record of its rewrites (``LegalizeReport.restore``): the groups whose
    products all stay on the CPU get their original nodes back (restore.py).

    ``consume=True``: the caller gives ``fused`` up (reads nothing of it afterwards): a region holding
    nearly all its weights is then made out of it in place (``deploy.region_model_taken``), not copied."""
    if partition not in STRATEGIES:
        raise UnsupportedError(f"unknown partition strategy {partition!r}",
                               hint=f"use one of {', '.join(STRATEGIES)}")
    if decisions is None and isinstance(fused, StageResult):
        decisions = fused.decisions
    fused = as_model(fused, "split")
    target = get_target(target)
    g = GraphIndex(fused)
    order = topological_order(g.nodes, g.inputs)
    excluded = set(exclude or ())
    accel = {n.name for n in order if is_mrvl(n) and not _matches(n, excluded)}
    cut_names = {n.name for n in order if _matches(n, set(cut_after or ()))}
    assign = find_regions(g, order, accel, cut_names, single=(partition == "single"))
    members: Dict[int, List[onnx.NodeProto]] = {}
    for n in order:
        if n.name in assign:
            members.setdefault(assign[n.name], []).append(n)
    dropped: List[dict] = []
    by_reason: Dict[str, List[onnx.NodeProto]] = {}
    for n in order:
        if is_mrvl(n) and n.name not in assign:
            why = ("excluded by the user (exclude=...)" if _matches(n, excluded) else
                   "outside the single region fed by the model inputs (partition='single')")
            by_reason.setdefault(why, []).append(n)
    for why, nodes in by_reason.items():
        dropped.append({"nodes": [n.name for n in nodes], "origin": region_origin(nodes), "reason": why,
                        "macs": sum(node_macs(g, n) for n in nodes)})
    kept: List[List[onnx.NodeProto]] = []
    estimates: List[dict] = []
    for rid in sorted(members):  # ids were handed out in topological order
        nodes = members[rid]
        reason, est = None, None
        if all(n.op_type == "LayoutTransform" for n in nodes):
            reason = "only layout changes between CPU nodes (reverted to a Transpose or cancelled)"
        elif not force and not any(n.op_type in COMPUTE_OPS for n in nodes):
            reason = "no conv2d, fc or batch matmul in the region (minimum-work rule; force=True keeps it)"
        elif partition == "cost":
            est = cost_model.estimate(g, nodes, target)
            if not est["offload"]:
                reason = cost_model.describe(est)
        if reason:
            entry = {"nodes": [n.name for n in nodes], "origin": region_origin(nodes),
                     "reason": reason, "macs": sum(node_macs(g, n) for n in nodes)}
            if est is not None:
                entry["estimate"] = est
            dropped.append(entry)
        else:
            kept.append(nodes)
            estimates.append(est)
    if partition != "single" and len(kept) > 1:
        kept, estimates = _merge_kept(g, order, kept, estimates, target)
    macs_total = sum(node_macs(g, n) for n in g.nodes)
    model = fused                      # read only from here on, unless something must be reverted
    to_revert = {name for d in dropped for name in d["nodes"]}
    if to_revert:
        model = copy.deepcopy(fused)
        revert(model, to_revert)
        g = GraphIndex(model)
    take = _region_to_take(g, kept) if (consume or model is not fused) and not reference else None
    regions: List[Region] = []
    for idx, (nodes, est) in enumerate(zip(kept, estimates)):
        # reverting a dropped region tidies layout changes (revert._Cleaner rewires transposes and
        # prunes dead nodes): a LayoutTransform of this region whose readers were all in the reverted
        # region can be dead there and gone; the region is the nodes that remain (any other missing
        # node is still a KeyError: fail closed)
        nodes = [g.by_name[n.name] for n in nodes if n.name in g.by_name or n.op_type != "LayoutTransform"]
        ins, outs = boundary(g, nodes)
        name = f"mrvl_region_{idx}"
        reg = Region(name, [n.name for n in nodes], ins, outs, region_origin(nodes),
                     sum(node_macs(g, n) for n in nodes))
        if est is not None:
            reg.estimate = est
        reg.model = region_model(model, g, nodes, ins, outs, name) if idx != take else (nodes, ins, outs)
        regions.append(reg)
    deployable = _replace_regions(model, g, regions, reference)
    restored = restore_originals(deployable, restore, {o for r in regions for o in r.origin})
    if take is not None:   # last: the model is not read again
        reg = regions[take]
        reg.model = region_model_taken(model, g, *reg.model, reg.name)
    macs_off = sum(r.macs for r in regions)
    if decisions is not None:
        decisions = decisions.copy()
        _update_decisions(decisions, regions, dropped, restored)
    log.info("split (%s): %d regions, %d dropped groups, %.1f%% of MACs offloaded", partition, len(regions),
             len(dropped), 100.0 * macs_off / macs_total if macs_total else 0.0)
    steps = [("region", r.origin, r.name) for r in regions] + [("dropped", d["origin"], d["reason"]) for d in dropped]
    steps += [("restored", r["origin"], restored_reason(r)) for r in restored]
    return SplitResult(deployable, decisions, steps, regions, dropped, macs_total, macs_off, restored)


def _merge_kept(g: GraphIndex, order, kept, estimates, target: Target):
    """Kept regions merged when neither reaches the other (merge.py); a merged region's cost
    estimate is redone on the whole (one call overhead, the transfers of both)."""
    batch = batch_chunks.largest_batch(g.model)

    def fits(nodes):
        ins, outs = boundary(g, nodes)
        if max(len(ins), len(outs)) > target.max_region_io:
            return False
        if batch <= target.max_batch:
            return True
        # hardware batches (batch_chunks.check): a part that cannot be chunked must not drag the
        # other to the CPU with it
        return all((g.shape(t) or [0])[0] == batch for t in ins + outs) and \
            all((g.shape(o) or [0])[0] % batch == 0 for n in nodes for o in n.output if o)
    merged = merge_independent(g, order, kept, fits)
    if len(merged) == len(kept):
        return kept, estimates
    est_of = {nodes[0].name: est for nodes, est in zip(kept, estimates)}
    out_est = []
    for nodes in merged:
        parts = [est_of[n.name] for n in nodes if n.name in est_of]
        if len(parts) == 1:
            out_est.append(parts[0])
        else:
            out_est.append(cost_model.estimate(g, nodes, target) if parts[0] is not None else None)
    return merged, out_est


def _region_to_take(g: GraphIndex, kept: List[List[onnx.NodeProto]]) -> Optional[int]:
    """The index of the region holding at least TAKE_SHARE of the model's weight bytes, else None
    (made out of the model itself, the weights of the others would stay beside it until it is emitted)."""
    size = {name: _nbytes(t) for name, t in g.initializers.items()}
    total = sum(size.values())
    for idx, nodes in enumerate(kept):
        mine = sum(size.get(i, 0) for i in {i for n in nodes for i in n.input})
        if total and mine >= TAKE_SHARE * total:
            return idx
    return None


def _nbytes(t: onnx.TensorProto) -> int:
    n = 1
    for d in t.dims:
        n *= d
    try:
        return n * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except (KeyError, TypeError, ValueError):
        return n


def _replace_regions(model, g: GraphIndex, regions: List[Region], reference: bool) -> onnx.ModelProto:
    member = {n: r for r in regions for n in r.nodes}
    nodes, functions = [], []
    for n in g.nodes:
        r = member.get(n.name)
        if r is None:
            nodes.append(n)
        elif n.name == r.nodes[0]:
            node, func = subgraph_node(r, model, reference)
            nodes.append(node)
            if func is not None:
                functions.append(func)
    # built field by field: copying the whole model and then dropping the region weights would
    # copy every weight twice
    out = onnx.ModelProto()
    _copy_fields(model, out, skip=("graph", "functions"))
    _copy_fields(model.graph, out.graph, skip=("node", "initializer", "value_info"))
    order = topological_order(nodes, g.inputs)
    out.graph.node.extend(order)
    used = {i for n in order for i in n.input} | subgraph_reads(order)
    extend_copies(out.graph.initializer, (t for t in model.graph.initializer if t.name in used))
    produced = {o for n in order for o in n.output}
    out.graph.value_info.extend(vi for vi in model.graph.value_info if vi.name in produced)
    live = {(n.op_type, n.overload) for n in order if n.domain == "mrvl"}
    # Mrvl ops still on the CPU path need their bodies; region ones only for reference runs
    out.functions.extend(f for f in model.functions
                         if f.domain != "mrvl" or reference or (f.name, f.overload) in live)
    out.functions.extend(functions)
    return out


def _copy_fields(src, dst, skip) -> None:
    """Copy every set field of a protobuf message except ``skip``."""
    for fd, value in src.ListFields():
        if fd.name in skip:
            continue
        if hasattr(value, "extend"):
            getattr(dst, fd.name).extend(value)
        elif hasattr(value, "ListFields"):
            getattr(dst, fd.name).CopyFrom(value)
        else:
            setattr(dst, fd.name, value)


def restored_reason(entry: dict) -> str:
    return f"restored: {' + '.join(entry['rules'])} on the CPU, original nodes kept"


def _update_decisions(decisions: Decisions, regions: List[Region], dropped: List[dict],
                      restored: List[dict]) -> None:
    for r in regions:
        decisions.update_many(r.origin, subgraph=r.name)
    for d in dropped:
        for name in d["origin"]:
            if name in decisions and decisions[name].placement == "accelerator":
                decisions[name].placement = "cpu"
                decisions[name].reason = d["reason"]
                decisions[name].subgraph = None
    for r in restored:
        why = restored_reason(r)
        for name in r["origin"]:
            d = decisions.get(name)
            if d is not None:
                d.placement, d.subgraph, d.mrvl_node, d.composite, d.runs_as = "cpu", None, None, None, None
                d.reason = f"{why}; {d.reason}" if d.reason and why not in d.reason else why
