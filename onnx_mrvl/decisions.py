"""Decisions: one record per original node saying where it runs and why."""
from __future__ import annotations

import copy
from dataclasses import dataclass, fields, replace
from typing import Dict, Iterable, List, Optional


@dataclass
class Decision:
    node: str                          # original node name
    op_type: str
    placement: str = "cpu"             # "accelerator" | "cpu" | "removed"
    reason: str = ""                   # why (for cpu/removed), or how it was fused
    mrvl_node: Optional[str] = None    # the fused node it went into
    composite: Optional[str] = None    # composite pattern name
    subgraph: Optional[str] = None     # region name (after split)
    layer: Optional[str] = None        # JSON layer name inside the region (after emit)
    precision: Optional[str] = None    # that layer's arithmetic: "int8", "fp16", "int8 in, fp16 out" or
    #                                    "fp32, int8 out" (a float layer writing int8 codes; accelerator only),
    #                                    read from the emitted layer (report_graph.assign_layers)
    layers: Optional[List[str]] = None   # every layer it went into, when more than ``layer``
    origin: Optional[List[str]] = None   # a node the conversion created (not an original node): the
    #                                      original nodes it came from (provenance)
    runs_as: Optional[List[str]] = None  # on the CPU: the deployable graph's nodes it runs as, when
    #                                      not just itself (legalized into other nodes)

    def to_dict(self) -> dict:
        """The fields that are set, in field order (as ``asdict``, without its deep copy: a report of
        64,000 nodes spent a second in it)."""
        out = {}
        for k in _FIELDS:
            v = getattr(self, k)
            if v is not None and v != "":
                out[k] = copy.deepcopy(v) if isinstance(v, (list, dict)) else v
        return out


_FIELDS = tuple(f.name for f in fields(Decision))


class Decisions(dict):
    """node name -> Decision, in original node order."""

    def record(self, node: str, op_type: str, **fields) -> Decision:
        d = self.get(node)
        if d is None:
            d = self[node] = Decision(node, op_type)
        for k, v in fields.items():
            setattr(d, k, v)
        return d

    def copy(self) -> "Decisions":
        """A copy whose records can change without touching these (stages do not mutate arguments)."""
        out = Decisions()
        for k, d in self.items():
            out[k] = replace(d)
        return out

    def by_placement(self, placement: str) -> List[Decision]:
        return [d for d in self.values() if d.placement == placement]

    def reasons(self) -> Dict[str, List[str]]:
        """CPU reasons -> node names, for ``--explain``."""
        out: Dict[str, List[str]] = {}
        for k, d in self.items():
            if d.placement == "cpu":
                out.setdefault(d.reason or "not supported", []).append(k)
        return out

    def to_list(self) -> List[dict]:
        return [d.to_dict() for d in self.values()]

    def annotate(self, notes: Dict[str, str], refusals: Dict[str, str]) -> None:
        """Prefix what legalization said about a node to its reason: ``notes`` (original node ->
        a rewrite's note, ``{precision}`` filled in: fp16 when offloaded, fp32 on the CPU) and
        ``refusals`` (node -> why a rule that reports its refusals left it, for nodes on the CPU)."""
        for name, note in notes.items():
            d = self.get(name)
            if d is not None and note not in d.reason:
                where = "fp16" if d.placement == "accelerator" else "fp32 on the CPU"
                d.reason = f"{note.replace('{precision}', where)}; {d.reason}" if d.reason else note
        for name, why in refusals.items():
            d = self.get(name)
            if d is not None and d.placement == "cpu" and why not in d.reason:
                d.reason = f"{why}; {d.reason}" if d.reason else why

    def update_many(self, names: Iterable[str], **fields) -> None:
        for n in names:
            if n in self:
                for k, v in fields.items():
                    setattr(self[n], k, v)
