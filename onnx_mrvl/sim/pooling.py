"""Pooling kernels on NHWC fp16-valued float32 tensors, with ONNX MaxPool/AveragePool semantics.

Windows are taken as strided views of the (padded) input, one per kernel tap, so the work is
KH*KW vectorised passes. Max pooling of fp16 values is exact (no rounding needed); average pooling
sums in float32, divides in float32 and rounds the result to fp16.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from . import native
from .fp16 import round_fp16_
from .parallel import workers

F32 = np.float32


def pool_output_size(size: int, k: int, stride: int, pad_lo: int, pad_hi: int,
                     dilation: int = 1, ceil_mode: int = 0) -> int:
    """ONNX output size; in ceil mode a last window starting inside the end padding is dropped."""
    span = size + pad_lo + pad_hi - dilation * (k - 1) - 1
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + pad_lo:
        out -= 1
    return out


def pool_geometry(x, kernel_size, strides, padding, dilation, ceil_mode):
    if x.ndim != 4:
        raise ValueError(f"pooling needs an NHWC tensor, got shape {list(x.shape)}")
    kh, kw = (int(k) for k in kernel_size)
    sh, sw = (int(s) for s in (strides or (1, 1)))
    dh, dw = (int(d) for d in (dilation or (1, 1)))
    t, l, b, r = (int(p) for p in (padding or (0, 0, 0, 0)))
    _, h, w, _ = x.shape
    oh = pool_output_size(h, kh, sh, t, b, dh, ceil_mode)
    ow = pool_output_size(w, kw, sw, l, r, dw, ceil_mode)
    if oh < 1 or ow < 1:
        raise ValueError(f"pool output would be empty for input shape {list(x.shape)}")
    return (kh, kw), (sh, sw), (dh, dw), (t, l, b, r), (oh, ow)


def _padded(x: np.ndarray, t: int, l: int, need_h: int, need_w: int, value: float) -> np.ndarray:
    """Pad so that rows [0, need_h) and columns [0, need_w) exist (padded coordinates)."""
    n, h, w, c = x.shape
    hp, wp = max(need_h, t + h), max(need_w, l + w)
    if t == 0 and l == 0 and hp == h and wp == w:
        return x
    out = np.full((n, hp, wp, c), value, dtype=F32)
    out[:, t:t + h, l:l + w, :] = x
    return out


def _taps(xp, oh, ow, kh, kw, sh, sw, dh, dw):
    for i in range(kh):
        for j in range(kw):
            yield xp[:, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw, :]


def maxpool2d(x: np.ndarray, kernel_size: Sequence[int], strides=(1, 1), padding=(0, 0, 0, 0),
              ceil_mode: int = 0, dilation=(1, 1)) -> np.ndarray:
    """ONNX MaxPool on NHWC; padding is [top, left, bottom, right]."""
    (kh, kw), (sh, sw), (dh, dw), (t, l, _, _), (oh, ow) = pool_geometry(
        x, kernel_size, strides, padding, dilation, ceil_mode)
    if native.on():
        return _pool_native(x, (kh, kw, sh, sw, dh, dw, t, l), oh, ow, None)[0]
    xp = _padded(np.asarray(x, dtype=F32), t, l, (oh - 1) * sh + (kh - 1) * dh + 1,
                 (ow - 1) * sw + (kw - 1) * dw + 1, -np.inf)
    out = None
    for view in _taps(xp, oh, ow, kh, kw, sh, sw, dh, dw):
        if out is None:
            out = np.array(view, dtype=F32, order="C")
        else:
            np.maximum(out, view, out=out)
    return out


def window_counts(size: int, out: int, k: int, stride: int, pad_lo: int, pad_hi: int, dilation: int,
            include_pad: bool) -> np.ndarray:
    """Per output position: how many window taps fall in the counted range."""
    lo, hi = (-pad_lo, size + pad_hi) if include_pad else (0, size)
    pos = np.arange(out)[:, None] * stride - pad_lo + np.arange(k)[None, :] * dilation
    return ((pos >= lo) & (pos < hi)).sum(axis=1)


def avgpool2d(x: np.ndarray, kernel_size: Sequence[int], strides=(1, 1), padding=(0, 0, 0, 0),
              ceil_mode: int = 0, count_include_pad: int = 0, dilation=(1, 1)) -> np.ndarray:
    """ONNX AveragePool on NHWC. With count_include_pad the divisor counts the pads but not
    the part of a ceil-mode window beyond them (as onnxruntime does)."""
    return avgpool(x, kernel_size, strides, padding, ceil_mode, count_include_pad, dilation)[0]


def avgpool(x, kernel_size, strides=(1, 1), padding=(0, 0, 0, 0), ceil_mode=0,
             count_include_pad=0, dilation=(1, 1)) -> Tuple[np.ndarray, bool]:
    (kh, kw), (sh, sw), (dh, dw), (t, l, b, r), (oh, ow) = pool_geometry(
        x, kernel_size, strides, padding, dilation, ceil_mode)
    _, h, w, _ = x.shape
    inc = bool(count_include_pad)
    if native.on():
        div = (window_counts(h, oh, kh, sh, t, b, dh, inc)[:, None] * window_counts(w, ow, kw, sw, l, r, dw, inc)[None, :])
        return _pool_native(x, (kh, kw, sh, sw, dh, dw, t, l), oh, ow, np.ascontiguousarray(div, dtype=F32))
    xp = _padded(np.asarray(x, dtype=F32), t, l, (oh - 1) * sh + (kh - 1) * dh + 1,
                 (ow - 1) * sw + (kw - 1) * dw + 1, 0.0)
    out = None
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for view in _taps(xp, oh, ow, kh, kw, sh, sw, dh, dw):
            if out is None:
                out = np.array(view, dtype=F32, order="C")
            else:
                out += view
        ch = window_counts(h, oh, kh, sh, t, b, dh, inc)
        cw = window_counts(w, ow, kw, sw, l, r, dw, inc)
        div = (ch[:, None] * cw[None, :]).astype(F32)[None, :, :, None]
        out /= div
        finite = round_fp16_(out)
    return out, finite


def _pool_native(x: np.ndarray, geo, oh: int, ow: int, div: Optional[np.ndarray]) -> Tuple[np.ndarray, bool]:
    """The native pooling kernel: max (``div`` None) or average (divided by ``div`` [OH, OW])."""
    x = np.ascontiguousarray(x, dtype=F32)
    n, h, w, c = x.shape
    out = native.empty((n, oh, ow, c))
    desc = np.array((n, h, w, c, oh, ow) + tuple(geo) + (0 if div is None else 1,), dtype=np.int64)
    ok = native.lib().pool_desc(desc.ctypes.data, x.ctypes.data, out.ctypes.data,
                                None if div is None else div.ctypes.data, workers())
    return out, ok == 1


def global_avgpool2d(x: np.ndarray) -> np.ndarray:
    """Mean over H and W (float32 pairwise sums), keeping dims: [N,1,1,C]."""
    return global_avgpool_layer(x)[0]


def global_avgpool_layer(x: np.ndarray) -> Tuple[np.ndarray, bool]:
    if x.ndim != 4:
        raise ValueError(f"global pooling needs an NHWC tensor, got shape {list(x.shape)}")
    n, h, w, c = x.shape
    if native.on() and x.size:
        x = np.ascontiguousarray(x, dtype=F32)
        out = native.empty((n, 1, 1, c))
        ok = native.lib().global_avgpool(x.ctypes.data, out.ctypes.data, n, h * w, c, workers())
        return out, ok == 1
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.asarray(x, dtype=F32).reshape(n, h * w, c).sum(axis=1, dtype=F32)
        s /= F32(h * w)
        out = np.ascontiguousarray(s.reshape(n, 1, 1, c))
        finite = round_fp16_(out)
    return out, finite


def global_maxpool2d(x: np.ndarray) -> np.ndarray:
    """Max over H and W, keeping dims: [N,1,1,C]."""
    if x.ndim != 4:
        raise ValueError(f"global pooling needs an NHWC tensor, got shape {list(x.shape)}")
    return np.ascontiguousarray(np.asarray(x, dtype=F32).max(axis=(1, 2), keepdims=True))
