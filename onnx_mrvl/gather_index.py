"""The index table of a Mrvl GatherElements (fuse/gather_elements.py, emit, sim): stored once, each
leading axis on which it does not change reduced to size 1 (broadcast when it runs)."""
from __future__ import annotations

import numpy as np


def compact_index(idx: np.ndarray) -> np.ndarray:
    """``idx`` with each leading axis (all but the last) on which it does not change reduced to size 1."""
    for k in range(idx.ndim - 1):
        if idx.shape[k] > 1 and (idx == np.take(idx, [0], axis=k)).all():
            idx = np.take(idx, [0], axis=k)
    return idx


def expand_index(idx: np.ndarray, out_shape) -> np.ndarray:
    """The full index table of an output of ``out_shape`` (a compacted table broadcast back)."""
    return np.broadcast_to(idx, tuple(out_shape))
