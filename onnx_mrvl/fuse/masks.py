"""Attention masks whose fill does not fit fp16: ``Add(scores, M)`` with a constant M holding
float32's lowest (-3.4028235e38, what Hugging Face writes) or -inf, and
``Where(cond, scores, fill)`` with a constant boolean ``cond`` and such a fill (dynamo's causal
mask), when the result is read only by a Softmax over the last axis.

Both become ``Sum2D(scores, M')`` with M' = 0 where the score is kept and ``MASK_FILL`` = -32768
(-2**15, exact in fp16) where it is masked: a masked score ``x - 32768`` stays finite in fp16 for
|x| < 32736, and the Softmax after it gives it weight exp(-32768 + x - max) = 0 in float32, as
onnxruntime gives exp(-3.4e38 - max) = 0 or exp(-inf) = 0: every row with a kept key matches. A
row whose every key is masked differs: onnxruntime gives equal weights (Add: x is absorbed by
-3.4e38) or NaN (Where: every score -inf); here the scores ``x - 32768`` (fp16 spacing 32) keep a
trace of x, so the weights are finite but not equal (documented in docs/fusion.md). Masks that fit
fp16 (0 / -1e4, -10000) are ordinary Sum2D operands (patterns.build_eltwise), taken as they are.

A mask made at run time the way Hugging Face writes it, ``(1 - Cast(attention_mask)) * lowest``
(legalized: Cast -> Mul -1 -> Add 1 -> Mul lowest), and added to scores read only by a Softmax over
the last axis, becomes ``Mul2D(m, MASK_FILL)``: the factor is integer-valued (a Cast of an integer or
boolean tensor through Mul/Add/Sub/Neg by integer constants and shape ops), so with HF's 0/1 mask it
is 0 or 1 and the product 0 or MASK_FILL, the same case as above. (Other mask values overflow
onnxruntime's scores too: k * lowest for k >= 2 is -inf, k < 0 gives +3.4e38 and more.) The float
mask then runs in the region; before, the Mul by lowest stayed on the CPU and fed the region
-3.4e38, rounded to -inf at its input with an fp16-overflow warning every run.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np
import onnx

from ..graph_index import GraphIndex, attr
from ..target import Target
from .groups import Group, float_static
from .patterns import ELTWISE_RANKS, build_eltwise

MASK_FILL = -32768.0   # -2**15: exact in fp16, x + MASK_FILL finite for |x| < 32736, exp(MASK_FILL) == 0


def _softmax_reader(g: GraphIndex, t: str, depth: int = 3) -> Optional[str]:
    """None when ``t`` is read only by Softmax over its last axis, else the reason. Reshapes keeping
    the last axis (Hugging Face's older attention: ``view(B, h, T, S) + mask``, then
    ``view(B * h, T, S)`` and the Softmax: BART, Marian, TrOCR) pass: rows stay rows."""
    users = g.consumers.get(t, [])
    shape = g.shape(t)
    if t in g.output_set or not users:
        return "its result is a graph output"
    if shape is None:   # (legalize measured no shape: the Softmax's axis cannot be told)
        return "its result's shape is not known"
    rank = len(shape)
    for c in users:
        if c.op_type == "Reshape" and depth and c.input[0] == t:
            out = g.shape(c.output[0])
            if out and out[-1] == shape[-1] and _softmax_reader(g, c.output[0], depth - 1) is None:
                continue
        if c.op_type != "Softmax" or attr(c, "axis", -1 if _opset(g) >= 13 else 1) % rank != rank - 1:
            return f"its result is read by {c.op_type} '{c.name}', not only by a Softmax over the last axis"
    return None


def _opset(g: GraphIndex) -> int:
    return next((o.version for o in g.model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _mask_group(g: GraphIndex, n: onnx.NodeProto, x: str, keep: np.ndarray, target: Target):
    reason = float_static(g, [x, n.output[0]])
    if reason:
        return reason
    out = g.shape(n.output[0])
    if g.shape(x) != out or len(out) not in ELTWISE_RANKS or keep.ndim > len(out):
        return f"a mask of shape {list(keep.shape)} that widens the scores {g.shape(x)}"
    why = _softmax_reader(g, n.output[0])
    if why:
        return f"a mask fill beyond the fp16 range, and {why} (fp16 cannot hold the fill)"
    operand = np.where(keep, 0.0, MASK_FILL).astype(np.float32)
    return Group("Sum2D", "mrvl.sum", [n], [x], n.output[0], {}, {"operand": operand})


def build_add(g: GraphIndex, n: onnx.NodeProto, target: Target):
    """Add: a mask add with a fill beyond fp16 (see the module docstring), else build_eltwise."""
    if n.op_type == "Add" and len(n.input) == 2:
        consts = [t for t in n.input if g.is_const(t)]
        if len(consts) == 1 and g.elem_type(consts[0]) == onnx.TensorProto.FLOAT:
            m = np.asarray(g.const(consts[0]), dtype=np.float32)
            if m.size and np.nanmin(m) < -target.fp16_max:
                x = n.input[1] if consts[0] == n.input[0] else n.input[0]
                if np.isnan(m).any() or (m > target.fp16_max).any():
                    return build_eltwise(g, n, target)
                kept = m[m >= -target.fp16_max]
                if kept.size and np.any(kept != 0):
                    return ("a mask mixing fills beyond the fp16 range with other non-zero values "
                            "(only 0 / fill masks are clamped)")
                return _mask_group(g, n, x, m >= -target.fp16_max, target)
    return build_eltwise(g, n, target)


_INT_TYPES = {onnx.TensorProto.BOOL, onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16,
              onnx.TensorProto.UINT16, onnx.TensorProto.INT32, onnx.TensorProto.UINT32, onnx.TensorProto.INT64,
              onnx.TensorProto.UINT64}
_SHAPE_OPS = {"Reshape", "Unsqueeze", "Squeeze", "Expand", "Transpose", "Flatten", "Identity"}


def _integer_valued(g: GraphIndex, t: str, depth: int = 8) -> bool:
    """``t`` holds integers: a Cast of an integer/boolean tensor, through shape ops, Neg and
    Mul / Add / Sub whose other operand is an integer-valued constant."""
    n = g.producer.get(t)
    if n is None or depth == 0:
        return False
    if n.op_type == "Cast":
        return g.elem_type(n.input[0]) in _INT_TYPES
    if n.op_type in _SHAPE_OPS or n.op_type == "Neg":
        return _integer_valued(g, n.input[0], depth - 1)
    if n.op_type in ("Mul", "Add", "Sub") and len(n.input) == 2:
        consts = [x for x in n.input if g.is_const(x)]
        if len(consts) != 1:
            return False
        c = np.asarray(g.const(consts[0]), dtype=np.float64)
        if not (np.isfinite(c).all() and np.all(c == np.round(c)) and np.all(np.abs(c) <= 2 ** 11)):
            return False
        return _integer_valued(g, n.input[1] if consts[0] == n.input[0] else n.input[0], depth - 1)
    return False


def build_mul(g: GraphIndex, n: onnx.NodeProto, target: Target):
    """Mul(m, fill): Hugging Face's run-time mask (see the module docstring), else build_eltwise."""
    consts = [t for t in n.input if g.is_const(t)]
    if len(n.input) == 2 and len(consts) == 1 and g.elem_type(consts[0]) == onnx.TensorProto.FLOAT:
        c = np.asarray(g.const(consts[0]), dtype=np.float32)
        if c.size and np.isfinite(c).all() and float(c.max()) < -target.fp16_max:
            if float(c.min()) != float(c.max()):
                return "a mask fill beyond the fp16 range that is not one value"
            m = n.input[1] if consts[0] == n.input[0] else n.input[0]
            if not _integer_valued(g, m):
                return (f"a factor {float(c.max()):.4g} beyond the fp16 range times a tensor not known to "
                        f"hold integers (only a 0/1 mask cast from integers or booleans becomes a mask fill)")
            users = g.consumers.get(n.output[0], [])
            if n.output[0] in g.output_set or not users:
                return "a mask fill beyond the fp16 range whose result is a graph output"
            for a in users:
                why = (f"its result is read by {a.op_type} '{a.name}'" if a.op_type != "Add"
                       else _softmax_reader(g, a.output[0]))
                if why:
                    return f"a mask fill beyond the fp16 range, and {why} (fp16 cannot hold the fill)"
            grp = build_eltwise(g, n, target)
            if isinstance(grp, Group):
                grp.weights["operand"] = np.full(c.shape, MASK_FILL, np.float32)
            return grp
    return build_eltwise(g, n, target)


