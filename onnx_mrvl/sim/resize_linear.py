"""Bilinear resize of an NHWC fp16 tensor (the ``Resize`` layer with mode ``linear``).

Per output row/column the source coordinate follows the coordinate mode (the names TVM and ONNX
use), clamped to the input; the two neighbouring samples are blended with weights ``1 - f`` and ``f``
along H, then along W, in float32 from the fp16-stored input, and the result is rounded to fp16 once.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from .fp16 import round_fp16_

LINEAR_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def linear_taps(n_out: int, n_in: int, mode: str, scale: Optional[float] = None
                ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first index, second index, weight of the second) for each output position of one axis;
    ``scale`` defaults to n_out / n_in."""
    s = float(scale) if scale else n_out / n_in
    o = np.arange(n_out, dtype=np.float32)
    if mode == "align_corners":
        x = o * np.float32((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out, np.float32)
    elif mode == "asymmetric":
        x = o / np.float32(s)
    elif mode == "pytorch_half_pixel" and n_out == 1:
        x = np.zeros(n_out, np.float32)
    elif mode in ("half_pixel", "pytorch_half_pixel"):
        x = (o + np.float32(0.5)) / np.float32(s) - np.float32(0.5)
    else:
        raise ValueError(f"linear resize coordinate mode {mode!r} is not supported")
    x = np.clip(x, 0, n_in - 1)
    i0 = np.floor(x).astype(np.int64)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, (x - i0).astype(np.float32)


def resize_bilinear(x: np.ndarray, sizes: Sequence[int], mode: str, scales: Optional[Sequence[float]] = None):
    """NHWC ``x`` resized to ``sizes`` [oh, ow]; returns (fp16-rounded float32 array, finite flag)."""
    if x.ndim != 4:
        raise ValueError(f"resize needs an NHWC tensor, got shape {list(x.shape)}")
    oh, ow = (int(d) for d in sizes)
    sh, sw = (scales if scales else (None, None))
    h0, h1, fh = linear_taps(oh, x.shape[1], mode, sh)
    w0, w1, fw = linear_taps(ow, x.shape[2], mode, sw)
    xf = np.asarray(x, dtype=np.float32)
    rows = xf[:, h0] * (1 - fh)[None, :, None, None] + xf[:, h1] * fh[None, :, None, None]
    y = rows[:, :, w0] * (1 - fw)[None, None, :, None] + rows[:, :, w1] * fw[None, None, :, None]
    y = np.ascontiguousarray(y, dtype=np.float32)
    ok = round_fp16_(y)
    return y, ok
