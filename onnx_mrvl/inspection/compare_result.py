"""compare's result: one ``TensorCompare`` row per tensor of the reference, and the
``CompareResult`` holding them with its pass verdict, JSON (``to_dict``) and text (``to_text``)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

from . import qdq_codes, qdq_probes, snr


@dataclass
class TensorCompare:
    """One tensor of A against its counterpart in B."""
    tensor: str                 # name in A (logical)
    a_node: str                 # A's producer
    op_type: str
    b_tensor: str               # name in B, or "<region>/<layer>" for a simulator capture
    b_node: str                 # B's producer (node or layer name)
    source: str                 # "onnxruntime" | "simulator"
    region: str
    origin: List[str]           # original node names behind B's producer
    storage: str                # how B stores it ("logical", "NHWC", ...)
    shape: List[int]
    max_abs: float
    max_rel: float
    cosine: float
    ref_max_abs: float
    passed: bool
    is_output: bool = False
    position: int = 0           # A's topological position of the producer
    nan: int = 0                # NaN / inf values in B's tensor
    inf: int = 0
    ref_nan: int = 0            # ... and in A's
    ref_inf: int = 0
    reason: str = ""            # why it fails ("" when it passes)
    snr_db: Optional[float] = None  # 10 log10(sum ref^2 / sum err^2) (snr.py); inf: identical; None: integers
    codes: Optional[Dict[str, Any]] = None   # QDQ reference: qdq_codes.code_stats against the probe's codes

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["pass"] = d.pop("passed")
        d.update(snr.json_fields(self.snr_db))
        return d


@dataclass
class CompareResult:
    a_label: str
    b_label: str
    atol: float
    rtol: float
    inputs: Dict[str, List[int]]
    rows: List[TensorCompare] = field(default_factory=list)
    unmapped: List[Dict[str, Any]] = field(default_factory=list)
    regions: List[Dict[str, Any]] = field(default_factory=list)
    seed: Optional[int] = None
    b_only: int = 0             # tensors of B with no counterpart in A (created by the conversion)
    baseline: Optional[Any] = None  # baseline_report.BaselineReport (fp16_baseline=True)
    snr_drops: List[Dict[str, Any]] = field(default_factory=list)   # snr.drops: the layers losing most
    qdq: Optional[Any] = None   # qdq_probes.QdqReference when A is a QDQ model

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.rows)

    @property
    def first_differing(self) -> Optional[TensorCompare]:
        """QDQ reference: the first row whose int8 codes are not all identical."""
        return next((r for r in self.rows if r.codes is not None and r.codes["identical"] < 1.0), None)

    @property
    def first_failure(self) -> Optional[TensorCompare]:
        return next((r for r in self.rows if not r.passed), None)

    def to_dict(self) -> Dict[str, Any]:
        first = self.first_failure
        return {"a": self.a_label, "b": self.b_label, "pass": self.passed,
                "tolerance": {"atol": self.atol, "rtol": self.rtol,
                              "rule": "max_abs <= atol + rtol * max|ref|"},
                "inputs": self.inputs, "seed": self.seed,
                "summary": {"compared": len(self.rows), "failed": sum(not r.passed for r in self.rows),
                            "simulator": sum(r.source == "simulator" for r in self.rows),
                            "unmapped": len(self.unmapped), "b_only": self.b_only},
                "first_failure": first.to_dict() if first else None,
                "regions": self.regions, "snr_drops": [snr.drop_json(d) for d in self.snr_drops], "tensors": [r.to_dict() for r in self.rows],
                "unmapped": self.unmapped,
                "qdq": None if self.qdq is None else {**self.qdq.to_dict(), "first_differing": (
                    self.first_differing.tensor if self.first_differing else None)},
                "fp16_baseline": self.baseline.to_dict() if self.baseline is not None else None}

    def to_text(self, limit: int = 0) -> str:
        out = [f"compare {self.a_label} (reference) -> {self.b_label}: "
               f"{len(self.rows)} tensors, {sum(not r.passed for r in self.rows)} failed "
               f"(pass: max_abs <= {self.atol:g} + {self.rtol:g} * max|ref|)"]
        head = f"{'#':>4}  {'tensor':<32} {'src':<4} {'max_abs':>10} {'max_rel':>10} {'cosine':>9} {'snr_dB':>7}  ok    origin"
        out.append(head)
        rows = self.rows if not limit else self.rows[:limit]
        for i, r in enumerate(rows):
            src = "sim" if r.source == "simulator" else "ort"
            out.append(f"{i:>4}  {_clip(r.tensor, 32):<32} {src:<4} {r.max_abs:>10.3g} {r.max_rel:>10.3g} "
                       f"{r.cosine:>9.6f} {snr.fmt(r.snr_db):>7}  {'PASS' if r.passed else 'FAIL'}  "
                       f"{','.join(r.origin)}{' (output)' if r.is_output else ''}")
            if r.nan or r.inf or r.ref_nan or r.ref_inf or r.reason:
                out.append(f"{'':>6}{_nonfinite_counts(r)}{': ' + r.reason if r.reason else ''}")
            if r.codes is not None:
                out.append(f"{'':>6}{qdq_codes.codes_text(r.codes)}")
        if limit and len(self.rows) > limit:
            out.append(f"  ... and {len(self.rows) - limit} more")
        if self.unmapped:
            out.append(f"not compared: {len(self.unmapped)} tensor(s) of B "
                       f"({', '.join(u['tensor'] for u in self.unmapped[:6])}{', ...' if len(self.unmapped) > 6 else ''})")
        out.append(snr.drops_text(self.snr_drops))
        if self.qdq is not None:
            out.append(qdq_probes.summary_text(self.qdq, self.first_differing))
        first = self.first_failure
        if first is None:
            out.append("PASS: every compared tensor is within tolerance")
        else:
            where = f"layer {first.b_node} of region {first.region}" if first.source == "simulator" \
                else f"node {first.b_node}"
            out.append(f"FAIL: first failing tensor {first.tensor!r} ({where}; original nodes: "
                       f"{', '.join(first.origin) or first.a_node}): {first.reason or 'max_abs over the tolerance'}"
                       f" (max_abs {first.max_abs:.4g}, max_rel {first.max_rel:.4g}, cosine {first.cosine:.6f})")
        tail = self.baseline.to_text(limit) if self.baseline is not None else ""
        return "\n".join(out) + "\n" + tail


def _nonfinite_counts(r: TensorCompare) -> str:
    return f"NaN {r.nan} (reference {r.ref_nan}), inf {r.inf} (reference {r.ref_inf})"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 3] + "..."
