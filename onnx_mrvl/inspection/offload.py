"""What a converted model offloads: regions, layers, simulated cycles, CPU nodes and their reasons.

Sources: a ``convert`` output folder (``model.onnx``, ``report.json`` = ``Report.to_dict()``,
``<region>.bin``) or a bare deployable ``model.onnx`` (then regions and layers come from the
``Subgraph`` nodes and their binaries, CPU MACs are estimated from shapes, and CPU reasons are
unknown). Cycles come from the simulator's static performance model (``costmodel.py``, the same
``PerfReport`` as ``Simulator(binary).perf``).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import onnx

from .. import file_weights
from ..artifact.manifest import check_folder
from ..cuts import cuts_text, find_cuts
from .. import opset_recurrent
from ..errors import ModelError
from ..stamp import read_provenance
from .canonical import explicit_origin, is_region_node, load_model
from .runner import node_attrs, region_binary, region_nodes, region_origin

log = logging.getLogger(__name__)
UNKNOWN_REASON = "runs on the CPU (no report.json beside the model: the converter's reason is unknown)"


@dataclass
class OffloadReport:
    source: str
    model_path: str
    has_report_json: bool
    partition: Optional[str]
    macs_total: int
    macs_offloaded: int
    macs_total_estimated: bool
    regions: List[Dict[str, Any]] = field(default_factory=list)
    cpu_nodes: List[Dict[str, Any]] = field(default_factory=list)
    removed: List[Dict[str, Any]] = field(default_factory=list)
    dropped: List[Dict[str, Any]] = field(default_factory=list)
    decisions: List[Dict[str, Any]] = field(default_factory=list, repr=False)
    provenance: Dict[str, Any] = field(default_factory=dict)   # stamp.py: source, options, target, converter
    cuts: List[Dict[str, Any]] = field(default_factory=list)   # why each cut (cuts.py)
    transforms: List[Dict[str, Any]] = field(default_factory=list)   # CPU nodes added at region boundaries

    @property
    def offload_fraction(self) -> float:
        return self.macs_offloaded / self.macs_total if self.macs_total else 0.0

    @property
    def cycles(self) -> int:
        return sum(r["cycles"] for r in self.regions)

    def reasons(self) -> Dict[str, List[str]]:
        out: Dict[str, List[str]] = {}
        for n in self.cpu_nodes:
            out.setdefault(n["reason"], []).append(n["node"])
        return out

    def to_dict(self) -> Dict[str, Any]:
        return {"source": self.source, "model": self.model_path, "report_json": self.has_report_json,
                "partition": self.partition, "macs_total": self.macs_total, "macs_offloaded": self.macs_offloaded,
                "macs_total_estimated": self.macs_total_estimated,
                "offload_fraction": round(self.offload_fraction, 6),
                "summary": {"regions": len(self.regions), "layers": sum(r["layers"] for r in self.regions),
                            "cycles": self.cycles, "latency_s": sum(r["latency_s"] for r in self.regions),
                            "cpu_nodes": len(self.cpu_nodes), "removed_nodes": len(self.removed)},
                "regions": self.regions, "cpu_nodes": self.cpu_nodes,
                "reasons": {k: len(v) for k, v in self.reasons().items()},
                "removed": self.removed, "dropped": self.dropped, "provenance": self.provenance,
                "cuts": self.cuts, "transforms": self.transforms}

    def to_text(self, layers: bool = True) -> str:
        est = " (total estimated from shapes)" if self.macs_total_estimated else ""
        out = [f"report {self.source}: {len(self.regions)} region(s), "
               f"{sum(r['layers'] for r in self.regions)} layers, {len(self.cpu_nodes)} CPU node(s)",
               f"MACs offloaded: {self.macs_offloaded:,} of {self.macs_total:,} = "
               f"{100 * self.offload_fraction:.1f}%{est}",
               f"simulated: {self.cycles:,} cycles over all regions"]
        src, conv = self.provenance.get("source") or {}, self.provenance.get("converter") or {}
        if src:
            out.append(f"converted from {src.get('path') or 'a ModelProto'} "
                       f"(sha256 {str(src.get('sha256'))[:16]}...) by {conv.get('name', '?')} {conv.get('version', '?')}")
        for r in self.regions:
            out.append(f"\nregion {r['name']}: {r['layers']} layers, {r['macs']:,} MACs, {r['cycles']:,} cycles "
                       f"({r['latency_s'] * 1e6:.1f} us), utilization {100 * r['utilization']:.1f}%, "
                       f"inputs {', '.join(r['inputs'])} -> outputs {', '.join(r['outputs'])}")
            if layers:
                out.append(f"  {'#':>3}  {'layer':<24} {'type':<16} {'prec':<5} {'macs':>14} {'cycles':>12}  "
                           f"{'bound':<8} origin")
                for i, row in enumerate(r["layer_rows"]):
                    out.append(f"  {i:>3}  {row['name']:<24} {row['layer_name']:<16} {row.get('precision', '-'):<5} "
                               f"{row['macs']:>14,} {row['cycles']:>12,}  {row['bound']:<8} {','.join(row['origin'])}")
        reasons = self.reasons()
        if reasons:
            out.append("\nCPU nodes by reason:")
            for reason, names in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
                shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
                out.append(f"  {reason} ({len(names)}): {shown}")
        else:
            out.append("\nCPU nodes: none")
        if self.transforms:
            out.append(f"added by the conversion at region boundaries (layout, batch, cast): "
                       f"{len(self.transforms)} CPU node(s): {', '.join(t.get('node', '?') for t in self.transforms[:8])}"
                       f"{', ...' if len(self.transforms) > 8 else ''}")
        if self.removed:
            out.append(f"removed (no effect at inference): {len(self.removed)} node(s)")
        for d in self.dropped:
            out.append(f"kept on the CPU by the partitioner: {d.get('reason')} "
                       f"({', '.join((d.get('origin') or [])[:8])})")
        out.extend(cuts_text(self.cuts))
        return "\n".join(out) + "\n"


def _resolve(path: str) -> Tuple[str, Optional[str]]:
    """(model path, report.json path or None)."""
    if os.path.isdir(path):
        model = os.path.join(path, "model.onnx")
        if not os.path.isfile(model):
            raise ModelError(f"{path!r} holds no model.onnx", hint="pass a `onnx-mrvl convert` output folder "
                                                                  "or a converted model.onnx")
    else:
        model = path
    rep = os.path.join(os.path.dirname(os.path.abspath(model)), "report.json")
    return model, rep if os.path.isfile(rep) else None


def _read_json(path: str) -> Dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {path!r} ({exc})", hint="re-run onnx-mrvl convert") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path!r} is not a convert report (not a JSON object)", hint="re-run onnx-mrvl convert")
    return data


def region_perf(node: onnx.NodeProto, model_dir: Optional[str]) -> Dict[str, Any]:
    """One Subgraph node: its program's summary and per-layer performance rows."""
    from ..artifact import load
    from ..costmodel import perf_report

    data = region_binary(node, model_dir)
    meta = load(data, name=node.name).meta
    perf = perf_report(meta)
    rows = [{k: v for k, v in dataclasses.asdict(lp).items()} for lp in perf.layers]
    tensors = meta.get("tensors") or []
    for row, layer in zip(rows, meta.get("layers") or []):   # the layer's arithmetic: int8 or fp16
        out = tensors[layer["outputs"][0]] if layer.get("outputs") and layer["outputs"][0] < len(tensors) else {}
        int8 = (layer.get("params") or {}).get("precision") == "int8" or out.get("dtype") in ("int8", "uint8")
        row["precision"] = "int8" if int8 else "fp16"   # a data move of int8 codes is int8 too
    attrs = node_attrs(node)
    return {"name": str(attrs.get("region") or node.name), "node": node.name, "op_type": node.op_type,
            "artifact": attrs.get("artifact") or "(embedded)", "sha256": attrs.get("sha256", ""),
            "inputs": list(node.input), "outputs": list(node.output), "origin": region_origin(node),
            "layers": len(rows), "macs": int(perf.macs), "cycles": int(perf.cycles),
            "latency_s": float(perf.latency_s), "utilization": float(perf.utilization),
            "dram_bytes": int(perf.dram_bytes), "layer_rows": rows}


