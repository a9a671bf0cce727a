"""Nearest-neighbour Resize as ``mrvl.resize_nearest``: integer scales whose ONNX coordinate mode
is a plain pixel repeat (output index o reads input index o // scale)."""
from __future__ import annotations

import numpy as np
import onnx

from .._graph import GraphIndex, attr
from ..resize_index import nearest_indices
from ..target import Target
from .groups import Group, _batch, _float_static


def build_resize(g: GraphIndex, n: onnx.NodeProto, target: Target):
    x = n.input[0]
    reason = _float_static(g, [x, n.output[0]]) or _batch(g, x, target)
    if reason:
        return reason
    if (attr(n, "mode", "nearest") or "nearest") != "nearest":
        return f"Resize mode '{attr(n, 'mode')}' (the accelerator does nearest)"
    ins, outs = g.shape(x), g.shape(n.output[0])
    if len(ins) != 4 or ins[:2] != outs[:2]:
        return "Resize that is not spatial on a 4-D tensor"
    for extra in n.input[1:]:
        if extra and not g.is_const(extra):
            return "Resize with non-constant scales/sizes"
    scales = []
    ctm = attr(n, "coordinate_transformation_mode", "half_pixel")
    mode = attr(n, "nearest_mode", "round_prefer_floor")
    for axis in (2, 3):
        if outs[axis] % ins[axis]:
            return f"non-integer scale {outs[axis]}/{ins[axis]}"
        s = outs[axis] // ins[axis]
        if s > target.resize_max_scale:
            return f"scale {s} exceeds the limit {target.resize_max_scale}"
        idx = nearest_indices(outs[axis], ins[axis], float(s), ctm, mode)
        if idx is None or not np.array_equal(idx, np.arange(outs[axis]) // s):
            return f"coordinate mode '{ctm}'/'{mode}' is not a pixel repeat"
        scales.append(s)
    return Group("Resize", "mrvl.resize_nearest", [n], [x], n.output[0], {"scales": scales, "mode": "nearest"})
