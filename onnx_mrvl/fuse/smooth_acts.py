"""Multi-node activations exporters write out, recognised on the tensor they start from:

    gelu       0.5 * x * (1 + Erf(x / sqrt 2))     (Div or Mul by 1/sqrt 2; the product x * 0.5 * A in
                                                   any association: PyTorch, tf2onnx, HF orderings)
    gelu_tanh  0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))   (x^3 as Pow(x, 3) or x*x*x)
    mish       x * Tanh(Softplus(x))
and the single ops Gelu (opset 20, approximate none / tanh), Mish (opset 18) and Elu (``classify``).

``match(g, x, allowed)`` returns a ``StepMatch`` whose nodes are every node of the form; every
reader of ``x`` and of each intermediate must be one of them (nothing else may need a value the
fused layer no longer writes).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import onnx

from ..graph_index import GraphIndex, attr
from .steps import StepMatch

ENTRY_OPS = ("Mul", "Div", "Softplus", "Pow")   # the first node of a form in topological order
_TOL = 1e-4


def _std(n) -> bool:
    return n is not None and n.domain in ("", "ai.onnx")


def _scalar(g: GraphIndex, t: str) -> Optional[float]:
    if not g.is_const(t):
        return None
    v = np.asarray(g.const(t))
    return float(v.reshape(-1)[0]) if v.size == 1 else None


def _is(v: Optional[float], want: float) -> bool:
    return v is not None and abs(v - want) <= _TOL * max(1.0, abs(want))


def _other(n: onnx.NodeProto, t: str) -> Optional[str]:
    if len(n.input) != 2 or t not in n.input:
        return None
    return n.input[1] if n.input[0] == t else n.input[0]


def _only(g: GraphIndex, t: str, op: str) -> Optional[onnx.NodeProto]:
    n = g.single_consumer(t)
    return n if _std(n) and n.op_type == op and t not in g.output_set else None


def _scaled(g: GraphIndex, n: onnx.NodeProto, x: str, factor: float) -> bool:
    """``n`` computes x * factor (Mul by factor or Div by 1/factor)."""
    if not _std(n) or len(n.input) != 2:
        return False
    if n.op_type == "Mul":
        return _is(_scalar(g, _other(n, x) or ""), factor) if x in n.input and n.input[0] != n.input[1] else False
    if n.op_type == "Div":
        return n.input[0] == x and _is(_scalar(g, n.input[1]), 1.0 / factor)
    return False


def _product(g: GraphIndex, a: str, x: str):
    """``a`` multiplied by x and by 0.5 in any association (up to two Muls after ``a``, or one Mul
    with Mul(x, 0.5)): (nodes, output) or None."""
    nodes, t, factors = [], a, []
    for _ in range(2):
        m = _only(g, t, "Mul")
        if m is None:
            break
        o = _other(m, t)
        if o is None or o == t:
            break
        nodes.append(m)
        if o == x:
            factors.append("x")
        elif _is(_scalar(g, o), 0.5):
            factors.append("half")
        else:
            h = g.producer.get(o)
            if _std(h) and h.op_type == "Mul" and _scaled(g, h, x, 0.5) and g.single_consumer(o) is m \
                    and o not in g.output_set:
                nodes.append(h)
                factors += ["x", "half"]
            else:
                return None
        t = m.output[0]
        if sorted(factors) == ["half", "x"]:
            return nodes, t
    return None


def _one_plus(g: GraphIndex, t: str) -> Optional[onnx.NodeProto]:
    n = _only(g, t, "Add")
    return n if n is not None and _is(_scalar(g, _other(n, t) or ""), 1.0) else None


def _gelu_erf(g: GraphIndex, x: str, users) -> Optional[tuple]:
    for s in users:
        if not _scaled(g, s, x, 1.0 / math.sqrt(2.0)):
            continue
        erf = _only(g, s.output[0], "Erf")
        add = _one_plus(g, erf.output[0]) if erf is not None else None
        prod = _product(g, add.output[0], x) if add is not None else None
        if prod is not None:
            return [s, erf, add] + prod[0], prod[1]
    return None


def _cube(g: GraphIndex, x: str, users):
    """x^3 as Pow(x, 3) or Mul(Mul(x, x), x) / Mul(x, Mul(x, x)): (nodes, output)."""
    for p in users:
        if p.op_type == "Pow" and p.input[0] == x and _is(_scalar(g, p.input[1]), 3.0):
            return [p], p.output[0]
        if p.op_type == "Mul" and list(p.input) == [x, x]:
            m = _only(g, p.output[0], "Mul")
            if m is not None and _other(m, p.output[0]) == x:
                return [p, m], m.output[0]
    return None


def _gelu_tanh(g: GraphIndex, x: str, users) -> Optional[tuple]:
    cube = _cube(g, x, users)
    if cube is None:
        return None
    c = _only(g, cube[1], "Mul")
    if c is None or not _is(_scalar(g, _other(c, cube[1]) or ""), 0.044715):
        return None
    s = _only(g, c.output[0], "Add")
    if s is None or _other(s, c.output[0]) != x:
        return None
    k = _only(g, s.output[0], "Mul")
    if k is None or not _is(_scalar(g, _other(k, s.output[0]) or ""), math.sqrt(2.0 / math.pi)):
        return None
    th = _only(g, k.output[0], "Tanh")
    add = _one_plus(g, th.output[0]) if th is not None else None
    prod = _product(g, add.output[0], x) if add is not None else None
    if prod is None:
        return None
    return cube[0] + [c, s, k, th, add] + prod[0], prod[1]


def _mish(g: GraphIndex, x: str, users) -> Optional[tuple]:
    sp = next((u for u in users if u.op_type == "Softplus" and u.input[0] == x), None)
    th = _only(g, sp.output[0], "Tanh") if sp is not None else None
    m = _only(g, th.output[0], "Mul") if th is not None else None
    if m is None or _other(m, th.output[0]) != x:
        return None
    return [sp, th, m], m.output[0]


FORMS = (("gelu", _gelu_erf), ("gelu_tanh", _gelu_tanh), ("mish", _mish))


def match(g: GraphIndex, x: str, allowed) -> Optional[StepMatch]:
    """The multi-node activation starting at ``x`` (every reader of ``x`` inside it), or None."""
    users = g.consumers.get(x, [])
    if len(users) < 2 or x in g.output_set or any(u.name in g.excluded for u in users):
        return None
    for kind, form in FORMS:
        if kind not in allowed:
            continue
        found = form(g, x, users)
        if found is None:
            continue
        nodes, out = found
        names = {n.name for n in nodes}
        if any(u.name not in names for u in users) or any(n.name in g.excluded for n in nodes):
            continue
        if g.shape(out) != g.shape(x):
            continue
        return StepMatch(nodes, out, attrs={"activation": kind})
    return None


def classify_single(n: onnx.NodeProto, allowed) -> Optional[StepMatch]:
    """Gelu (opset 20), Mish (opset 18), Elu, Erf, Softplus, Sqrt as one activation, or None."""
    if not _std(n) or not n.output or not n.output[0]:
        return None
    kind, attrs = None, {}
    if n.op_type == "Gelu":
        approx = attr(n, "approximate", b"none")
        approx = approx.decode() if isinstance(approx, bytes) else str(approx)
        kind = {"none": "gelu", "tanh": "gelu_tanh"}.get(approx)
    elif n.op_type == "Mish":
        kind = "mish"
    elif n.op_type == "Erf":   # alone: a QDQ GELU's Erf between Q/DQ pairs
        kind = "erf"
    elif n.op_type in ("Softplus", "Sqrt"):   # alone (a Softplus inside a Mish is matched as the mish form)
        kind = n.op_type.lower()
    elif n.op_type == "Elu":
        kind, attrs = "elu", {"activation_alpha": float(attr(n, "alpha", 1.0))}
    if kind is None or kind not in allowed:
        return None
    return StepMatch([n], n.output[0], attrs=dict(activation=kind, **attrs))