def _shapes(model: onnx.ModelProto) -> Dict[str, List[int]]:
    try:
        inferred = onnx.shape_inference.infer_shapes(file_weights.inline(model), strict_mode=False)
    except Exception:  # noqa: BLE001 - custom ops: fall back to what the model declares
        inferred = model
    out = {}
    g = inferred.graph
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
    for t in g.initializer:
        out[t.name] = list(t.dims)
    return out


def cpu_macs(model: onnx.ModelProto, nodes: List[onnx.NodeProto]) -> int:
    """Multiply-accumulates of Conv / ConvTranspose / Gemm / MatMul / LSTM / GRU / RNN ``nodes``
    from their shapes."""
    shapes = _shapes(model)
    total = 0
    for n in nodes:
        out = shapes.get(n.output[0]) if n.output else None
        if not out:
            continue
        if n.op_type in ("Conv", "ConvTranspose") and len(n.input) > 1 and n.input[1] in shapes:
            w = shapes[n.input[1]]
            total += int(np.prod(out)) * int(np.prod(w[1:]))
        elif n.op_type in ("Gemm", "MatMul") and n.input and n.input[0] in shapes:
            k = shapes[n.input[0]][-1]
            if n.op_type == "Gemm" and node_attrs(n).get("transA", 0):
                k = shapes[n.input[0]][0]
            total += int(np.prod(out)) * int(k)
        elif n.op_type in opset_recurrent.CELLS and len(n.input) > 1:
            total += opset_recurrent.node_macs(n.op_type, shapes.get(n.input[0]), shapes.get(n.input[1]),
                                               int(node_attrs(n).get("layout", 0)))
    return total


