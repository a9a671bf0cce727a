"""ONNX Resize (mode=nearest): the input index each output index reads, per coordinate mode.
Pure ONNX semantics, shared by legalize (which Resizes are no-ops or pixel repeats) and fuse
(which become ``mrvl.resize_nearest``)."""
from __future__ import annotations

from typing import Optional

import numpy as np


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
