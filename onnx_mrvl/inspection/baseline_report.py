"""Per tensor: our error next to the fp16 baseline's, and a verdict (``compare --fp16-baseline``).

Both errors are against the fp32 reference (the original model in onnxruntime). The rules
(README "compare", docs/simulator.md "fp16 baseline"):

* **smooth tensors**: *within fp16 rounding* when ``ours <= 2 * baseline`` or ``ours <= 2**-11 *
  max|ref|`` (one fp16 unit roundoff of the tensor's scale: no fp16 result can promise less);
  otherwise *exceeds the fp16 baseline* (a likely conversion bug). A baseline that overflows where
  the reference is finite counts as an infinite error; ours overflowing where the baseline does
  not exceeds it.
* **discontinuous tensors** (``discontinuous.Discontinuities``): an element *flips* when its error
  exceeds the compare tolerance (``atol + rtol * max|ref|``; for integers and booleans: differs).
  *within fp16 rounding* when ours flips at most ``2 * max(baseline flips, 1)`` elements and, on the
  elements neither flips, the smooth rule holds.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from .discontinuous import Discontinuities
from .tensors import error_stats

U16 = 2.0 ** -11                 # fp16 unit roundoff
RATIO = 2.0                      # ours may be up to this multiple of the baseline's error
WITHIN, EXCEEDS = "within fp16 rounding", "exceeds the fp16 baseline"
RULE = (f"smooth: ours <= {RATIO:g} * baseline or ours <= 2**-11 * max|ref|; discontinuous: flips <= "
        f"{RATIO:g} * max(baseline flips, 1) and the smooth rule on the elements neither flips")


@dataclass
class BaselineRow:
    tensor: str
    op_type: str
    source: str                  # where our value came from: "onnxruntime" | "simulator"
    is_output: bool
    ours: float                  # max |ref - ours|
    baseline: float              # max |ref - fp16 baseline| (inf: the baseline overflows)
    ref_max_abs: float
    within: bool
    verdict: str
    discontinuous: List[str] = field(default_factory=list)   # jumping ops upstream
    elements: int = 0
    flips: Optional[int] = None
    baseline_flips: Optional[int] = None

    @property
    def ratio(self) -> Optional[float]:
        if self.baseline > 0:
            return self.ours / self.baseline
        return 0.0 if self.ours == 0 else None

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["ratio"] = self.ratio
        return d


@dataclass
class BaselineReport:
    rows: List[BaselineRow]
    rule: str = RULE

    @property
    def exceeding(self) -> List[BaselineRow]:
        return [r for r in self.rows if not r.within]

    @property
    def passed(self) -> bool:
        """Every model output within fp16 rounding (intermediate verdicts locate, they do not fail:
        on reductions and small tensors the 2x rule is noisy, docs/simulator.md "fp16 baseline")."""
        return not any(r.is_output for r in self.exceeding)

    @property
    def outputs(self) -> List[BaselineRow]:
        return [r for r in self.rows if r.is_output]

    def to_dict(self) -> Dict[str, Any]:
        ex = self.exceeding
        return {"rule": self.rule, "pass": self.passed,
                "summary": {"compared": len(self.rows), "exceeding": len(ex),
                            "exceeding_outputs": sum(r.is_output for r in ex),
                            "discontinuous": sum(bool(r.discontinuous) for r in self.rows)},
                "first_exceeding": ex[0].to_dict() if ex else None,
                "outputs": [r.to_dict() for r in self.outputs], "tensors": [r.to_dict() for r in self.rows]}

    def to_text(self, limit: int = 0) -> str:
        ex = self.exceeding
        out = [f"fp16 baseline (the reference model with every float tensor stored in fp16, fp32 math): "
               f"{len(self.rows)} tensors, {len(ex)} exceed it",
               f"{'#':>4}  {'tensor':<32} {'ours':>10} {'fp16':>10} {'ratio':>7}  verdict"]
        shown = self.rows if not limit else self.rows[:limit]
        shown_set = {id(r) for r in shown}
        shown = shown + [r for r in self.rows if (r.is_output or not r.within) and id(r) not in shown_set]
        for i, r in enumerate(shown):
            ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
            out.append(f"{i:>4}  {_clip(r.tensor, 32):<32} {r.ours:>10.3g} {r.baseline:>10.3g} {ratio:>7}  "
                       f"{describe(r)}{' (output)' if r.is_output else ''}")
        if limit and len(self.rows) > len(shown):
            out.append(f"  ... and {len(self.rows) - len(shown)} more")
        bad_out = [r for r in ex if r.is_output]
        if not ex:
            out.append("fp16 baseline: every compared tensor is within fp16 rounding")
        elif not bad_out:
            out.append(f"fp16 baseline: every output is within fp16 rounding; {len(ex)} intermediate tensor(s) "
                       f"exceed it (first {ex[0].tensor!r}, {ex[0].op_type}: ours {ex[0].ours:.4g} against "
                       f"{ex[0].baseline:.4g}; on reductions and small tensors this can be chance)")
        else:
            r = ex[0]
            out.append(f"fp16 baseline: FAIL: {len(bad_out)} output(s) exceed it (likely a conversion bug); first "
                       f"tensor exceeding it {r.tensor!r} ({r.op_type}, {r.source}): {describe(r)}, ours "
                       f"{r.ours:.4g} against the baseline's {r.baseline:.4g}")
        return "\n".join(out) + "\n"


def describe(r: BaselineRow) -> str:
    if r.flips is None:
        return r.verdict
    return (f"discontinuous: {r.flips} of {r.elements} elements flip; the fp16 baseline flips "
            f"{r.baseline_flips} ({r.verdict})")


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 3] + "..."


def _smooth_ok(ours: float, base: float, scale: float) -> bool:
    return ours <= RATIO * base or ours <= U16 * scale


def _flip_mask(ref: np.ndarray, got: np.ndarray, tol: float) -> np.ndarray:
    r, g = np.asarray(ref), np.asarray(got)
    if r.dtype.kind in "biu" or g.dtype.kind in "biu":
        return (r != g).ravel()
    r, g = r.astype(np.float64).ravel(), g.astype(np.float64).ravel()
    fr, fg = np.isfinite(r), np.isfinite(g)
    with np.errstate(invalid="ignore"):
        far = np.abs(np.where(fr & fg, r - g, 0.0)) > tol
    odd = (fr != fg) | (~fr & ~fg & ~((r == g) | (np.isnan(r) & np.isnan(g))))
    return far | odd


def _masked_max(ref: np.ndarray, got: np.ndarray, keep: np.ndarray) -> float:
    r, g = np.asarray(ref, np.float64).ravel()[keep], np.asarray(got, np.float64).ravel()[keep]
    ok = np.isfinite(r) & np.isfinite(g)
    d = np.abs(r[ok] - g[ok])
    return float(d.max()) if d.size else 0.0


def judge(rows, ref: Mapping[str, np.ndarray], base: Mapping[str, np.ndarray],
          ours_values: Mapping[str, np.ndarray], disc: Discontinuities, atol: float, rtol: float) -> BaselineReport:
    """One ``BaselineRow`` per compared tensor (``compare_result.TensorCompare`` rows). ``ours_values``:
    our (logical-layout) values of the discontinuous tensors."""
    out: List[BaselineRow] = []
    for r in rows:
        if r.tensor not in base or r.tensor not in ref:
            continue
        a, b = ref[r.tensor], base[r.tensor]
        s = error_stats(a, b, atol, rtol)
        scale = float(s["ref_max_abs"])
        base_err = float("inf") if s.get("nonfinite_mismatch") else float(s["max_abs"])
        sources = disc.sources(r.tensor)
        row = BaselineRow(r.tensor, r.op_type, r.source, r.is_output, float(r.max_abs), base_err, scale,
                          True, WITHIN, sources, int(np.size(a)))
        got = ours_values.get(r.tensor)
        if sources and got is not None and np.shape(got) == np.shape(a):
            tol = atol + rtol * scale
            mine, theirs = _flip_mask(a, got, tol), _flip_mask(a, b, tol)
            row.flips, row.baseline_flips = int(mine.sum()), int(theirs.sum())
            keep = ~mine & ~theirs
            row.within = (row.flips <= RATIO * max(row.baseline_flips, 1)
                          and _smooth_ok(_masked_max(a, got, keep), _masked_max(a, b, keep), scale))
        else:
            # our non-finite mismatch: the row failed although its finite error is within tolerance
            ours_nonfinite = not r.passed and r.max_abs <= atol + rtol * r.ref_max_abs \
                and np.asarray(a).dtype.kind == "f"
            row.within = (base_err == float("inf")) or (not ours_nonfinite and _smooth_ok(row.ours, base_err, scale))
        row.verdict = WITHIN if row.within else EXCEEDS
        out.append(row)
    return BaselineReport(out)
