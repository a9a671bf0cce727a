"""A layer norm whose variance is written from the moments, ``E[x^2] - E[x]^2`` -> ``LayerNormalization``
(through layernorm_canonical's replacement: the axis moved last between Transposes when it is not):

    flax ``nn.LayerNorm`` (``use_fast_variance``, the default) through jax2tf + tf2onnx (magika):
        m = ReduceSum(x, [a], keepdims=0) * (1 / n);  q = ReduceSum(x * x, [a], keepdims=0) * (1 / n)
        v = Max(0, q - m * m);  inv = Reciprocal(Sqrt(bcast(v) + eps)) [* gamma]
        y = (x - bcast(m)) * inv [+ beta]
    and the same written by hand in PyTorch (``(x ** 2).mean(-1, keepdim=True) - mean ** 2``; a
    ReduceMean, ``Pow(., 2)``, Div by n, no Max, ``d / Sqrt(.)``, a keepdims mean).

``bcast`` is any chain of Reshape / Expand / Unsqueeze back to the keepdims shape (jax2tf writes
``Reshape`` then ``Expand``). Every intermediate must be read inside the form. The moments form
loses the variance to cancellation where |mean| >> std (fp32: relative error ~ 2^-24 mean^2 / var);
LayerNormalization computes ``E[(x - m)^2]``, the exact value the moments approximate."""
from __future__ import annotations

from typing import Optional

from . import layernorm_canonical as lc
from .base import Match, axes_of, is_float, scalar

NAME = "layernorm_moments"
RESTORABLE = True   # a float re-expression: put back when none of it is offloaded (split/restore.py)
OPS = ("ReduceSum", "ReduceMean")
VIEWS = ("Reshape", "Expand", "Unsqueeze")


def _std(n) -> bool:
    return n is not None and n.domain in ("", "ai.onnx")


def _axis(g, n, rank: int) -> Optional[int]:
    if not _std(n) or n.op_type not in OPS:
        return None
    axes = axes_of(g, n, 1)
    return axes[0] % rank if axes and len(axes) == 1 else None


def _other(n, t: str) -> Optional[str]:
    if n is None or len(n.input) != 2 or t not in n.input:
        return None
    return n.input[1] if n.input[0] == t else n.input[0]


def _mean(g, red, n: int):
    """(mean tensor, nodes) of a reduction over n elements: ReduceMean, or ReduceSum then * (1 / n) or / n."""
    if red.op_type == "ReduceMean":
        return red.output[0], [red]
    s = g.only_consumer(red.output[0])
    if not _std(s):
        return None
    c = scalar(g.const(_other(s, red.output[0]) or ""))
    if c is None:
        return None
    if s.op_type == "Mul" and abs(c * n - 1.0) <= 1e-6 or \
            s.op_type == "Div" and s.input[0] == red.output[0] and c == float(n):
        return s.output[0], [red, s]
    return None


def _square(g, t: str):
    """The reader of ``t`` that squares it: Mul(t, t) or Pow(t, 2)."""
    return next((u for u in g.users(t) if _std(u) and (
        u.op_type == "Mul" and list(u.input) == [t, t] or
        u.op_type == "Pow" and u.input[0] == t and scalar(g.const(u.input[1])) == 2.0)), None)


def views_to(g, t: str, want, first=None):
    """(tensor, nodes): the chain of views from ``t`` (through ``first`` when given, else its only
    reader) to the keepdims shape ``want``, including views after it that keep that shape; (None, None)
    when ``t`` does not reach ``want`` that way."""
    nodes = []
    while len(nodes) < 4:
        n = first if first is not None and not nodes else g.only_consumer(t)
        if not (_std(n) and n.op_type in VIEWS and n.input[0] == t) or \
                tuple(g.shape(t) or ()) == tuple(want) and tuple(g.shape(n.output[0]) or ()) != tuple(want):
            break
        nodes.append(n)
        t = n.output[0]
    return (t, nodes) if tuple(g.shape(t) or ()) == tuple(want) else (None, None)


