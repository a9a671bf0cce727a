"""The int8 codes of a QDQ model's tensors: a Q / DQ node's quantization parameters, QuantizeLinear's
codes and their dequantization, code statistics against a reference, the QDQ bar and its text."""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np
import onnx


def const_value(model: onnx.ModelProto, name: str) -> Optional[np.ndarray]:
    """The value of initializer or Constant output ``name`` of ``model`` (None: neither)."""
    from onnx import numpy_helper
    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output and n.output[0] == name:
            return numpy_helper.to_array(onnx.helper.get_attribute_value(n.attribute[0]))
    return None


def quant_params(model: onnx.ModelProto, node: onnx.NodeProto, ndim: int
                 ) -> Optional[Tuple[np.ndarray, np.ndarray, int, int]]:
    """(scale, zero point, qmin, qmax) of a Q / DQ node, broadcastable over a rank-``ndim`` tensor."""
    scale = const_value(model, node.input[1]) if len(node.input) > 1 else None
    if scale is None:
        return None
    zp = const_value(model, node.input[2]) if len(node.input) > 2 and node.input[2] else None
    dtype = zp.dtype if zp is not None else np.dtype(np.uint8)
    if dtype.kind not in "iu":
        return None
    info = np.iinfo(dtype)
    zp = np.zeros_like(scale, dtype=np.int64) if zp is None else zp.astype(np.int64)
    scale = scale.astype(np.float32)
    if scale.ndim == 1 and scale.size > 1:
        axis = next((int(onnx.helper.get_attribute_value(a)) for a in node.attribute if a.name == "axis"), 1)
        shape = [1] * ndim
        shape[axis % ndim] = scale.size
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    elif scale.size != 1:
        return None
    return scale, zp, int(info.min), int(info.max)


def codes(x: np.ndarray, params) -> np.ndarray:
    """QuantizeLinear's codes of float ``x`` (round half to even, saturate) as int64."""
    scale, zp, lo, hi = params
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        q = np.rint(np.asarray(x, np.float32) / scale)
    q = np.nan_to_num(q, nan=0.0, posinf=hi, neginf=lo)
    return np.clip(q.astype(np.int64) + zp, lo, hi)


def dequantize(q: np.ndarray, params) -> np.ndarray:
    scale, zp, _, _ = params
    return ((q.astype(np.int64) - zp).astype(np.float32) * scale).astype(np.float32)


def code_stats(ref_codes: np.ndarray, got_codes: np.ndarray) -> Dict[str, object]:
    """identical share, max code difference and the QDQ bar (>= 99% identical, the rest within one
    quantum: ``within_one_quantum``)."""
    d = np.abs(ref_codes.astype(np.int64) - got_codes.astype(np.int64))
    same = float(np.count_nonzero(d == 0)) / d.size if d.size else 1.0
    mx = int(d.max()) if d.size else 0
    return {"identical": same, "max_code_diff": mx, "within_one_quantum": bool(same >= 0.99 and mx <= 1)}


def judge(codes: Dict[str, object], stats: Dict[str, object]) -> Tuple[bool, str]:
    """(pass, reason) of a row with codes: the QDQ bar, and non-finite values must agree."""
    ok = bool(codes["within_one_quantum"]) and not stats.get("nonfinite_mismatch")
    if ok:
        return True, ""
    why = [] if codes["within_one_quantum"] else [
        f"{100 * float(codes['identical']):.2f}% of the int8 codes identical, max code difference "
        f"{codes['max_code_diff']} (bar: >= 99% identical, the rest within one quantum)"]
    if stats.get("nonfinite_mismatch"):
        why.append(str(stats.get("reason", "non-finite values differ")))
    return False, "; ".join(why)


def codes_text(c: Dict[str, object]) -> str:
    return (f"codes of {c['probe']}: {100 * float(c['identical']):.2f}% identical, max code difference "
            f"{c['max_code_diff']}{' (within one quantum)' if c['within_one_quantum'] else ''}")
