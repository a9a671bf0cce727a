"""Nearest-neighbour Resize as ``mrvl.resize_nearest``: integer scales whose ONNX coordinate mode
is a plain pixel repeat (output index o reads input index o // scale). Bilinear Resize of a feature
map (mode ``linear``; ``half_pixel``, ``pytorch_half_pixel``, ``align_corners``, ``asymmetric``) as
``mrvl.resize_bilinear``: any output size within ``resize_linear_max_scale`` per axis (up or down;
the interpolation table grows with the output, not with the factor: a segmentation head's x16 / x32)."""
from __future__ import annotations

import numpy as np
import onnx

from ..graph_index import GraphIndex, attr
from ..resize_index import nearest_indices
from ..target import Target
from .groups import Group, batch_limit, float_static


def build_resize(g: GraphIndex, n: onnx.NodeProto, target: Target):
    x = n.input[0]
    reason = float_static(g, [x, n.output[0]]) or batch_limit(g, x, target)
    if reason:
        return reason
    kind = attr(n, "mode", "nearest") or "nearest"
    if kind not in ("nearest", "linear"):
        return f"Resize mode '{kind}' (the accelerator does nearest and linear)"
    ins, outs = g.shape(x), g.shape(n.output[0])
    if len(ins) != 4 or ins[:2] != outs[:2]:
        return "Resize that is not spatial on a 4-D tensor"
    for extra in n.input[1:]:
        if extra and not g.is_const(extra):
            return "Resize with non-constant scales/sizes"
    if kind == "linear":
        return build_bilinear(g, n, target)
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


LINEAR_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def build_bilinear(g: GraphIndex, n: onnx.NodeProto, target: Target):
    """A 2-D bilinear Resize of a 4-D tensor (``build`` checked: H and W scaled, N and C kept,
    constant scales/sizes)."""
    x = n.input[0]
    ins, outs = g.shape(x), g.shape(n.output[0])
    opset = next((o.version for o in g.model.opset_import if o.domain in ("", "ai.onnx")), 1)
    ctm = attr(n, "coordinate_transformation_mode", "half_pixel") if opset >= 11 else "asymmetric"
    if ctm not in LINEAR_MODES:
        return f"linear Resize with coordinate mode '{ctm}'"
    if attr(n, "antialias", 0) or attr(n, "axes") is not None or \
            attr(n, "keep_aspect_ratio_policy", "stretch") != "stretch":
        return "linear Resize with antialias / axes / keep_aspect_ratio_policy"
    scales = None
    name = n.input[2] if len(n.input) > 2 and opset >= 11 else (n.input[1] if opset < 11 else "")
    if name and g.const(name) is not None and g.const(name).size:
        sc = [float(v) for v in np.asarray(g.const(name)).reshape(-1)]
        if len(sc) != 4 or sc[0] != 1 or sc[1] != 1:
            return f"linear Resize scales {sc} change the batch or channel axis"
        scales = sc[2:]
    for axis in (2, 3):
        ratio = outs[axis] / ins[axis]
        if max(ratio, 1 / ratio) > target.resize_linear_max_scale:
            return f"scale {outs[axis]}/{ins[axis]} exceeds the limit {target.resize_linear_max_scale}"
    attrs = {"mode": "linear", "sizes": [outs[2], outs[3]], "coordinate_mode": ctm}
    if scales is not None:
        attrs["linear_scales"] = scales
    return Group("Resize", "mrvl.resize_bilinear", [n], [x], n.output[0], attrs)
