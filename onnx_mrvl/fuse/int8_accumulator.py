"""Whether an int8 layer's int32 accumulator can hold its sums (sim/int8.py refuses the layer
otherwise, so fuse must not make it one).

The accumulator adds modulo 2^32 (two's complement adders, no saturation: target.INT8_ACCUMULATOR),
as onnxruntime's MLAS kernels do (QLinearConv / QGemm: vpdpbusd, vpaddd), so a sum that leaves the
int32 range gives the same wrapped value in both: an int32 bias at its limit (onnxruntime's quantizer
clips ``b / (s_x s_w)`` to int32 when the input scale is tiny, PP-OCR's SE convs after a global pool)
is no reason to keep a layer on the CPU. Only the products alone are bounded (K * 255 * 128 < 2^31,
about 65,000 taps), the form the simulator's kernels are written for."""
from __future__ import annotations

from typing import Optional

import numpy as np

ACC_LIMIT = 2 ** 31   # the int32 accumulator (sim/int8.py checks the same bound)


def accumulator_reason(kernel_oi_codes: np.ndarray, bias=None, zero_points=None) -> Optional[str]:
    """Why the K products of |x - z| <= 255 and |w - z_w| <= 128 + |z_w| could leave the int32
    accumulator, or None (the int32 bias wraps with the sum, as in onnxruntime; a weight zero point's
    row-sum term ``z_w * sum(x - z)`` widens the product bound)."""
    k = int(np.prod(kernel_oi_codes.shape[1:]))
    z = 0 if zero_points is None else int(np.abs(np.asarray(zero_points, np.int64)).max(initial=0))
    if k * 255 * (128 + z) >= ACC_LIMIT:
        return f"K={k} products could overflow the int32 accumulator"
    return None
