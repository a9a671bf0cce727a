"""The order a region layer holds its data in when the program declares no layout for it.

A program declares NHWC for spatial layers and nothing (``ND``) for most others. A layer that only
moves or combines values in its input's order carries its input's order on: a 1-D conv's NHWC
output squeezed to ``[N, W, C]``, then sliced to ``[N, W, K]`` and squared, holds the reference's
``[N, K, W]`` tensors transposed. Taking such a layer as logical compared the stored order with the
reference's (a false FAIL when ``W == K``, else "not compared"). ``carry_order`` gives its storage:

- a reshape of data stored as a reshape of a permuted tensor is a reshape of that tensor too;
- a reshape that only adds or removes size-1 axes, or a layer keeping its input's order (slice,
  elementwise, concat), keeps the order of the non-unit axes;
- else (a reshape that regroups permuted axes, a slice to size 1, ...) the order is not known
  (``tensors.UNKNOWN``): compare lists the layer as not compared, and what reads it in turn.
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import onnx

from .tensors import IDENTITY_OPS, KEEP_ORDER, LOGICAL, QDQ_OPS, RESHAPES, UNKNOWN, Storage


def carry_order(layer: dict, in_store: Optional[Storage], a_node: Optional[onnx.NodeProto],
                producers: Dict[str, onnx.NodeProto]) -> Optional[Storage]:
    """The storage of ``layer`` (``runner.capture_region``) whose first input is stored as
    ``in_store``; None when the layer's own (declared or already fixed) storage stands."""
    if in_store is None or in_store == LOGICAL or layer["storage"] != LOGICAL \
            or layer["layer_name"] not in RESHAPES | KEEP_ORDER \
            or (in_store.flat_from is not None and in_store.flat_perm is None):   # a reshape of logical data
        return None
    if a_node is not None and _after_transpose(producers, a_node):
        return None                   # relative to a Transpose the fuse stage folded: tensors.folded_perm
    if not in_store.known:
        return UNKNOWN
    if layer["layer_name"] in RESHAPES and in_store.flat_from is not None:
        return Storage(flat_from=in_store.flat_from, flat_perm=in_store.flat_perm)
    return _nonunit_order(layer, in_store) or UNKNOWN


def _nonunit_view(store: Storage, shape: Sequence[int]) -> Optional[Tuple[Tuple[int, ...], Tuple[int, ...]]]:
    """(sizes, order) of the stored array of ``shape`` with its size-1 axes left out: stored non-unit
    axis j holds the logical tensor's non-unit axis ``order[j]``; None when the data is no
    permutation of a tensor up to size-1 axes (a reshape that regrouped axes)."""
    base, perm = (store.flat_from, store.flat_perm) if store.flat_from is not None else (tuple(shape), store.perm)
    if perm is None:
        perm = tuple(range(len(base)))
    if len(perm) != len(base) or [d for d in base if d != 1] != [d for d in shape if d != 1]:
        return None
    axes = [perm[j] for j, d in enumerate(base) if d != 1]
    ranked = sorted(axes)
    return tuple(d for d in base if d != 1), tuple(ranked.index(a) for a in axes)


def _nonunit_order(layer: dict, in_store: Storage) -> Optional[Storage]:
    """A unit-axis reshape or an order-keeping layer: its input's order of the non-unit axes."""
    view = _nonunit_view(in_store, layer["in_shape"])
    out = tuple(int(d) for d in np.shape(layer["value"]) if d != 1)
    if view is None or len(out) != len(view[1]):
        return None
    if layer["layer_name"] in RESHAPES and out != view[0]:
        return None
    if view[1] == tuple(range(len(out))):
        return LOGICAL
    return Storage(flat_from=out, flat_perm=view[1])


def _after_transpose(producers: Dict[str, onnx.NodeProto], a_node: onnx.NodeProto) -> bool:
    """Whether ``a_node`` reads a Transpose of the reference (through identity ops and Q / DQ)."""
    t = a_node.input[0] if a_node.input else ""
    for _ in range(64):
        p = producers.get(t)
        if p is None or not p.input:
            return False
        if p.op_type == "Transpose":
            return True
        if p.op_type not in IDENTITY_OPS + QDQ_OPS:
            return False
        t = p.input[0]
    return False
