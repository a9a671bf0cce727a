"""Signal-to-noise ratio per compared tensor, and the layers that lose most of it.

``snr_db(ref, got) = 10 * log10(sum(ref^2) / sum((got - ref)^2))`` over the values finite on both
sides: +inf for identical tensors (JSON: null plus ``snr_db_exact: true``, ``json_fields``), None
for integer tensors (codes: their SNR means nothing). A layer's *drop* is the SNR of what it reads
minus the SNR of what it writes: the nearest compared tensors upstream in the reference graph (graph
inputs and constants are exact, +inf). Layers are ranked by the noise they add, the increase of the
noise-to-signal power ratio ``10^(-snr/10)``, so a first layer after an exact input ranks by its own
SNR and a layer that only carries its input's noise ranks low.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import onnx


def snr_db(ref: np.ndarray, got: np.ndarray) -> Optional[float]:
    r, g = np.asarray(ref), np.asarray(got)
    if r.dtype.kind in "biu" or g.dtype.kind in "biu" or r.shape != g.shape:
        return None
    r, g = r.astype(np.float64).ravel(), g.astype(np.float64).ravel()
    both = np.isfinite(r) & np.isfinite(g)
    r, g = r[both], g[both]
    noise = float(np.sum((g - r) ** 2))
    signal = float(np.sum(r ** 2))
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def _nsr(snr: Optional[float]) -> float:
    return 0.0 if snr is None or snr == math.inf else (math.inf if snr == -math.inf else 10.0 ** (-snr / 10.0))


def upstream_snr(model: onnx.ModelProto, snr: Mapping[str, Optional[float]], tensor: str,
                 limit: int = 256) -> float:
    """The lowest SNR among the nearest compared tensors feeding ``tensor``'s producer in ``model``
    (uncompared tensors are walked through; graph inputs and initializers count as exact)."""
    producers = {t: n for n in model.graph.node for t in n.output if t}
    node = producers.get(tensor)
    if node is None:
        return math.inf
    worst, todo, seen = math.inf, [i for i in node.input if i], set()
    while todo and len(seen) < limit:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in snr:
            v = snr[t]
            worst = min(worst, math.inf if v is None else v)
            continue
        p = producers.get(t)
        if p is not None:
            todo.extend(i for i in p.input if i)
    return worst


def drops(model: onnx.ModelProto, rows: Sequence[Any], top: int = 5) -> List[Dict[str, Any]]:
    """The ``top`` rows (``tensor``, ``b_node``, ``origin``, ``snr_db``) adding the most noise:
    dicts with ``tensor``, ``layer``, ``origin``, ``snr_db``, ``input_snr_db``, ``drop_db``."""
    snr = {r.tensor: r.snr_db for r in rows}
    out = []
    for r in rows:
        if r.snr_db is None or r.snr_db == math.inf:
            continue
        before = upstream_snr(model, snr, r.tensor)
        added = _nsr(r.snr_db) - _nsr(before)
        if added <= 0:
            continue
        out.append({"tensor": r.tensor, "layer": r.b_node, "origin": list(r.origin), "snr_db": r.snr_db,
                    "input_snr_db": before, "drop_db": before - r.snr_db, "_added": added})
    out.sort(key=lambda d: -d["_added"])
    for d in out:
        del d["_added"]
    return out[:top]


def json_fields(v: Optional[float], key: str = "snr_db") -> Dict[str, Any]:
    """``{key: value}`` for JSON without non-finite numbers: +inf (identical) is null with
    ``<key>_exact: true``, -inf (a zero reference, nonzero output) null with ``<key>_zero_signal:
    true``; None (integer tensors) stays null."""
    if v is None or math.isfinite(v):
        return {key: v}
    return {key: None, f"{key}_exact" if v > 0 else f"{key}_zero_signal": True}


def drop_json(d: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(d)
    out.update(json_fields(d["snr_db"]))
    out.update(json_fields(d["input_snr_db"], "input_snr_db"))
    out.update(json_fields(d["drop_db"], "drop_db") if math.isfinite(d["drop_db"]) else {"drop_db": None})
    return out


def fmt(v: Optional[float]) -> str:
    if v is None:
        return "-"
    return "exact" if v == math.inf else f"{v:.1f}"


def drops_text(items: Sequence[Dict[str, Any]]) -> str:
    if not items:
        return "largest SNR drops: none (no layer adds noise)"
    parts = [f"{d['tensor']} ({d['layer']}): {fmt(d['snr_db'])} dB from "
             f"{fmt(d['input_snr_db'])}{'' if d['input_snr_db'] == math.inf else ' dB'}" for d in items]
    return "largest SNR drops: " + "; ".join(parts)
