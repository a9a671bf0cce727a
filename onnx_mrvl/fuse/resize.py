"""Nearest-neighbour Resize as ``mrvl.resize_nearest``: integer scales whose ONNX coordinate mode
is a plain pixel repeat (output index o reads input index o // scale)."""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from .._graph import GraphIndex, attr
from ..target import Target
from .groups import Group, _batch, _float_static


def nearest_indices(out_len: int, in_len: int, scale: float, ctm: str, mode: str) -> Optional[np.ndarray]:
    """Source index per output index for ONNX Resize mode=nearest."""
    o = np.arange(out_len, dtype=np.float64)
    if ctm == "half_pixel":
        x = (o + 0.5) / scale - 0.5
    elif ctm == "pytorch_half_pixel":
        x = (o + 0.5) / scale - 0.5 if out_len > 1 else np.zeros_like(o)
    elif ctm == "asymmetric":
        x = o / scale
    elif ctm == "align_corners":
        x = o * (in_len - 1) / (out_len - 1) if out_len > 1 else np.zeros_like(o)
    elif ctm == "tf_half_pixel_for_nn":
        x = (o + 0.5) / scale
    else:
        return None
    if mode == "round_prefer_floor":
        idx = np.where(x - np.floor(x) == 0.5, np.floor(x), np.round(x))
    elif mode == "round_prefer_ceil":
        idx = np.where(x - np.floor(x) == 0.5, np.ceil(x), np.round(x))
    elif mode == "floor":
        idx = np.floor(x)
    elif mode == "ceil":
        idx = np.ceil(x)
    else:
        return None
    return np.clip(idx, 0, in_len - 1).astype(np.int64)


def build_resize(g: GraphIndex, n: onnx.NodeProto, target: Target):
    x = n.input[0]
    reason = _float_static(g, [x, n.output[0]]) or _batch(g, x, target)
    if reason:
        return reason
    if (attr(n, "mode", "nearest") or "nearest") != "nearest":
        return f"Resize mode '{attr(n, 'mode')}' (the accelerator does nearest)"
    ins, outs = g.shape(x), g.shape(n.output[0])
    if len(ins) != 4 or ins[:2] != outs[:2]:
        return "Resize that is not spatial on a 4-D tensor"
    for extra in n.input[1:]:
        if extra and not g.is_const(extra):
            return "Resize with non-constant scales/sizes"
    scales = []
    ctm = attr(n, "coordinate_transformation_mode", "half_pixel")
    mode = attr(n, "nearest_mode", "round_prefer_floor")
    for axis in (2, 3):
        if outs[axis] % ins[axis]:
            return f"non-integer scale {outs[axis]}/{ins[axis]}"
        s = outs[axis] // ins[axis]
        if s > target.resize_max_scale:
            return f"scale {s} exceeds the limit {target.resize_max_scale}"
        idx = nearest_indices(outs[axis], ins[axis], float(s), ctm, mode)
        if idx is None or not np.array_equal(idx, np.arange(outs[axis]) // s):
            return f"coordinate mode '{ctm}'/'{mode}' is not a pixel repeat"
        scales.append(s)
    return Group("Resize", "mrvl.resize_nearest", [n], [x], n.output[0], {"scales": scales, "mode": "nearest"})
