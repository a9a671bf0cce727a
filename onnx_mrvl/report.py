"""What ``convert()`` tells the user: for every original node where it runs and why, per region
its layers and MACs, per dropped group the reason, per cut between regions why it is there
(``cuts.py``), and the fraction of MACs offloaded."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List

from .cuts import cuts_text
from .decisions import Decision, Decisions


@dataclass
class Report:
    decisions: Decisions
    regions: List[dict] = field(default_factory=list)
    dropped: List[dict] = field(default_factory=list)
    macs_total: int = 0
    macs_offloaded: int = 0
    partition: str = "max"
    warnings: List[str] = field(default_factory=list)
    provenance: Dict[str, Any] = field(default_factory=dict)   # stamp.py: source, options, target, converter
    cuts: List[dict] = field(default_factory=list)        # cuts.find_cuts on the deployable model
    options: dict = field(default_factory=dict)           # the user's exclude / cut_after
    quantization: dict = field(default_factory=dict)      # quantize/: mode, calibration, per-layer precision
    layers: List[dict] = field(default_factory=list)      # every emitted layer: region, layer, op, precision, origin
    transforms: List[dict] = field(default_factory=list)  # CPU nodes the conversion added at region boundaries
    bodies: List[dict] = field(default_factory=list)      # per converted If/Loop/Scan body: its CPU nodes (bodies.py)
    restored: List[dict] = field(default_factory=list)    # legalize rewrites put back on the CPU (split/restore.py)

    def __getitem__(self, node: str) -> Decision:
        return self.decisions[node]

    def __iter__(self):
        return iter(self.decisions.values())

    def __len__(self):
        return len(self.decisions)

    @property
    def offload_fraction(self) -> float:
        return self.macs_offloaded / self.macs_total if self.macs_total else 0.0

    def cpu_nodes(self) -> List[Decision]:
        """Original nodes on the CPU and the CPU nodes the conversion created from offloaded ones
        (``origin`` set); the layout / batch transforms it added are ``transforms``."""
        return self.decisions.by_placement("cpu")

    def to_dict(self) -> dict:
        return {"partition": self.partition, "macs_total": self.macs_total, "macs_offloaded": self.macs_offloaded,
                "offload_fraction": round(self.offload_fraction, 6), "regions": self.regions,
                "dropped": self.dropped, "warnings": self.warnings, "provenance": self.provenance,
                "options": self.options, "cuts": self.cuts,
                "nodes": self.decisions.to_list(), "transforms": self.transforms, "layers": self.layers, **({"quantization": self.quantization} if self.quantization else {}),
                **({"bodies": self.bodies} if self.bodies else {}),
                **({"restored": self.restored} if self.restored else {})}

    def explain(self) -> str:
        """Every original node, grouped: accelerator nodes by region, CPU nodes by reason."""
        made = [d for d in self.decisions.values() if d.origin is not None]
        made_n = sum(len(d.runs_as or ()) for d in made)
        lines = [f"{len(self.decisions) - len(made)} nodes: "
                 f"{len(self.decisions.by_placement('accelerator'))} on the accelerator, "
                 f"{len(self.cpu_nodes()) - len(made)} on the CPU"
                 f"{f', {made_n} CPU node(s) created by the conversion from them' if made else ''}"
                 f"{f' (+{len(self.transforms)} boundary transforms)' if self.transforms else ''}; "
                 f"{100 * self.offload_fraction:.1f}% of {self.macs_total:,} MACs offloaded"]
        by_region: Dict[str, List[Decision]] = {}
        for d in self.decisions.by_placement("accelerator"):
            by_region.setdefault(d.subgraph or "(fused, no region)", []).append(d)
        for region, ds in by_region.items():
            lines.append(f"\naccelerator: {region} ({len(ds)} nodes)")
            for d in ds:
                lines.append(f"  {d.node:<32} {d.op_type:<20} -> {d.layer or d.mrvl_node or '-'}"
                             f"{' ' + d.precision if d.precision else ''}  [{d.composite or d.reason}]")
        reasons = self.decisions.reasons()
        for reason, names in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"\ncpu: {reason} ({len(names)} nodes)")
            for n in names:
                d = self.decisions[n]
                runs = (f"  (runs as {', '.join(d.runs_as[:4])}{', ...' if len(d.runs_as) > 4 else ''})"
                        if d.runs_as else "")
                came = f"  (from {', '.join(d.origin[:4])}{', ...' if len(d.origin) > 4 else ''})" if d.origin else ""
                lines.append(f"  {d.node:<32} {d.op_type}{came}{runs}")
        if self.transforms:
            lines.append(f"\ncpu: added by the conversion at region boundaries ({len(self.transforms)} nodes)")
            for t in self.transforms:
                lines.append(f"  {t['node']:<32} {t['op_type']:<20} {t['reason']}")
        removed = self.decisions.by_placement("removed")
        if removed:
            lines.append(f"\nremoved: no effect at inference ({len(removed)} nodes)")
            for d in removed:
                lines.append(f"  {d.node:<32} {d.op_type}")
        if self.quantization.get("layers"):
            q = self.quantization
            lines.append(f"\nquantization: {q['mode']} ({q['method']}, {q['samples']} calibration samples): "
                         f"{q['int8_layers']} of {q['layers_total']} layers int8")
            for r in q["layers"]:
                lines.append(f"  {r['layer']:<32} {r['op_type']:<20} {r['precision']:<5} {r['reason']}")
        for d in self.dropped:
            lines.append(f"\nkept on the CPU by the partitioner: {d['reason']} ({', '.join(d['origin'][:8])}"
                         f"{', ...' if len(d['origin']) > 8 else ''})")
        for b in self.bodies:   # converted If / Loop / Scan bodies: what of them stays on the CPU
            cpu = b["nodes"] + b["transforms"]
            if cpu:
                lines.append(f"\ncpu: inside body {b['body']} ({len(cpu)} nodes)")
                lines.extend(f"  {d['node']:<32} {d['op_type']:<20} {d.get('reason', '')}" for d in cpu)
        lines.extend(cuts_text(self.cuts))
        return "\n".join(lines)
