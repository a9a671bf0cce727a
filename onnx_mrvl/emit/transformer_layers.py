"""Compile the Nodes-JSON layers of transformer / modern-CNN nodes (docs/json-format.md):
``LayerNorm`` (axis, epsilon, gamma, beta; ``rms`` = 1: RMSNorm, no mean subtracted) and ``Softmax`` (axis, log, nan_fill), each over one axis
of the stored tensor (``log`` = 1: LogSoftmax; ``nan_fill`` = c: c where the result is NaN). Output shape = input shape; the layout stays the input's.

``vector_ops`` is the work the perf model charges to the vector unit (docs/simulator.md): per
element, LayerNorm 8 (sum, subtract, square, sum, multiply by 1/sqrt(var + eps), gamma, beta,
round; one rsqrt per row; an RMSNorm is charged the same, an upper bound: it skips the mean and its
subtract; a row longer than ``max_channels`` runs in blocked passes and is charged 2 more for its
two extra reads, ``target.NORM_BLOCKED_LOWERING``), Softmax 6 (max, subtract, exp by LUT, sum, multiply by the reciprocal,
round; one reciprocal per row), LogSoftmax 6 (max, subtract, exp by LUT, sum, subtract the log of
the sum, round; one log per row); ``nan_fill`` one more (the select). A LayerNorm with interior
quantization points (``inner_*``) adds 3 per element for each point on a per-element value (a
Requantize's multiply, round, saturate; the points on per-row statistics are negligible); a
``form`` layer norm (x * inv + c) 4 more for its extra products and add (assumptions).
"""
from __future__ import annotations

from typing import List

import numpy as np

from ..target import DEFAULT_TARGET, norm_blocked_extra_ops
from .json_attrs import decode_const, to_number, unwrap

LAYERNORM_OPS_PER_ELEMENT = 8
QUANT_POINT_OPS = 3
# the interior points on per-element values, by layer kind (the others quantize per-row statistics)
ELEMENT_POINTS = {"layernorm": (2, 3), "layernorm8": (1, 2, 6, 7), "rms": (0, 4), "form": (2, 3, 7, 8, 9, 10)}
SOFTMAX_OPS_PER_ELEMENT = 6
LOG_SOFTMAX_OPS_PER_ELEMENT = 6


def _axis(a, shape: List[int]) -> int:
    rank = len(shape)
    axis = a.int("axis", -1)
    if not -rank <= axis < rank or rank < 2:
        a.fail(f"axis {axis} is out of range for an input of shape {shape}")
    return axis - rank if axis >= 0 else axis


