"""Bilinear resize of an NHWC fp16 tensor (the ``Resize`` layer with mode ``linear``).

Per output row/column the source coordinate follows the coordinate mode (the names TVM and ONNX
use), clamped to the input; the two neighbouring samples are blended with weights ``1 - f`` and ``f``
along H, then along W, in float32 from the fp16-stored input, and the result is rounded to fp16 once.

``bilinear_4tap`` is the int8 layer's form (docs/simulator.md "int8 layers"): onnxruntime's CPU
Resize computed on the dequantized fp32 values, operation for operation, so that the requantized
codes match its run of a QDQ model.
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


def _taps_4(n_out: int, n_in: int, mode: str, scale: float):
    """onnxruntime's bilinear setup of one axis (SetupUpsampleBilinear), in float32: the source
    coordinate from the coordinate mode (the identity at scale 1), clamped to [0, n_in - 1]; the two
    indices; the weights ``|x - i1|`` and ``|x - i2|`` (both 0.5 where the indices coincide)."""
    f, s = np.float32, np.float32(scale)
    o = np.arange(n_out, dtype=f)
    if s == f(1):
        x = o
    elif mode == "align_corners":
        x = (o * f(n_in - 1)) / f(n_out - 1) if n_out > 1 else np.zeros(n_out, f)
    elif mode == "asymmetric":
        x = o / s
    elif mode == "pytorch_half_pixel" and n_out == 1:
        x = np.zeros(n_out, f)
    elif mode in ("half_pixel", "pytorch_half_pixel"):
        x = (o + f(0.5)) / s - f(0.5)
    else:
        raise ValueError(f"linear resize coordinate mode {mode!r} is not supported")
    x = np.minimum(np.maximum(x.astype(f), f(0)), f(n_in - 1))
    i1 = np.minimum(x.astype(np.int64), n_in - 1)
    i2 = np.minimum(i1 + 1, n_in - 1)
    d1 = np.abs(x - i1.astype(f))
    d2 = np.abs(x - i2.astype(f))
    same = i1 == i2
    d1[same] = d2[same] = f(0.5)
    return i1, i2, d1, d2


def bilinear_4tap(x: np.ndarray, sizes: Sequence[int], mode: str, scales: Optional[Sequence[float]] = None
                  ) -> np.ndarray:
    """NHWC float32 ``x`` resized to ``sizes`` [oh, ow] as onnxruntime's CPU kernel computes it
    (UpsampleBilinear / NhwcUpsampleBilinear): per output pixel the four float32 coefficients
    ``dx2 dy2, dx1 dy2, dx2 dy1, dx1 dy1`` and ``((c11 X11 + c21 X21) + c12 X12) + c22 X22``, each
    operation rounded to float32 (no FMA). ``scales`` default to fp32(out) / fp32(in). Not rounded
    to fp16: the int8 layer quantizes the float32 result."""
    if x.ndim != 4:
        raise ValueError(f"resize needs an NHWC tensor, got shape {list(x.shape)}")
    f = np.float32
    (oh, ow), (_, h, w, _) = (int(d) for d in sizes), x.shape
    sh, sw = scales if scales else (f(oh) / f(h), f(ow) / f(w))
    y1, y2, dy1, dy2 = _taps_4(oh, h, mode, sh)
    x1, x2, dx1, dx2 = _taps_4(ow, w, mode, sw)
    xf = np.asarray(x, dtype=f)
    c = [(a[None, :] * b[:, None])[None, :, :, None] for a, b in ((dx2, dy2), (dx1, dy2), (dx2, dy1), (dx1, dy1))]
    top, bot = xf[:, y1], xf[:, y2]
    y = c[0] * top[:, :, x1] + c[1] * top[:, :, x2]
    y += c[2] * bot[:, :, x1]
    y += c[3] * bot[:, :, x2]
    return np.ascontiguousarray(y, dtype=f)
