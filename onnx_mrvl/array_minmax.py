"""min and max of a large immutable array, remembered per array object.

fuse's weight check (``fuse/patterns.weights_reason``) and emit's Constants-JSON entry
(``emit/const_json.const_entry``) both read the min and max of the same weights: the FC kernels
fuse keeps as they are are the very array objects emit is lent (VGG-19: 494 MB, two passes each
time, ~0.09 CPU s). An array whose memory is an immutable ``bytes`` object (``numpy_helper.to_array``
of ``raw_data``) cannot change, so its min and max are kept while the array lives (a weak
reference: the entry goes with it); any other array is read each time.
"""
from __future__ import annotations

import threading
import weakref
from typing import Dict, Tuple

import numpy as np

MIN_SIZE = 1 << 16        # elements: smaller arrays are read each time
_SEEN: Dict[int, Tuple["weakref.ref[np.ndarray]", np.generic, np.generic]] = {}
_LOCK = threading.Lock()


def over_bytes(a: np.ndarray) -> bool:
    """Whether ``a`` is a view of an immutable ``bytes`` object (its values can never change)."""
    base = a
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return isinstance(base, bytes)


def minmax(a: np.ndarray) -> Tuple[np.generic, np.generic]:
    """``(a.min(), a.max())`` of a non-empty array (NaN propagates), read once per immutable array."""
    if a.size < MIN_SIZE or a.flags.writeable or not over_bytes(a):
        return a.min(), a.max()
    key = id(a)
    with _LOCK:
        got = _SEEN.get(key)
    if got is not None and got[0]() is a:
        return got[1], got[2]
    lo, hi = a.min(), a.max()

    def forget(_ref, key=key) -> None:
        with _LOCK:
            if _SEEN.get(key, (None,))[0] is _ref:
                del _SEEN[key]

    with _LOCK:
        _SEEN[key] = (weakref.ref(a, forget), lo, hi)
    return lo, hi