def layernorm(a, ctx, lname, in_shapes, params, weights):
    shape = list(in_shapes[0])
    axis = _axis(a, shape)
    d = shape[axis]
    eps = a.float("epsilon", 1e-5)
    if not eps >= 0:
        a.fail(f"epsilon {eps} must be >= 0")
    params.update(axis=axis, epsilon=eps)
    extra = 0   # vector ops per element of the interior quantization points
    rms = a.int("rms", 0)
    if rms:   # RMSNorm: y = x / sqrt(mean(x^2) + eps) * gamma [+ beta]
        params["rms"] = 1
    form = a.str("form", "") or None   # x * inv + c (fuse/qdq_norm_affine.py), interior points only
    if form is not None:
        if form not in ("keras3", "tf") or rms or not a.has("inner_scales"):
            a.fail(f"form {form!r} (keras3 or tf) needs inner_scales and no rms")
        params["form"] = form
    if a.has("inner_scales"):   # interior quantization points (var, vareps, norm, scaled, or 8: mean, diff,
        # square, var, vareps, std, norm, scaled; RMSNorm:
        # square, var, vareps, inv, norm; a form: mean, negmean, diff, square, var, vareps, rstd, inv,
        # xinv, minv, res)
        points = ("11 entries (mean, negmean, diff, square, var, vareps, rstd, inv, xinv, minv, res)" if form else
                  "5 entries (square, var, vareps, inv, norm)" if rms else
                  "4 entries (var, vareps, norm, scaled) or 8 (mean, diff, square, var, vareps, std, norm, scaled)")
        raw = unwrap(a.raw["inner_scales"])
        try:
            scales = [float(to_number(v)) for v in (raw if isinstance(raw, list) else [raw])]
        except (TypeError, ValueError):
            a.fail(f"inner_scales is not a list of numbers: {a.raw['inner_scales']!r}")
        zps = a.ints("inner_zero_points")
        types = a.str("inner_types", "").split(",")
        if not (len(scales) == len(zps) == len(types) and len(scales) in ((11,) if form else (5,) if rms else (4, 8))):
            a.fail(f"inner_scales, inner_zero_points and inner_types need {points}")
        for s, z, t in zip(scales, zps, types):
            lo, hi = {"int8": (-128, 127), "uint8": (0, 255)}.get(t, (0, 0))
            if s != 0 and (not np.isfinite(s) or s < 0 or t not in ("int8", "uint8") or not lo <= z <= hi):
                a.fail(f"interior quantization ({s}, {z}, {t!r}) is not a positive scale with an int8/uint8 zero point")
        params.update(inner_scales=[float(np.float32(s)) for s in scales], inner_zero_points=[int(z) for z in zps],
                      inner_types=types)
        kind = "form" if form else "rms" if rms else "layernorm8" if len(scales) == 8 else "layernorm"
        extra += QUANT_POINT_OPS * sum(1 for k in ELEMENT_POINTS[kind] if scales[k] != 0) + (4 if form else 0)
    mean_sum = a.str("mean_sum", "") or None   # onnxruntime summed the mean over a strided axis (ort_reduce.py)
    if mean_sum is not None:
        if mean_sum != "strided" or rms or form or not a.has("inner_scales"):
            a.fail(f"mean_sum {mean_sum!r}: \"strided\", on a layer norm with inner_scales only")
        params["mean_sum"] = mean_sum
    if a.has("mean_muls"):   # each mean times a constant before its point (fuse/qdq_layernorm.py)
        muls = [float(to_number(v)) for v in (lambda r: r if isinstance(r, list) else [r])(unwrap(a.raw["mean_muls"]))]
        if len(muls) != 2 or not all(0 < k < np.inf for k in muls) or rms or form or not a.has("inner_scales"):
            a.fail(f"mean_muls {muls}: two positive factors, on a layer norm with inner_scales only")
        params["mean_muls"] = [float(np.float32(k)) for k in muls]
    ort_kernel = a.str("ort_kernel", "") or None   # an int8_out layer norm onnxruntime runs as InstanceNorm
    if ort_kernel is not None:
        if ort_kernel != "instance_norm" or rms or form or a.has("inner_scales"):
            a.fail(f"ort_kernel {ort_kernel!r}: \"instance_norm\", on a layer norm without rms, form or inner_scales")
        params["ort_kernel"] = ort_kernel
    for role, required in (("gamma", True), ("beta", False)):
        if not a.has(f"{role}_const_name"):
            if required:
                a.fail(f"LayerNorm needs {role}_const_name")
            continue
        v = decode_const(ctx.consts, a.str(f"{role}_const_name"), a).reshape(-1)
        if v.size != d:
            a.fail(f"{role} has {v.size} values for an axis of size {d} (input {shape}, axis {axis})")
        weights[role] = ctx.weight(a, f"{lname}.{role}", v, "C", fp16=False)
    blocked = norm_blocked_extra_ops(d, DEFAULT_TARGET)   # the compile step has no target: the default's row
    return shape, int(np.prod(shape)) * (LAYERNORM_OPS_PER_ELEMENT + extra + blocked)


def softmax(a, ctx, lname, in_shapes, params, weights):
    shape = list(in_shapes[0])
    params["axis"] = _axis(a, shape)
    log = a.int("log", 0)
    if log not in (0, 1):
        a.fail(f"log must be 0 or 1, got {log}")
    if log:
        params["log"] = 1
    ops = LOG_SOFTMAX_OPS_PER_ELEMENT if log else SOFTMAX_OPS_PER_ELEMENT
    if a.has("nan_fill"):   # a NaN result (a row of -inf scores) written as the fill: one select more
        fill = a.float("nan_fill")
        if not (np.isfinite(fill) and float(np.float16(fill)) == fill):
            a.fail(f"nan_fill {fill!r} is not a finite fp16 value")
        params["nan_fill"], ops = fill, ops + 1
    if a.has("input_const_name"):   # an additive fp32 mask of the stored shape (fuse/qdq_masked_softmax.py)
        if not (a.has("precision") and a.str("precision").lower() == "int8" and a.str("requant", "") == "float"):
            a.fail("a Softmax mask (input_const) needs precision int8 with requant float")
        c = decode_const(ctx.consts, a.str("input_const_name"), a)
        if c.size != int(np.prod(shape)):
            a.fail(f"the Softmax mask has {c.size} values for an input of shape {shape}")
        weights["mask"] = ctx.weight(a, f"{lname}.mask", c.reshape(shape), "ND", fp16=False)
        ops += 1   # one fp32 add per element
    return shape, int(np.prod(shape)) * ops