def cpu_mask_fills(g: GraphIndex, groups, target: Target) -> Dict[str, Tuple[int, np.ndarray, float]]:
    """CPU ``Where(cond, 0, fill)`` / ``Where(cond, fill, 0)`` of a run-time boolean mask (torch's
    dynamo exporter: ``Where(mask, 0, float32 lowest)``) whose result is added in a region to scores
    read only by a Softmax over the last axis, with a finite fill beyond fp16: {Where name: (input
    index of the fill, MASK_FILL of its shape, the fill)}. The CPU then writes MASK_FILL, which the region's
    fp16 input holds (the fill itself would enter it as -inf: an fp16 overflow every run), with the
    masked-score semantics of the module docstring. A -inf fill stays as it is: fp16 holds -inf,
    and a fully masked row then gives NaN as in onnxruntime."""
    in_group = {x.name: grp for grp in groups for x in grp.nodes}
    found = {}
    for n in g.nodes:
        if n.op_type != "Where" or n.name in in_group or len(n.input) != 3 or g.is_const(n.input[0]):
            continue
        vals = [np.asarray(g.const(t), np.float32) if g.is_const(t) else None for t in n.input[1:]]
        if any(v is None or v.size != 1 for v in vals) or g.elem_type(n.output[0]) != onnx.TensorProto.FLOAT:
            continue
        a, b = (float(v.reshape(-1)[0]) for v in vals)
        k = 2 if a == 0 else 1 if b == 0 else 0
        fill = b if k == 2 else a
        if not k or not (np.isfinite(fill) and fill < -target.fp16_max) or n.output[0] in g.output_set:
            continue
        users = g.consumers.get(n.output[0], [])
        if users and all(u.op_type == "Add" and u.name in in_group and _softmax_reader(g, u.output[0]) is None
                         for u in users):
            found[n.name] = (k, np.full(vals[k - 1].shape, MASK_FILL, np.float32), fill)
    return found


def build_where(g: GraphIndex, n: onnx.NodeProto, target: Target):
    """Where(cond constant, scores, fill) or Where(cond, fill, scores), fill a constant scalar at or
    below -fp16_max (-inf, float32's lowest)."""
    cond, a, b = n.input[:3]
    if not g.is_const(cond):
        return "Where with a condition computed at run time (a boolean tensor the accelerator does not take)"
    fills = [t for t in (a, b) if g.is_const(t)]
    if len(fills) != 1:
        return "Where without exactly one constant branch (the mask fill)"
    fill = np.asarray(g.const(fills[0]), dtype=np.float32)
    if fill.size != 1 or not float(fill.reshape(-1)[0]) <= -target.fp16_max:
        return (f"Where with the fill {fill.reshape(-1)[:4].tolist()} (only a scalar mask fill at or below "
                f"-{target.fp16_max:g}, -inf or float32's lowest, becomes a mask add)")
    c = np.asarray(g.const(cond)).astype(bool)
    x = b if fills[0] == a else a
    keep = c if x == a else ~c
    return _mask_group(g, n, x, keep, target)
