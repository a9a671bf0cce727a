"""AveragePool with count_include_pad=0 and nonzero pads, on a target that cannot exclude pads
(target.avgpool_exclude_pad False): AveragePool(count_include_pad=1) followed by Mul with a
constant [1,1,Ho,Wo] map = divisor_with_pads / count_without_pads (ONNC calibration)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ... import provenance
from ..shapes import pool_out_size
from .base import Match, attr, np_dtype
from ..graph import set_attr

NAME = "avgpool_calibrate"
OPS = ("AveragePool",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "AveragePool" or node.domain not in ("", "ai.onnx"):
        return None
    pads = attr(node, "pads")
    if attr(node, "count_include_pad", 0) or not pads or not any(pads):
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    if getattr(target, "avgpool_exclude_pad", True):
        return "target.avgpool_exclude_pad: the accelerator excludes pads itself"
    node = m.node
    sx, sy = g.shape(node.input[0]), g.shape(node.output[0])
    if sx is None or sy is None or len(sx) != 4:
        return "needs a static 4-D input"
    if any(d != 1 for d in (attr(node, "dilations") or [1, 1])):
        return "dilated pooling"
    ceil = attr(node, "ceil_mode", 0)
    (kh, kw), (sh, sw) = attr(node, "kernel_shape"), attr(node, "strides") or [1, 1]
    pt, pl, pb, pr = attr(node, "pads")
    want = [pool_out_size(sx[2], kh, sh, 1, pt, pb, ceil), pool_out_size(sx[3], kw, sw, 1, pl, pr,
                                                                          ceil)]
    if list(sy[2:]) != want:
        return (f"ceil_mode output {list(sy[2:])} (ONNX shape inference) differs from the "
                f"{want} onnxruntime computes; no static calibration map fits both")
    return None


def _axis(size, out, k, s, pb, pe):
    """Per output index: divisor with pads counted (ONNX/ORT) / count of real elements."""
    start = np.arange(out) * s - pb
    end_pad = np.minimum(start + k, size + pe)
    real = np.minimum(start + k, size) - np.maximum(start, 0)
    return (end_pad - start) / np.maximum(real, 1)  # ceil-mode tails: padded end clips too


def rewrite(m: Match, g) -> str:
    node = m.node
    _, _, h, w = g.shape(node.input[0])
    kh, kw = attr(node, "kernel_shape")
    sh, sw = attr(node, "strides") or [1, 1]
    pt, pl, pb, pr = attr(node, "pads")
    sy = g.shape(node.output[0])
    fh = _axis(h, sy[2], kh, sh, pt, pb)
    fw = _axis(w, sy[3], kw, sw, pl, pr)
    cal = np.outer(fh, fw).reshape(1, 1, sy[2], sy[3]).astype(np_dtype(g, node.input[0]))
    y = node.output[0]
    mid = g.fresh(f"{y}/sum_with_pads")
    origin = m.origin
    g.rename_output(node, 0, mid)
    set_attr(node, "count_include_pad", 1)
    provenance.set_origin(node, origin)
    g.make("Mul", [mid, g.add_const(f"{node.name}/calibration", cal)], [y], near=node,
           origin=origin, name=f"{node.name}/calibrate")
    g.set_shape(mid, sy, g.dtype(y))
    return "count_include_pad=0 -> count_include_pad=1 + Mul by calibration map"
