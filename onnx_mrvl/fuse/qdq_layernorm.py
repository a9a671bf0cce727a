"""A decomposed layer norm that onnxruntime's quantizer cut with Q -> DQ pairs (QDQ exports of
opset < 17) as one Mrvl LayerNorm carrying its interior quantization points (docs/fusion.md
"int8 in transformers and recurrent models"):

    x -> ReduceMean = m;  d = x - m;  v = ReduceMean(Pow(d, 2) | d * d)  -> [Q-DQ: var]
      -> + eps -> [Q-DQ: vareps] -> Sqrt -> d / . -> [Q-DQ: norm] -> [* gamma -> [Q-DQ: scaled]]
      -> [+ beta]

Each bracketed pair is optional; the layer quantizes its fp32 intermediate value there exactly as
the pair does (``inner_scales`` / ``inner_zero_points`` / ``inner_types``, one entry per point in
the order var, vareps, norm, scaled; scale 0: no pair). A layer norm with pairs also after the mean,
the difference, the square or the square root (``POINTS8``: onnxruntime's quantizer pairs ``d`` and
``d * d`` when the square is a Mul, a quantized input of it; toolkits that quantize every op's output
pair them all) carries eight points: mean, diff, square, var, vareps, std, norm, scaled. The pair after the last node is the layer's
output pair (``qdq_transformer.merge_output_pairs``). None when no interior pair is found (legalize's
``layernorm_canonical`` took the pair-free forms).

An RMSNorm cut the same way (``build_qdq_rmsnorm``, anchored at the square; Llama / Qwen2 / T5 QDQ
exports: the quantizer pairs the inputs and outputs of its Add and Muls) is one Mrvl LayerNorm with
``rms`` = 1 and five points (``RMS_POINTS``):

    x -> Pow(x, 2) | x * x -> [Q-DQ: square] -> ReduceMean -> [Q-DQ: var] -> + eps -> [Q-DQ: vareps]
      -> Sqrt -> (Reciprocal | Div(1, .)) -> [Q-DQ: inv] -> x * . | Div(x, Sqrt) -> [Q-DQ: norm]
      -> [* gamma]

(with no ``* gamma`` the pair after the product is the output pair, not ``norm``).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import onnx

from ..graph_index import GraphIndex, attr
from ..ort_plan import strided_mean
from ..target import Target
from .groups import Group
from .patterns import tensor_reason
from .qconst import const_dq, constant_value
from .qdq import qparams

POINTS = ("var", "vareps", "norm", "scaled")
POINTS8 = ("mean", "diff", "square", "var", "vareps", "std", "norm", "scaled")
RMS_POINTS = ("square", "var", "vareps", "inv", "norm")
RMS_ENTRY_OPS = ("Pow", "Mul")


def _axes(g: GraphIndex, n: onnx.NodeProto) -> Optional[List[int]]:
    if n.op_type != "ReduceMean" or not attr(n, "keepdims", 1):
        return None
    if len(n.input) > 1 and n.input[1]:
        return [int(a) for a in np.asarray(g.const(n.input[1])).reshape(-1)] if g.is_const(n.input[1]) else None
    axes = attr(n, "axes")
    return list(axes) if axes is not None else None


def _only(g: GraphIndex, t: str, ops) -> Optional[onnx.NodeProto]:
    users = list({u.name: u for u in g.consumers.get(t, [])}.values())   # Mul(t, t) reads it twice
    if len(users) != 1 or t in g.output_set or users[0].op_type not in ops:
        return None
    return users[0]


def _through(g: GraphIndex, t: str):
    """(tensor after an optional Q -> DQ pair on ``t``, its qparams or None, its nodes)."""
    q = _only(g, t, ("QuantizeLinear",))
    dq = _only(g, q.output[0], ("DequantizeLinear",)) if q is not None else None
    if dq is None:
        return t, None, []
    qp = qparams(g, q)
    if isinstance(qp, str) or qparams(g, dq) != qp:
        return t, None, []
    return dq.output[0], qp, [q, dq]


def _const_other(g: GraphIndex, n: onnx.NodeProto, t: str):
    """``n``'s other input when it is a constant or a DequantizeLinear of constants (legalize keeps
    the DQ of a quantized constant read by a QDQ Add / Mul), else None."""
    others = [i for i in n.input if i != t]
    if len(n.input) != 2 or len(others) != 1:
        return None
    return others[0] if constant_value(g, others[0]) is not None else None


def _const_nodes(g: GraphIndex, c: str) -> list:
    """The DequantizeLinear producing constant ``c`` when the group may take it (its only reader)."""
    dq = const_dq(g, c)
    return [dq] if dq is not None and len(g.consumers.get(c, [])) == 1 and c not in g.output_set else []


def _mean_mul(g: GraphIndex, t: str):
    """(tensor after an optional ``Mul(t, k)`` by a positive scalar constant, k (1.0 without), its
    nodes): Quark's mean correction (its NPU's mean as a sum times a rounded 1 / n, ``* 0.99609375``)."""
    mul = _only(g, t, ("Mul",))
    c = _const_other(g, mul, t) if mul is not None else None
    k = _scalar(g, c) if c is not None else None
    if k is None or not 0 < k < np.inf:
        return t, 1.0, []
    return mul.output[0], k, [mul] + _const_nodes(g, c)


def build_qdq_layernorm(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed=frozenset()):
    """``n``: the mean's ReduceMean. A LayerNorm group with interior quantization, None (no such
    form: other patterns take it), or a reason."""
    x = n.input[0] if n.input else ""
    shape = g.shape(x) if x else None
    axes = _axes(g, n)
    if shape is None or axes is None or len(axes) != 1 or axes[0] % len(shape) != len(shape) - 1:
        return None
    m, k_mean, m_mul = _mean_mul(g, n.output[0])
    m, q_mean, m_pair = _through(g, m)
    subs = [s for s in g.consumers.get(m, []) if s.op_type == "Sub" and list(s.input) == [x, m]]
    if len(subs) != 1 or len(g.consumers.get(m, [])) != 1:
        return None
    d, q_diff, d_pair = _through(g, subs[0].output[0])
    sq = next((u for u in g.consumers.get(d, []) if u.op_type == "Pow" and u.input[0] == d and g.is_const(u.input[1])
               and float(np.asarray(g.const(u.input[1])).reshape(-1)[0]) == 2.0
               or u.op_type == "Mul" and list(u.input) == [d, d]), None)
    t, q_square, s_pair = _through(g, sq.output[0]) if sq is not None else (None, None, [])
    var = _only(g, t, ("ReduceMean",)) if sq is not None else None
    va = _axes(g, var) if var is not None else None
    if va is None or [a % len(shape) for a in va] != [a % len(shape) for a in axes]:   # [2] and [-1] alike
        return None
    t, k_var, v_mul = _mean_mul(g, var.output[0])
    nodes = [n] + m_mul + m_pair + [subs[0]] + d_pair + [sq] + s_pair + [var] + v_mul
    quant = {"mean": q_mean, "diff": q_diff, "square": q_square}
    t, qp, pair = _through(g, t)
    add = _only(g, t, ("Add",))
    eps = _const_other(g, add, t) if add is not None else None
    if eps is None:
        return None
    quant["var"], nodes = qp, nodes + pair + [add] + _const_nodes(g, eps)
    t, qp, pair = _through(g, add.output[0])
    sd = _only(g, t, ("Sqrt",))
    if sd is None:
        return None
    quant["vareps"], nodes = qp, nodes + pair + [sd]
    t, quant["std"], pair = _through(g, sd.output[0])
    div = _only(g, t, ("Div",))
    if div is None or list(div.input) != [d, t] or set(u.name for u in g.consumers.get(d, [])) != {sq.name, div.name}:
        return None
    nodes += pair + [div]
    last, weights = div, {}
    for point, op, role in (("norm", "Mul", "gamma"), ("scaled", "Add", "beta")):
        t, qp, pair = _through(g, last.output[0])
        nxt = _only(g, t, (op,))
        c = _const_other(g, nxt, t) if nxt is not None else None
        if c is None:
            break
        v = np.asarray(constant_value(g, c), np.float32)
        if v.size not in (1, shape[-1]) or v.ndim > len(shape) or any(s != 1 for s in v.shape[:-1]):
            return None
        weights[role] = np.ascontiguousarray(np.broadcast_to(v.reshape(-1), [shape[-1]]), np.float32)
        quant[point], nodes, last = qp, nodes + pair + [nxt] + _const_nodes(g, c), nxt
    if not any(quant.values()):
        return None
    if {x.name for x in nodes} & (set(claimed) | set(g.excluded)):
        return "its nodes are excluded by the user or taken by another layer"
    reason = tensor_reason(g, x, last.output[0], target, "LayerNorm")
    if reason:
        return reason
    if shape[-1] > target.max_channels:
        return f"{shape[-1]} features exceed the limit {target.max_channels}"
    eps_v = float(np.asarray(constant_value(g, eps), np.float32).reshape(-1)[0])
    if not eps_v >= 0:
        return f"epsilon {eps_v} is negative"
    weights.setdefault("gamma", np.ones(shape[-1], np.float32))
    qs = [quant.get(p) for p in (POINTS8 if any(quant.get(p) for p in POINTS8 if p not in POINTS) else POINTS)]
    attrs = {"axis": len(shape) - 1, "epsilon": eps_v,
             "inner_scales": [float(q[0]) if q else 0.0 for q in qs],
             "inner_zero_points": [int(q[1]) if q else 0 for q in qs],
             "inner_types": ",".join(q[2] if q else "" for q in qs)}
    if (k_mean, k_var) != (1.0, 1.0):   # the means' constant factors (Quark's mean correction)
        attrs["mean_muls"] = [k_mean, k_var]
    if strided_mean(n):   # onnxruntime sums this mean over a strided axis (center_before_transpose)
        attrs["mean_sum"] = "strided"
    return Group("LayerNorm", "mrvl.layernorm", nodes, [x], last.output[0], attrs, weights)


def _scalar(g: GraphIndex, t: str) -> Optional[float]:
    v = constant_value(g, t) if t else None
    v = None if v is None else np.asarray(v)
    return float(v.reshape(-1)[0]) if v is not None and v.size == 1 and v.dtype.kind == "f" else None


def _rms_square(g: GraphIndex, n: onnx.NodeProto) -> Optional[str]:
    """x when ``n`` is ``Pow(x, 2)`` or ``x * x``, else None."""
    if n.op_type == "Pow" and len(n.input) == 2 and _scalar(g, n.input[1]) == 2.0:
        return n.input[0]
    if n.op_type == "Mul" and len(n.input) == 2 and n.input[0] == n.input[1]:
        return n.input[0]
    return None


def _rms_axis(g: GraphIndex, n: onnx.NodeProto, rank: int) -> Optional[int]:
    axes = _axes(g, n)
    return int(axes[0]) % rank if axes is not None and len(axes) == 1 else None


def _rms_product(g: GraphIndex, sqrt: onnx.NodeProto, x: str):
    """(nodes after the Sqrt up to the normalised product, the product, its "inv" qparams, the
    1 / sqrt's pair) for ``x * (1 / sqrt)`` (Reciprocal or Div(1, .), optionally paired) or
    ``x / sqrt``; None otherwise."""
    nxt = _only(g, sqrt.output[0], ("Reciprocal", "Div"))
    if nxt is None:
        return None
    if nxt.op_type == "Div" and list(nxt.input) == [x, sqrt.output[0]]:
        return [], nxt, None
    if nxt.op_type == "Div" and not (nxt.input[1] == sqrt.output[0] and _scalar(g, nxt.input[0]) == 1.0):
        return None
    t, qp, pair = _through(g, nxt.output[0])
    mul = _only(g, t, ("Mul",))
    if mul is None or len(mul.input) != 2 or sorted(mul.input) != sorted([x, t]) or x == t:
        return None
    return [nxt] + (_const_nodes(g, nxt.input[0]) if nxt.op_type == "Div" else []) + pair, mul, qp


def build_qdq_rmsnorm(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed=frozenset()):
    """``n``: the square of an RMSNorm. A LayerNorm group (``rms`` = 1) with interior quantization,
    None (no such form, or no interior pair: fuse/rmsnorm.py takes it), or a reason."""
    x = _rms_square(g, n)
    shape = g.shape(x) if x else None
    if not shape:
        return None
    t, q_sq, pair = _through(g, n.output[0])
    mean = _only(g, t, ("ReduceMean",))
    a = _rms_axis(g, mean, len(shape)) if mean is not None else None
    if a is None:
        return None
    nodes, quant = [n] + pair + [mean], {"square": q_sq}
    t, quant["var"], pair = _through(g, mean.output[0])
    add = _only(g, t, ("Add",))
    eps = _const_other(g, add, t) if add is not None else None
    eps_v = _scalar(g, eps) if eps is not None else None
    if eps_v is None:
        return None
    nodes += pair + [add] + _const_nodes(g, eps)
    t, quant["vareps"], pair = _through(g, add.output[0])
    sqrt = _only(g, t, ("Sqrt",))
    prod = _rms_product(g, sqrt, x) if sqrt is not None else None
    if prod is None:
        return None
    more, y, quant["inv"] = prod
    nodes += pair + [sqrt] + more + [y]
    last, gamma = y, np.ones(shape[a], np.float32)
    t, qp, pair = _through(g, y.output[0])
    scale = _only(g, t, ("Mul",))
    w = _const_other(g, scale, t) if scale is not None else None
    v = None if w is None else np.asarray(constant_value(g, w), np.float32)
    k = len(shape) - a   # the normalised axis, counted from the end
    if v is not None and (v.size == 1 or (k <= v.ndim <= len(shape) and v.shape[v.ndim - k] == shape[a] == v.size)):
        gamma = np.ascontiguousarray(np.broadcast_to(v.reshape(-1), [shape[a]]), np.float32)
        quant["norm"], nodes, last = qp, nodes + pair + [scale] + _const_nodes(g, w), scale
    if not any(quant.values()):
        return None
    if {m.name for m in nodes} & (set(claimed) | set(g.excluded)):
        return "its nodes are excluded by the user or taken by another layer"
    reason = tensor_reason(g, x, last.output[0], target, "RMSNorm")
    if reason:
        return reason
    if g.shape(last.output[0]) != shape:
        return "the RMSNorm's scale broadcasts its result to another shape"
    if shape[a] > target.max_channels:
        return f"{shape[a]} features exceed the limit {target.max_channels}"
    if not eps_v >= 0:
        return f"epsilon {eps_v} is negative"
    qs = [quant.get(p) for p in RMS_POINTS]
    attrs = {"axis": a, "epsilon": eps_v, "rms": 1,
             "inner_scales": [float(q[0]) if q else 0.0 for q in qs],
             "inner_zero_points": [int(q[1]) if q else 0 for q in qs],
             "inner_types": ",".join(q[2] if q else "" for q in qs)}
    return Group("LayerNorm", "mrvl.rmsnorm", nodes, [x], last.output[0], attrs, {"gamma": gamma})


# the helpers qdq_norm_affine.py shares
only, through, const_other, const_nodes = _only, _through, _const_other, _const_nodes
