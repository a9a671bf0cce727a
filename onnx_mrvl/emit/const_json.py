"""Constants-JSON entries made from arrays: float32 (or int8 / uint8 / int32) little-endian bytes
as base64, the text made lazily from a frozen array when nothing can change its values."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..array_minmax import minmax, over_bytes
from . import base64_native
from .json_attrs import INT_CONST_DTYPES, ConstEntry


def _minmax(v: float) -> str:
    """TVM printed constant min/max with 17 significant digits of the float32 value."""
    return format(float(np.float32(v)), ".17g")


def const_entry(arr: np.ndarray, shape: Sequence[int] = None) -> dict:
    """A Constants-JSON entry: float32 little-endian bytes, base64 (a :class:`ConstEntry` that
    carries the array instead of the text when nothing can change its values later: the text is
    made when read or saved, and ``compile_json`` in-process takes the bytes from the array).
    int8 / uint8 / int32 arrays (an int8 layer's kernel and bias) keep their dtype."""
    integer = np.asarray(arr).dtype.name in INT_CONST_DTYPES
    a = np.ascontiguousarray(arr, dtype=np.asarray(arr).dtype.newbyteorder("<") if integer else "<f4")
    if shape is None:
        shape = list(a.shape)
        if len(shape) in (1, 3):  # TVM wrote 1-D and 3-D constants with a leading 1
            shape = [1] + shape
    lo, hi = minmax(a) if a.size else (None, None)   # fuse read the same kernels' (array_minmax.py)
    entry = ConstEntry({"shape": [int(d) for d in shape], "dtype": a.dtype.name if integer else "float32",
                        "min": _minmax(lo) if a.size else "0", "max": _minmax(hi) if a.size else "0",
                        "data_base64": ""})
    frozen = _frozen(a, owned=a is not arr and a.base is None)
    if frozen is not None:   # the text is made from it when read or saved (const_entry.py)
        return entry.attach_lazy(frozen)
    entry["data_base64"] = base64_native.text(a.reshape(-1).view(np.uint8))
    return entry


def _frozen(a: np.ndarray, owned: bool):
    """A read-only view of ``a`` when nobody can write its values any more: a copy made here, or an
    array whose memory is an immutable ``bytes`` object (onnx's numpy_helper.to_array). Else None."""
    if not (owned or over_bytes(a)):
        return None
    view = a.view()
    view.flags.writeable = False
    return view


def detach_arrays(consts_json: dict) -> None:
    """Drop the arrays :func:`const_entry` attached beside a base64 text (after compiling); an entry
    whose text is still to be made from its array keeps it (smaller than the text)."""
    for entry in consts_json.values():
        if isinstance(entry, ConstEntry):
            entry.detach()
