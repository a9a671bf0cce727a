"""Image helpers of the trained-model surveys and benchmarks (tools/, benchmarks/): numpy only."""
from __future__ import annotations

import numpy as np


def resize_bilinear(img: np.ndarray, h: int, w: int) -> np.ndarray:
    """Bilinear resize of an H x W x C array to ``h`` x ``w`` (half-pixel centres, as cv2.INTER_LINEAR
    and PIL's bilinear closely do); float32 out."""
    ih, iw = img.shape[:2]
    y = np.clip((np.arange(h) + 0.5) * ih / h - 0.5, 0, ih - 1)
    x = np.clip((np.arange(w) + 0.5) * iw / w - 0.5, 0, iw - 1)
    y0, x0 = np.floor(y).astype(int), np.floor(x).astype(int)
    y1, x1 = np.minimum(y0 + 1, ih - 1), np.minimum(x0 + 1, iw - 1)
    fy, fx = (y - y0)[:, None, None], (x - x0)[None, :, None]
    a = img.astype(np.float32)
    top = a[y0][:, x0] * (1 - fx) + a[y0][:, x1] * fx
    bot = a[y1][:, x0] * (1 - fx) + a[y1][:, x1] * fx
    return top * (1 - fy) + bot * fy
