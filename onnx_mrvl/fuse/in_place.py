"""The fused model made out of the legalized one (``fuse(consume=True)``), and the arrays it was written from.

``materialize`` builds a new model: the initializers the fused nodes read as they are are copied
(``CopyFrom``), an FC kernel kept as it is likewise under its new name. When ``convert`` gives the
legalized model up (its weights are read again from the source on a retry), its initializers stay
where they are instead: the unused ones are deleted, a kept kernel is renamed, the new ones are
added, and the list is sorted into the order ``materialize`` writes (upb's ``sort`` moves message
pointers, no bytes); the rest of the model (nodes, value infos, functions) then replaces its own.
The result is the same message, field for field (tests/test_convert_speed.py).

The arrays every written initializer holds (``WrittenArrays``: name -> read-only array over the
immutable bytes that went into the model, or the array an FC kernel kept as it is was read as) are
handed on, so the emit stage takes a region's weights from them instead of decoding the same bytes
again (``emit(..., arrays=)``).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import helper

from .. import file_weights
from ..graph_index import GraphIndex, holds_exactly

# the model is taken when the weights kept as they are (FC kernels) are at least this share of its
# weight bytes: the replaced ones (conv kernels rewritten OHWI) stay in its arena until it goes, and
# the arrays handed on sit beside it until split; below it, the model is copied as before
KEPT_SHARE = 0.75
# dtypes whose array numpy_helper.to_array gives as a plain view of the raw bytes (what emit reads)
PLAIN = {np.dtype(t).newbyteorder("<") for t in (np.float32, np.int8, np.uint8, np.int32, np.int64)}


def _nbytes(t: onnx.TensorProto) -> int:
    n = 1
    for d in t.dims:
        n *= d
    try:
        return n * np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return n


def plain_view(data: bytes, dtype: np.dtype, shape) -> Optional[np.ndarray]:
    """``numpy_helper.to_array``'s array of a tensor with raw ``data`` (None for other dtypes)."""
    dtype = dtype.newbyteorder("<")
    if dtype not in PLAIN:
        return None
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def write_in_place(model: onnx.ModelProto, g: GraphIndex, used: set,
                   inits: List[Tuple[str, np.ndarray, Optional[str]]]) -> Optional[Dict[str, np.ndarray]]:
    """Write ``inits`` (name, array, origin) after the ``used`` initializers of ``model`` into
    ``model.graph.initializer`` itself, as ``materialize`` writes them into a new model; returns the
    written arrays (``WrittenArrays``), or None (nothing changed) when names would clash."""
    tensors = model.graph.initializer
    names = [t.name for t in tensors]
    kept = [n for n in names if n in used]
    final = kept + [name for name, _, _ in inits]
    if len(set(names)) != len(names) or len(set(final)) != len(final) or any(t.HasField("data_location") and
                                                                              t.data_location and not file_weights.is_held(t) for t in tensors):
        return None
    claimed: Dict[str, int] = {}   # origin initializer -> index in inits (renamed in place)
    for j, (name, arr, origin) in enumerate(inits):
        if (origin is not None and origin not in used and origin not in claimed
                and holds_exactly(g.initializers[origin], arr)):
            claimed[origin] = j
    total = sum(_nbytes(t) for t in tensors)
    if not total or sum(inits[j][1].nbytes for j in claimed.values()) < KEPT_SHARE * total:
        return None
    key = {n: (0, i) for i, n in enumerate(kept)}
    key.update((name, (1, j)) for j, (name, _, _) in enumerate(inits))
    for i in range(len(tensors) - 1, -1, -1):
        if names[i] not in used and names[i] not in claimed:
            del tensors[i]
    arrays: Dict[str, np.ndarray] = {}
    for t in tensors:
        j = claimed.get(t.name)
        if j is not None:
            name, arr, _ = inits[j]
            t.name = name
            arrays[name] = arr
    for j in range(len(inits)):   # each array freed once written, unless it is handed on
        name, arr, origin = inits[j]
        inits[j] = None
        if origin in claimed and claimed[origin] == j:
            continue
        t = tensors.add()
        if origin is not None and holds_exactly(g.initializers[origin], arr):
            t.CopyFrom(g.initializers[origin])
            t.name = name
            arrays[name] = arr
            continue
        t.name, t.data_type = name, helper.np_dtype_to_tensor_dtype(arr.dtype)
        t.dims.extend(arr.shape)
        data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        t.raw_data = data
        view = plain_view(data, arr.dtype, arr.shape)
        del arr, data
        if view is not None:
            arrays[name] = view
    inits.clear()
    tensors.sort(key=lambda t: key[t.name])
    return arrays


def become(model: onnx.ModelProto, built: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every field but its initializers replaced by those of ``built`` (which has none)."""
    for fd, _ in model.ListFields():
        if fd.name != "graph":
            model.ClearField(fd.name)
    for fd, _ in model.graph.ListFields():
        if fd.name != "initializer":
            model.graph.ClearField(fd.name)
    model.MergeFrom(built)
    return model
