"""A softmax written out with its max subtracted -> ``Softmax(x, axis=a)``:

    jax.nn.softmax through jax2tf + tf2onnx (magika's head):
        mx = ReduceMax(x, [a], keepdims=0); mx = Max(-inf, mx)   (the guard of an empty / -inf row)
        e = Exp(x - bcast(mx));  y = e / bcast(ReduceSum(e, [a], keepdims=0))
    and by hand in PyTorch / Keras (keepdims means, no guard: ``e = (x - x.max(a, keepdim)).exp();
    e / e.sum(a, keepdim)``).

``bcast``: Reshape / Expand / Unsqueeze back to the keepdims shape (layernorm_moments.views_to).
The same function as the ONNX Softmax (which subtracts the max too); a form without the max
subtraction is left alone (it overflows to inf / NaN where Softmax does not). Every intermediate
must be read inside the form. Below opset 13 only the last axis (Softmax's 2-D coercion)."""
from __future__ import annotations

import math
from typing import Optional

from .base import Match, axes_of, is_float, read_outside, scalar
from .layernorm_moments import views_to

NAME = "softmax_expanded"
RESTORABLE = True   # a float re-expression: put back when none of it is offloaded (split/restore.py)
OPS = ("ReduceMax",)


def _std(n) -> bool:
    return n is not None and n.domain in ("", "ai.onnx")


def _reduce_axis(g, n, op: str, rank: int) -> Optional[int]:
    if not (_std(n) and n.op_type == op):
        return None
    axes = axes_of(g, n, 1)
    return axes[0] % rank if axes and len(axes) == 1 else None


def match(node, g) -> Optional[Match]:
    """Anchored at the ReduceMax (the first node of the form: the driver visits nodes in order, and
    sub_tensors would rewrite the Sub first)."""
    if not _std(node) or node.op_type != "ReduceMax" or not node.input:
        return None
    x = node.input[0]
    sx = g.shape(x)
    if sx is None or len(sx) < 1 or any(not isinstance(d, int) for d in sx):
        return None
    rank = len(sx)
    a = _reduce_axis(g, node, "ReduceMax", rank)
    if a is None:
        return None
    kept = tuple(1 if k == a else d for k, d in enumerate(sx))
    nodes, t = [node], node.output[0]
    guard = g.only_consumer(t)
    if _std(guard) and guard.op_type == "Max" and len(guard.input) == 2:
        other = guard.input[0] if guard.input[1] == t else guard.input[1]
        if not g.is_const(other) or scalar(g.const(other)) != -math.inf:
            return None
        nodes.append(guard)
        t = guard.output[0]
    mb, views = views_to(g, t, kept)
    sub = g.only_consumer(mb) if mb is not None else None
    if not (_std(sub) and sub.op_type == "Sub" and list(sub.input) == [x, mb]):
        return None
    exp = g.only_consumer(sub.output[0])
    if not (_std(exp) and exp.op_type == "Exp"):
        return None
    nodes += views + [sub, exp]
    e = exp.output[0]
    users = g.users(e)
    red = next((u for u in users if _reduce_axis(g, u, "ReduceSum", rank) == a), None)
    if red is None or len(users) != 2:
        return None
    s, views = views_to(g, red.output[0], kept)
    div = g.only_consumer(s) if s is not None else None
    if not (_std(div) and div.op_type == "Div" and list(div.input) == [e, s]):
        return None
    nodes += [red] + views + [div]
    return Match([div] + nodes[:-1], {"x": x, "axis": a, "all": nodes, "out": div.output[0]})


def check(m: Match, g, target) -> Optional[str]:
    if not is_float(g, m.data["x"]):
        return "not a float tensor"
    if g.shape(m.data["out"]) != g.shape(m.data["x"]):
        return "the result has another shape than the input"
    if g.opset < 13 and m.data["axis"] != len(g.shape(m.data["x"])) - 1:
        return "Softmax below opset 13 coerces to 2-D: only the last axis is the same function"
    t = read_outside(g, m.data["all"], m.data["out"])
    return None if t is None else f"'{t}' is read outside the softmax"


def rewrite(m: Match, g) -> str:
    last = m.node
    for n in m.data["all"]:
        g.remove(n)
    g.make("Softmax", [m.data["x"]], [m.data["out"]], near=last, origin=m.origin, name=f"{last.name}/softmax",
           axis=m.data["axis"])
    return f"{len(m.data['all'])}-node softmax (max subtracted) over axis {m.data['axis']} -> Softmax"
