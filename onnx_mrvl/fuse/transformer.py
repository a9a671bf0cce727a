"""Fusion patterns of transformer / modern-CNN layers, and their materialisation:

    mrvl.layernorm   LayerNormalization (opset 17; legalize's ``layernorm_canonical`` writes the
                     exporters' decomposed forms as one) over one axis     -> Mrvl LayerNorm
    mrvl.softmax     Softmax over one axis (opset >= 13: any axis; below 13, where the flattened
                     trailing axes hold one non-unit axis)                  -> Mrvl Softmax
    mrvl.log_softmax LogSoftmax, the same axes rules                        -> Mrvl Softmax log=1

A Softmax read only through ``Where(IsNaN(y), c, y)`` (PyTorch's ``_safe_softmax``: the exporters'
guard for rows whose every score is masked to -inf) absorbs the guard: the Mrvl Softmax's
``nan_fill`` = c writes c where the softmax is NaN, so the attention stays one region.

Both run on the tensor as it is stored (2-D to 5-D): the Mrvl node's ``axis`` is the stored
position of the logical axis, written negative (``-1``: the last stored axis, the channels of NHWC
data or the features of [B, T, D] rows), so no layout change is ever needed around them.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from ..graph_index import GraphIndex, attr
from ..opset_int8 import ALL_INT8_ATTRS
from ..ort_plan import instance_norm
from ..target import Target
from .groups import Group
from .patterns import Pattern, tensor_reason


def _single_axis(shape, axes) -> Optional[int]:
    """The one non-unit axis among ``axes`` (or the last of them when all are unit), else None."""
    nonunit = [a for a in axes if shape[a] != 1]
    if len(nonunit) > 1:
        return None
    return nonunit[0] if nonunit else axes[-1]


def _common(g: GraphIndex, n: onnx.NodeProto, target: Target) -> Optional[str]:
    x = n.input[0] if n.input else ""
    if not x or not n.output or not n.output[0]:
        return "no input or output"
    return tensor_reason(g, x, n.output[0], target, n.op_type)


def build_layernorm(g: GraphIndex, n: onnx.NodeProto, target: Target):
    reason = _common(g, n, target)
    if reason:
        return reason
    x = n.input[0]
    shape = g.shape(x)
    rank = len(shape)
    axes = list(range(attr(n, "axis", -1) % rank, rank))
    a = _single_axis(shape, axes)
    if a is None:
        return (f"normalises {len(axes)} non-unit axes {[shape[k] for k in axes]} (the accelerator "
                f"normalises one axis)")
    if any(o and g.consumers.get(o) or o in g.output_set for o in n.output[1:]):
        return "the Mean / InvStdDev outputs are used"
    d = shape[a]
    if d > target.max_norm_features:   # above max_channels: blocked passes (target.NORM_BLOCKED_LOWERING)
        return f"{d} features exceed the limit {target.max_norm_features}"
    weights = {}
    for role, idx in (("gamma", 1), ("beta", 2)):
        t = n.input[idx] if len(n.input) > idx else ""
        if not t:
            continue
        if not g.is_const(t):
            return f"{'scale' if role == 'gamma' else 'bias'} '{t}' is not a constant initializer"
        v = np.asarray(g.const(t), np.float32)
        try:
            full = np.broadcast_to(v, [shape[k] for k in axes])
        except ValueError:
            return f"{role} of shape {list(v.shape)} does not fit the normalised axes"
        weights[role] = np.ascontiguousarray(full.reshape(-1))
    if "gamma" not in weights:
        return "LayerNormalization without a scale input"
    eps = float(attr(n, "epsilon", 1e-5))
    if not eps >= 0:
        return f"epsilon {eps} is negative"
    attrs = {"axis": a, "epsilon": eps}
    if instance_norm(n) and a == rank - 1 and all(np.all(v == v[0]) for v in weights.values()):
        attrs["ort_kernel"] = "instance_norm"   # onnxruntime's InstanceNorm kernel (legalize group_norm)
    return Group("LayerNorm", "mrvl.layernorm", [n], [x], n.output[0], attrs, weights)


def build_softmax(g: GraphIndex, n: onnx.NodeProto, target: Target):
    reason = _common(g, n, target)
    if reason:
        return reason
    x = n.input[0]
    shape = g.shape(x)
    rank = len(shape)
    opset_version = next((o.version for o in g.model.opset_import if o.domain in ("", "ai.onnx")), 1)
    if opset_version >= 13:
        a = attr(n, "axis", -1) % rank
    else:   # Softmax-1/11: over the axes from ``axis`` on, flattened
        a = _single_axis(shape, list(range(attr(n, "axis", 1) % rank, rank)))
        if a is None:
            return (f"opset {opset_version} {n.op_type} over the flattened axes "
                    f"{shape[attr(n, 'axis', 1) % rank:]}")
    if shape[a] > target.max_fc_features:
        return f"{n.op_type} over {shape[a]} values exceeds the limit {target.max_fc_features}"
    if n.op_type == "LogSoftmax":   # the same Mrvl op: (x - max) - log(sum(exp(x - max)))
        return Group("Softmax", "mrvl.log_softmax", [n], [x], n.output[0], {"axis": a, "log": 1})
    guard = nan_guard(g, n.output[0], target)
    if guard is not None:
        (isnan, where), fill = guard
        return Group("Softmax", "mrvl.softmax", [n, isnan, where], [x], where.output[0],
                     {"axis": a, "nan_fill": fill})
    return Group("Softmax", "mrvl.softmax", [n], [x], n.output[0], {"axis": a})


def nan_guard(g: GraphIndex, y: str, target: Target):
    """``Where(IsNaN(y), c, y)`` as the only reader of ``y`` (c a scalar constant fp16 holds exactly,
    the Where's output of ``y``'s shape) -> ((IsNaN, Where), c), else None."""
    users = g.consumers.get(y, [])
    if y in g.output_set or len(users) != 2:
        return None
    isnan = next((u for u in users if u.op_type == "IsNaN"), None)
    where = next((u for u in users if u.op_type == "Where"), None)
    if isnan is None or where is None or len(where.input) != 3 or isnan.output[0] in g.output_set:
        return None
    if [c.name for c in g.consumers.get(isnan.output[0], [])] != [where.name]:
        return None
    cond, fill, other = where.input
    if cond != isnan.output[0] or other != y or not g.is_const(fill) or g.shape(where.output[0]) != g.shape(y):
        return None
    c = np.asarray(g.const(fill), dtype=np.float32).reshape(-1)
    if c.size != 1 or not np.isfinite(c[0]) or abs(float(c[0])) > target.fp16_max or \
            float(np.float16(c[0])) != float(c[0]):     # the fill written as an fp16 value is exact
        return None
    return (isnan, where), float(c[0])


ANCHORS = {"LayerNormalization": Pattern("mrvl.layernorm", ("LayerNormalization",), build_layernorm),
           "Softmax": Pattern("mrvl.softmax", ("Softmax",), build_softmax),
           "LogSoftmax": Pattern("mrvl.log_softmax", ("LogSoftmax",), build_softmax)}


def materialize(m, grp: Group) -> None:
    """Emit the LayerNorm / Softmax (/ LogSoftmax) group into the Materializer ``m`` on the input's storage."""
    src = grp.inputs[0]
    name, perm = m.loc[src]
    if src in m.flat:
        name, perm = m.get(src, None, for_mrvl=True, origin=grp.origin), None
    rank = len(m.logical_shape(src))
    a = grp.attrs["axis"]
    attrs = {"axis": (list(perm).index(a) if perm else a) - rank}
    ins = [name]
    if grp.attrs.get("log"):
        attrs["log"] = 1
    if "nan_fill" in grp.attrs:   # an absorbed Where(IsNaN(y), c, y)
        attrs["nan_fill"] = float(grp.attrs["nan_fill"])
    attrs.update({k: v for k, v in grp.attrs.items() if k in ALL_INT8_ATTRS or k.startswith("inner_")})
    # an int8 Softmax, an int8_out LayerNorm (qdq_transformer.py), interior quantization (qdq_layernorm.py)
    if grp.op == "LayerNorm":
        attrs["epsilon"] = grp.attrs["epsilon"]
        if grp.attrs.get("rms"):   # RMSNorm (rmsnorm.py)
            attrs["rms"] = 1
        if grp.attrs.get("form"):   # x * inv + c with interior points (qdq_norm_affine.py)
            attrs["form"] = grp.attrs["form"]
        if grp.attrs.get("mean_sum"):   # the mean onnxruntime sums over a strided axis (qdq_layernorm.py)
            attrs["mean_sum"] = grp.attrs["mean_sum"]
        if grp.attrs.get("mean_muls"):   # the means' constant factors (qdq_layernorm.py)
            attrs["mean_muls"] = [float(k) for k in grp.attrs["mean_muls"]]
        if grp.attrs.get("ort_kernel") and attrs.get("precision") == "int8_out":   # its codes: onnxruntime's
            attrs["ort_kernel"] = grp.attrs["ort_kernel"]          # InstanceNorm kernel's order (build_layernorm)
        base = grp.anchor.name
        ins += [m.init(f"{base}_gamma", grp.weights["gamma"]),
                m.init(f"{base}_beta", grp.weights["beta"]) if "beta" in grp.weights else ""]
    if grp.op == "Softmax" and "mask" in grp.weights:   # an additive fp32 mask (qdq_masked_softmax.py)
        mask = grp.weights["mask"]
        ins.append(m.init(f"{grp.anchor.name}_mask", np.transpose(mask, perm) if perm else mask))
    m._emit(grp, grp.op, ins, attrs, perm)
    out = m.loc[grp.output][0]
    if name in m.label:
        m.label[out] = m.label[name]

