"""RMSNorm (T5LayerNorm, LlamaRMSNorm, Qwen2RMSNorm, Mistral, Gemma-style with its weight given as
``1 + w`` folded into the constant) as the exporters write it, over one axis -> Mrvl ``LayerNorm``
with ``rms`` = 1 (no mean subtracted):

    s = Pow(x, 2) | Mul(x, x);  m = ReduceMean(s, [a], keepdims=1);  v = Add(m, eps)
    y = x * Reciprocal(Sqrt(v)) | x * Div(1, Sqrt(v)) | Div(x, Sqrt(v))   (torch.rsqrt's exports)
    [y = y * gamma]   (gamma a constant along axis a, either operand order)

onnxruntime's ``SimplifiedLayerNormalization`` (legalize's contrib_norm writes it out) is the same
form. Lowering (hardware-plausible: the LayerNorm's vector-unit pass without the mean and its
subtract): sum of squares in fp32, one rsqrt per row, multiply by it and by gamma, one fp16
rounding (docs/fusion.md, docs/simulator.md). Every intermediate must be read only inside the form
(x may have other readers: the residual). Before, the form stayed on the CPU (Pow / ReduceMean /
Sqrt / Reciprocal have no accelerator op) and cut every block of a Llama / T5 encoder (2 regions
per layer).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from ..graph_index import GraphIndex, attr
from ..target import Target
from .groups import Group
from .patterns import tensor_reason

ENTRY_OPS = ("Pow", "Mul")


def _const_scalar(g: GraphIndex, t: str) -> Optional[float]:
    if not g.is_const(t):
        return None
    v = np.asarray(g.const(t))
    return float(v.reshape(-1)[0]) if v.size == 1 and v.dtype.kind == "f" else None


def _only(g: GraphIndex, t: str, *ops: str) -> Optional[onnx.NodeProto]:
    users = g.consumers.get(t, [])
    if t in g.output_set or len(users) != 1 or users[0].op_type not in ops or \
            users[0].domain not in ("", "ai.onnx"):
        return None
    return users[0]


def _other(n: onnx.NodeProto, t: str) -> Optional[str]:
    if len(n.input) != 2 or t not in n.input or n.input[0] == n.input[1]:
        return None
    return n.input[1] if n.input[0] == t else n.input[0]


def _mean_axis(g: GraphIndex, n: onnx.NodeProto, rank: int) -> Optional[int]:
    if not attr(n, "keepdims", 1):
        return None
    axes = attr(n, "axes")
    if axes is None and len(n.input) > 1 and n.input[1]:
        axes = np.asarray(g.const(n.input[1])).reshape(-1).tolist() if g.is_const(n.input[1]) else None
    return int(axes[0]) % rank if axes is not None and len(axes) == 1 else None


def build(g: GraphIndex, n: onnx.NodeProto, target: Target):
    """The group of the RMSNorm whose square is ``n``; None when ``n`` starts no such form; a reason
    when it does but the accelerator cannot take it."""
    if n.op_type == "Pow":
        if len(n.input) != 2 or _const_scalar(g, n.input[1]) != 2.0:
            return None
    elif n.op_type != "Mul" or len(n.input) != 2 or n.input[0] != n.input[1]:
        return None
    x = n.input[0]
    shape = g.shape(x)
    if not shape:
        return None
    mean = _only(g, n.output[0], "ReduceMean")
    a = _mean_axis(g, mean, len(shape)) if mean is not None else None
    add = _only(g, mean.output[0], "Add") if a is not None else None
    eps = _const_scalar(g, _other(add, mean.output[0]) or "") if add is not None else None
    sqrt = _only(g, add.output[0], "Sqrt") if eps is not None else None
    if sqrt is None:
        return None
    nodes = [n, mean, add, sqrt]
    nxt = _only(g, sqrt.output[0], "Reciprocal", "Div")
    if nxt is None:
        return None
    if nxt.op_type == "Div" and nxt.input[1] == sqrt.output[0] and nxt.input[0] == x:
        y = nxt                                        # x / sqrt(v)
    else:
        if nxt.op_type == "Div" and not (nxt.input[1] == sqrt.output[0] and _const_scalar(g, nxt.input[0]) == 1.0):
            return None
        nodes.append(nxt)                              # 1 / sqrt(v): Reciprocal or Div(1, .)
        y = _only(g, nxt.output[0], "Mul")
        if y is None or _other(y, nxt.output[0]) != x:
            return None
    nodes.append(y)
    out = y.output[0]
    gamma = np.ones(shape[a], np.float32)
    scale = _only(g, out, "Mul")
    w = _other(scale, out) if scale is not None else None
    if w is not None and g.is_const(w):
        v = np.asarray(g.const(w), np.float32)
        k = len(shape) - a                 # the normalised axis, counted from the end
        along = v.size == 1 or (k <= v.ndim <= len(shape) and v.shape[v.ndim - k] == shape[a] == v.size)
        if along:
            gamma = np.ascontiguousarray(np.broadcast_to(v.reshape(-1), [shape[a]]), np.float32)
            nodes.append(scale)
            out = scale.output[0]
    reason = tensor_reason(g, x, out, target, "RMSNorm")
    if reason:
        return reason
    if g.shape(out) != shape:
        return "the RMSNorm's scale broadcasts its result to another shape"
    if shape[a] > target.max_norm_features:   # above max_channels: blocked passes (target.NORM_BLOCKED_LOWERING)
        return f"{shape[a]} features exceed the limit {target.max_norm_features}"
    if not eps >= 0:
        return f"epsilon {eps} is negative"
    return Group("LayerNorm", "mrvl.rmsnorm", nodes, [x], out, {"axis": a, "epsilon": eps, "rms": 1},
                 {"gamma": gamma})
