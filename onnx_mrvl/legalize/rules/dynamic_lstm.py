"""com.microsoft ``DynamicQuantizeLSTM`` (onnxruntime's ``quantize_dynamic`` of an LSTM) -> ONNX
``LSTM`` with dequantized fp32 weights, which fuse/recurrent.py offloads as an fp16 LSTM layer.

Its int8 W is ``[D, I, 4H]`` and R ``[D, H, 4H]`` (transposed against ONNX's ``[D, 4H, I]``),
scales and zero points per direction ``[D]`` or per gate row ``[D, 4H]``: ``W[d] = ((W_q[d] -
z[d]) * s[d])^T``. Inputs 0-7 and the attributes are the LSTM's. Same reasoning and note as
``dynamic_int8`` (no calibration: fp16 with dequantized weights).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from .base import Match, inp
from .dynamic_int8 import NOTE
from .qtensor import MS, domain

NAME = "dynamic_lstm"
OPS = ("DynamicQuantizeLSTM",)
REPORT_SKIPS = "dynamic int8"
LSTM_ATTRS = ("activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size",
              "input_forget", "layout")


def match(node, g) -> Optional[Match]:
    return Match([node]) if (domain(node), node.op_type) == (MS, "DynamicQuantizeLSTM") else None


def _weights(g, node, q_idx: int, s_idx: int, z_idx: int):
    """fp32 ``[D, 4H, K]`` from int8 ``[D, K, 4H]`` with per-direction or per-row scales, or a reason."""
    names = [inp(node, k) for k in (q_idx, s_idx, z_idx)]
    if not all(g.is_const(n) for n in names if n) or not names[0] or not names[1]:
        return f"DynamicQuantizeLSTM '{node.name}': input {q_idx} or its scale / zero point is not a constant"
    q = g.const(names[0])
    if q.ndim != 3 or q.dtype not in (np.int8, np.uint8):
        return f"DynamicQuantizeLSTM '{node.name}': weights {q.dtype} {list(q.shape)} (int8 [D, K, 4H] expected)"
    d, _, g4 = q.shape
    out = np.empty((d, g4, q.shape[1]), np.float32)
    s_all = np.asarray(g.const(names[1]), np.float32)
    z_all = np.asarray(g.const(names[2])).astype(np.int32) if names[2] else np.zeros(s_all.shape, np.int32)
    for k in range(d):
        s, z = _per_dir(s_all, d, g4, k), _per_dir(z_all, d, g4, k)
        if s is None or z is None:
            return f"DynamicQuantizeLSTM '{node.name}': scales of shape {list(s_all.shape)} fit neither [D] nor [D, 4H]"
        out[k] = ((q[k].astype(np.int32) - z).astype(np.float32) * s).astype(np.float32).T
    return out


def _per_dir(v: np.ndarray, d: int, g4: int, k: int):
    """Direction ``k``'s scale (scalar or [4H] along the last axis), or None."""
    flat = v.reshape(-1)
    if flat.size == d:
        return flat[k]
    if flat.size == d * g4:
        return flat.reshape(d, g4)[k]
    if flat.size == 1:
        return flat[0]
    return None


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    w = _weights(g, node, 1, 8, 9)
    if isinstance(w, str):
        return w
    r = _weights(g, node, 2, 10, 11)
    if isinstance(r, str):
        return r
    m.data.update(W=w, R=r)
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    w = g.add_const(f"{node.name}/W", m.data["W"])
    r = g.add_const(f"{node.name}/R", m.data["R"])
    rest = [inp(node, k) for k in range(3, 8)]
    while rest and not rest[-1]:
        rest.pop()
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute if a.name in LSTM_ATTRS}
    g.remove(node)
    g.make("LSTM", [node.input[0], w, r] + rest, list(node.output), near=node, origin=m.origin,
                  name=node.name, **attrs)
    g.notes.update({o: NOTE for o in m.origin})
    return "DynamicQuantizeLSTM -> LSTM with dequantized fp32 W and R"


__all__ = ["NAME", "OPS", "match", "check", "rewrite"]