def offload_report(path: str) -> OffloadReport:
    """The offload report of a ``convert`` output folder or a converted model file."""
    model_path, rep_path = _resolve(os.fspath(path))
    model_dir = os.path.dirname(os.path.abspath(model_path))
    if os.path.isfile(model_path):   # the files of one conversion (manifest.json), those read here by sha256
        name = os.path.basename(model_path)
        check_folder(model_dir, verify=[name, "report.json", "*.bin"], model=name)
    model = load_model(model_path)
    regions = [region_perf(n, model_dir) for n in region_nodes(model)]
    cpu = [n for n in model.graph.node if not is_region_node(n)]
    macs_offloaded = sum(r["macs"] for r in regions)
    if rep_path is not None:
        rep = _read_json(rep_path)
        decisions = [d for d in rep.get("nodes") or [] if isinstance(d, dict)]
        cpu_rows = [{"node": d.get("node"), "op_type": d.get("op_type"), "reason": d.get("reason") or "-",
                     **({"origin": d["origin"], "runs_as": d.get("runs_as")} if d.get("origin") else {})}
                    for d in decisions if d.get("placement") == "cpu"]
        removed = [{"node": d.get("node"), "op_type": d.get("op_type"), "reason": d.get("reason") or "-"}
                   for d in decisions if d.get("placement") == "removed"]
        report = OffloadReport(os.fspath(path), model_path, True, rep.get("partition"),
                               int(rep.get("macs_total") or 0), int(rep.get("macs_offloaded") or macs_offloaded),
                               False, regions, cpu_rows, removed, list(rep.get("dropped") or []), decisions,
                               read_provenance(model) or dict(rep.get("provenance") or {}))
        report.transforms = [t for t in rep.get("transforms") or [] if isinstance(t, dict)]
        cuts = rep.get("cuts")
        if isinstance(cuts, list):
            report.cuts = [c for c in cuts if isinstance(c, dict)]
        else:                         # a report.json written before cuts were recorded
            opts = rep.get("options") if isinstance(rep.get("options"), dict) else {}
            report.cuts = find_cuts(model, {str(d.get("node")) + (" (on the CPU)" if d.get("origin") is not None else ""): d
                                           for d in decisions},
                                    cut_after=opts.get("cut_after") or (), partition=rep.get("partition"))
    else:
        cpu_rows = [{"node": n.name, "op_type": n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}",
                     "origin": explicit_origin(n) or [n.name], "reason": UNKNOWN_REASON} for n in cpu]
        total = macs_offloaded + cpu_macs(model, cpu)
        report = OffloadReport(os.fspath(path), model_path, False, None, total, macs_offloaded, True,
                               regions, cpu_rows, provenance=read_provenance(model))
        report.cuts = find_cuts(model, None, unknown=UNKNOWN_REASON)
    log.info("report %s: %d regions, %.1f%% MACs offloaded", path, len(regions), 100 * report.offload_fraction)
    return report
