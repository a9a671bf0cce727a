"""Whether an int8 layer's int32 accumulator can hold its sums (sim/int8.py refuses the layer
otherwise, so fuse must not make it one)."""
from __future__ import annotations

from typing import Optional

import numpy as np

ACC_LIMIT = 2 ** 31   # the int32 accumulator (sim/int8.py checks the same bound)


def accumulator_reason(kernel_oi_codes: np.ndarray, bias, zero_points=None) -> Optional[str]:
    """Why K products of |x - z| <= 255 and |w| <= 128, the row-sum term of a weight zero point
    (``|z_w| * K * 255``) and the int32 bias could leave the int32
    accumulator, or None. An int32 bias near its limit (the quantizer's ``b / (s_x s_w)`` with a
    tiny weight scale: a channel of near-zero weights) makes such a layer; it stays on the CPU with
    this reason, as onnxruntime runs it (a compile error would fail the whole model)."""
    k = int(np.prod(kernel_oi_codes.shape[1:]))
    b = 0 if bias is None else int(np.abs(np.asarray(bias, np.int64)).max(initial=0))
    z = 0 if zero_points is None else int(np.abs(np.asarray(zero_points, np.int64)).max(initial=0))
    if k * 255 * (128 + z) + b >= ACC_LIMIT:
        return (f"K={k} products plus an int32 bias of up to {b} could overflow the int32 accumulator "
                f"(a tiny weight scale)")
    return None