def match(node, g) -> Optional[Match]:
    x = node.input[0] if node.input else ""
    sx = g.shape(x) if x else None
    if sx is None or len(sx) < 2 or any(not isinstance(d, int) for d in sx):
        return None
    rank = len(sx)
    a = _axis(g, node, rank)
    if a is None:
        return None
    kept = tuple(1 if k == a else d for k, d in enumerate(sx))
    got = _mean(g, node, sx[a])
    sq = _square(g, x)
    red2 = g.only_consumer(sq.output[0]) if got is not None and sq is not None else None
    if red2 is None or _axis(g, red2, rank) != a or red2.op_type != node.op_type:
        return None
    got2 = _mean(g, red2, sx[a])
    m, mean_nodes = got
    m2 = _square(g, m)
    if got2 is None or m2 is None:
        return None
    q, q_nodes = got2
    var = g.only_consumer(q)
    if not (_std(var) and var.op_type == "Sub" and list(var.input) == [q, m2.output[0]]):
        return None
    nodes = mean_nodes + [sq] + q_nodes + [m2, var]
    v = var.output[0]
    mx = g.only_consumer(v)
    if _std(mx) and mx.op_type == "Max" and scalar(g.const(_other(mx, v) or "")) == 0.0:
        nodes.append(mx)
        v = mx.output[0]
    v, views = views_to(g, v, kept)
    if v is None:
        return None
    nodes += views
    add = g.only_consumer(v)
    eps = scalar(g.const(_other(add, v) or "")) if _std(add) and add.op_type == "Add" else None
    sd = g.only_consumer(add.output[0]) if eps is not None and eps >= 0 else None
    if not (_std(sd) and sd.op_type == "Sqrt"):
        return None
    nodes += [add, sd]
    sub, views = None, None   # the mean broadcast back: m [-> views] -> Sub(x, .)
    for u in g.users(m):
        if u is m2 or not _std(u):
            continue
        if u.op_type in VIEWS and u.input[0] == m:
            mb, views = views_to(g, m, kept, first=u)
            sub = g.only_consumer(mb) if mb is not None else None
        elif u.op_type == "Sub" and tuple(g.shape(m) or ()) == kept:
            sub, views = u, []
    if not (_std(sub) and sub.op_type == "Sub" and sub.input[0] == x and len(g.users(m)) == 2):
        return None
    nodes += views + [sub]
    found = lc.torch_tail(g, x, m, [sub], sd)   # the PyTorch form's tail: d * Reciprocal(sd) / d / sd
    if found is None:
        found = _scaled_inv(g, sub, sd)
    if found is None:
        return None
    tail, out, gamma, beta = found
    nodes += tail
    return Match([nodes[-1]] + nodes[:-1], {"x": x, "axis": a, "eps": eps, "gamma": gamma, "beta": beta,
                                            "out": out, "all": nodes})


def _scaled_inv(g, sub, sd):
    """inv = Reciprocal(sd) * gamma;  y = d * inv [+ beta] (flax: the scale joins the rsqrt)."""
    r = lc.reciprocal_reader(g, sd.output[0])
    if r is None:
        return None
    gm, gamma = lc.const_affine(g, r.output[0], "Mul")
    if gm is None:
        return None
    y = g.only_consumer(gm.output[0])
    if not (_std(y) and y.op_type == "Mul" and sorted(y.input) == sorted([sub.output[0], gm.output[0]])):
        return None
    if g.only_consumer(sub.output[0]) is not y:
        return None
    nodes, out, beta = [r, gm, y], y.output[0], None
    add, c = lc.const_affine(g, out, "Add")
    if add is not None:
        nodes.append(add)
        out, beta = add.output[0], c
    return nodes, out, gamma, beta


def check(mt: Match, g, target) -> Optional[str]:
    if not is_float(g, mt.data["x"]):
        return "not a float tensor"
    return lc.check(mt, g, target)


def rewrite(mt: Match, g) -> str:
    detail = lc.rewrite(mt, g)
    return detail.replace("PyTorch layer norm", "moments (E[x^2] - E[x]^2) layer norm").replace(
        "tf2onnx layer norm", "moments (E[x^2] - E[x]^2) layer norm")
