"""A layer norm written as ``x * inv + c`` (tf2onnx's Keras forms) that onnxruntime's quantizer cut
with Q -> DQ pairs, as one Mrvl LayerNorm with ``form`` and its interior quantization points
(docs/fusion.md "int8 in transformers and recurrent models"):

    m = mean(x) -> [mean];  d = x - m -> [diff];  d * d -> [square] -> mean -> [var] -> + eps
      -> [vareps] -> Sqrt -> Reciprocal | Div(1, .) -> [rstd] -> [* gamma -> [inv]]
    xa = x * inv -> [xinv]
    "keras3" (Keras 3):  c = Neg(m) -> [negmean] -> * inv -> [minv] -> [+ beta -> [res]]
    "tf" (Keras 2, tf.nn.batch_normalization):  c = m * inv -> [minv] -> beta - . | Neg(.) -> [res]
    y = xa + c

(the means: ReduceMean over the last axis, or GlobalAveragePool of a [B, T, D] tensor). Each
bracketed pair is optional; the layer quantizes its fp32 intermediate there as the pair does
(``INNER`` order; scale 0: no pair), the pair after the final Add is its output pair
(``qdq_transformer.merge_output_pairs``). Before, these ops stayed on the CPU between the pairs
(a Keras 3 encoder QDQ: 5 regions).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from ..graph_index import GraphIndex, attr
from ..target import Target
from .groups import Group
from .patterns import tensor_reason
from .qconst import constant_value
from .qdq_layernorm import const_nodes, const_other, only, through

INNER = ("mean", "negmean", "diff", "square", "var", "vareps", "rstd", "inv", "xinv", "minv", "res")
ENTRY_OPS = ("ReduceMean", "GlobalAveragePool")


def _mean_of(g: GraphIndex, n: Optional[onnx.NodeProto], rank: int) -> bool:
    """``n`` averages its input over the last axis, keeping it (rank >= 3 for ReduceMean)."""
    if n is None:
        return False
    if n.op_type == "GlobalAveragePool":
        return rank == 3
    if n.op_type != "ReduceMean" or not attr(n, "keepdims", 1):
        return False
    axes = attr(n, "axes")
    if axes is None and len(n.input) > 1 and n.input[1]:
        axes = np.asarray(g.const(n.input[1])).reshape(-1).tolist() if g.is_const(n.input[1]) else None
    return axes is not None and len(axes) == 1 and int(axes[0]) % rank == rank - 1


def _other(n: onnx.NodeProto, t: str) -> Optional[str]:
    if len(n.input) != 2 or t not in n.input or n.input[0] == n.input[1]:
        return None
    return n.input[1] if n.input[0] == t else n.input[0]


def _is_one(g: GraphIndex, t: str) -> bool:
    v = constant_value(g, t)
    return v is not None and np.asarray(v).size == 1 and float(np.asarray(v).reshape(-1)[0]) == 1.0


def _vector(g: GraphIndex, c: Optional[str], d: int) -> Optional[np.ndarray]:
    v = constant_value(g, c) if c else None
    if v is None:
        return None
    v = np.asarray(v, np.float32)
    if v.size not in (1, d) or any(s != 1 for s in v.shape[:-1]):
        return None
    return np.ascontiguousarray(np.broadcast_to(v.reshape(-1), [d]), np.float32)


class _Walk:
    """The nodes and quantization points met along the form."""

    def __init__(self, g: GraphIndex):
        self.g, self.nodes, self.quant = g, [], {}

    def step(self, t: str, point: str, ops) -> Optional[onnx.NodeProto]:
        """The only reader (of ``ops``) of ``t`` after an optional pair recorded at ``point``."""
        return only(self.g, self.pair_out(t, point), ops)

    def pair_out(self, t: str, point: str) -> str:
        """``t`` after an optional pair (its nodes taken, its quantization recorded at ``point``)."""
        t2, qp, pair = through(self.g, t)
        self.quant[point] = qp
        self.nodes += pair
        return t2


def build(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed=frozenset()):
    """``n``: the mean of x. A LayerNorm group with ``form`` and interior quantization, None (no
    such form, or no pair inside: legalize's layernorm_canonical takes the float forms), or a reason."""
    x = n.input[0] if n.input else ""
    shape = g.shape(x) if x else None
    if not shape or len(shape) < 2 or not _mean_of(g, n, len(shape)):
        return None
    w = _Walk(g)
    w.nodes.append(n)
    t_m = w.pair_out(n.output[0], "mean")
    readers = g.consumers.get(t_m, [])
    sub = next((u for u in readers if u.op_type == "Sub" and list(u.input) == [x, t_m]), None)
    other = [u for u in readers if u is not sub]
    if sub is None or len(other) != 1 or t_m in g.output_set or other[0].op_type not in ("Neg", "Mul"):
        return None
    form = "keras3" if other[0].op_type == "Neg" else "tf"
    sq = w.step(sub.output[0], "diff", ("Mul",))
    if sq is None or len(set(sq.input)) != 1:
        return None
    var = w.step(sq.output[0], "square", ENTRY_OPS)
    if var is None or var.op_type != n.op_type or not _mean_of(g, var, len(shape)):
        return None
    t_v = w.pair_out(var.output[0], "var")
    add = only(g, t_v, ("Add",))
    eps = const_other(g, add, t_v) if add is not None else None
    eps_v = None if eps is None else np.asarray(constant_value(g, eps), np.float32).reshape(-1)
    if eps_v is None or eps_v.size != 1:
        return None
    w.nodes += [sub, sq, var, add] + const_nodes(g, eps)
    sqrt = w.step(add.output[0], "vareps", ("Sqrt",))
    rec = only(g, sqrt.output[0], ("Reciprocal", "Div")) if sqrt is not None else None
    if rec is None or rec.op_type == "Div" and not (rec.input[1] == sqrt.output[0] and _is_one(g, rec.input[0])):
        return None
    w.nodes += [sqrt, rec]
    t_inv = w.pair_out(rec.output[0], "rstd")
    gamma = None
    users = g.consumers.get(t_inv, [])
    if len(users) == 1 and users[0].op_type == "Mul" and (c := _other(users[0], t_inv)) is not None \
            and (gamma := _vector(g, c, shape[-1])) is not None:
        w.nodes += [users[0]] + const_nodes(g, c)
        t_inv = w.pair_out(users[0].output[0], "inv")
    muls = g.consumers.get(t_inv, [])
    xa = next((u for u in muls if u.op_type == "Mul" and _other(u, t_inv) == x), None)
    mb = next((u for u in muls if u is not xa and u.op_type == "Mul"), None)
    if xa is None or mb is None or len(muls) != 2 or t_inv in g.output_set:
        return None
    w.nodes += [xa]
    t_xa = w.pair_out(xa.output[0], "xinv")
    beta = None
    if form == "keras3":
        w.nodes.append(other[0])
        if w.pair_out(other[0].output[0], "negmean") != _other(mb, t_inv):
            return None
        w.nodes.append(mb)
        t_c = w.pair_out(mb.output[0], "minv")
        ba = only(g, t_c, ("Add",))
        c = _other(ba, t_c) if ba is not None else None
        if c is not None and (beta := _vector(g, c, shape[-1])) is not None:
            w.nodes += [ba] + const_nodes(g, c)
            t_c = w.pair_out(ba.output[0], "res")
    else:
        if other[0] is not mb:
            return None
        w.nodes.append(mb)
        t_c = w.pair_out(mb.output[0], "minv")
        fin = only(g, t_c, ("Sub", "Neg", "Mul"))
        if fin is not None and fin.op_type == "Mul":   # beta - y as legalize writes it: -1 * y + beta (exact)
            one = _vector(g, _other(fin, t_c), 1)
            add = only(g, fin.output[0], ("Add",)) if one is not None and one[0] == -1.0 else None
            c = _other(add, fin.output[0]) if add is not None else None
            if c is None or (beta := _vector(g, c, shape[-1])) is None:
                return None
            w.nodes += [fin] + const_nodes(g, _other(fin, t_c)) + const_nodes(g, c)
            fin = add
        elif fin is None or fin.op_type == "Sub" and (fin.input[1] != t_c or (beta := _vector(g, fin.input[0], shape[-1])) is None):
            return None
        w.nodes += [fin] + (const_nodes(g, fin.input[0]) if fin.op_type == "Sub" else [])
        t_c = w.pair_out(fin.output[0], "res")
    out = only(g, t_xa, ("Add",))
    if out is None or sorted(out.input) != sorted([t_xa, t_c]) or t_xa == t_c:
        return None
    w.nodes.append(out)
    if not any(w.quant.values()):
        return None
    if {m.name for m in w.nodes} & (set(claimed) | set(g.excluded)):
        return "its nodes are excluded by the user or taken by another layer"
    reason = tensor_reason(g, x, out.output[0], target, "LayerNorm")
    if reason:
        return reason
    if shape[-1] > target.max_channels:
        return f"{shape[-1]} features exceed the limit {target.max_channels}"
    if not float(eps_v[0]) >= 0:
        return f"epsilon {float(eps_v[0])} is negative"
    qs = [w.quant.get(p) for p in INNER]
    attrs = {"axis": len(shape) - 1, "epsilon": float(eps_v[0]), "form": form,
             "inner_scales": [float(q[0]) if q else 0.0 for q in qs],
             "inner_zero_points": [int(q[1]) if q else 0 for q in qs],
             "inner_types": ",".join(q[2] if q else "" for q in qs)}
    weights = {"gamma": gamma if gamma is not None else np.ones(shape[-1], np.float32)}
    if beta is not None:
        weights["beta"] = beta
    return Group("LayerNorm", "mrvl.layernorm", w.nodes, [x], out.output[0], attrs, weights)
