"""The decomposed layer norms exporters write, over one axis -> ``LayerNormalization`` (opset 17),
which fuse runs as the Mrvl LayerNorm:

    PyTorch legacy exporter (opset < 17; ConvNeXt's channels-first LayerNorm alike, on axis 1):
        m = ReduceMean(x, [a]); d = x - m; v = ReduceMean(Pow(d, 2) | d * d, [a])
        y = d / Sqrt(v + eps)  (or d * Reciprocal(Sqrt(v + eps)), or d * Div(1, Sqrt(v + eps)): the
        export of torch.rsqrt)  [* gamma]  [+ beta]
        (the two uses of x - m may be one Sub or two)
    tf2onnx (Keras 2 LayerNormalization through tf.nn.batch_normalization; SquaredDifference as
    Sub + Mul, Rsqrt as Sqrt + Reciprocal):
        m = ReduceMean(x, [a]); v = ReduceMean((x - m) * (x - m), [a])
        inv = Reciprocal(Sqrt(v + eps)) [* gamma];  y = x * inv + (beta - m * inv)   (or - m * inv)
    and Keras 3's order of the same: y = x * inv + (Neg(m) * inv [+ beta])
    tf2onnx writes a mean over the last axis of a 3-D tensor as GlobalAveragePool ([N, T, D] read as
    [N, C, L]): both means may be one.

The normalised axis must be one axis ``a`` (keepdims); gamma and beta constants along it only.
The last axis becomes ``LayerNormalization(axis=-1)``; another axis (channels of NCHW) is moved
last by a Transpose before and back after (fuse takes both Transposes as relabellings of its NHWC
storage). Every intermediate must be read only inside the form. A model below opset 17 is raised
to 17 when every op it holds means the same there (``opset_bump.py``), else the rule is skipped.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
from onnx import helper

from .. import opset_bump
from .base import Match, attr, axes_of, is_float, read_outside, scalar

NAME = "layernorm_canonical"
RESTORABLE = True   # a float re-expression: put back when none of it is offloaded (split/restore.py)
OPS = ("ReduceMean", "GlobalAveragePool")
MEANS = OPS
LN_OPSET = 17


def _std(n) -> bool:
    return n is not None and n.domain in ("", "ai.onnx")


def _mean_axis(g, n, rank: int) -> Optional[int]:
    if _std(n) and n.op_type == "GlobalAveragePool" and rank == 3:
        return 2
    if not _std(n) or n.op_type != "ReduceMean" or not attr(n, "keepdims", 1):
        return None
    axes = axes_of(g, n, 1)
    return axes[0] % rank if axes and len(axes) == 1 else None


def _users(g, t: str, op: str) -> List:
    return [u for u in g.users(t) if _std(u) and u.op_type == op]


def _other(n, t: str) -> Optional[str]:
    if len(n.input) != 2 or t not in n.input:
        return None
    return n.input[1] if n.input[0] == t else n.input[0]


def _one(g, t: str, op: str):
    n = g.only_consumer(t)
    return n if _std(n) and n.op_type == op else None


def _eps(g, add, v: str) -> Optional[float]:
    if add is None:
        return None
    e = scalar(g.const(_other(add, v) or ""))
    return e if e is not None and e >= 0 else None


def reciprocal_reader(g, t: str):
    """The only reader of ``t`` when it is ``Reciprocal(t)`` or ``Div(1, t)`` (torch.rsqrt's export)."""
    n = g.only_consumer(t)
    if not _std(n):
        return None
    if n.op_type == "Reciprocal" or (n.op_type == "Div" and n.input[1] == t and scalar(g.const(n.input[0])) == 1.0):
        return n
    return None


def const_affine(g, t: str, op: str):
    """``t (op) const`` as the only reader of ``t``: (node, constant name) or (None, None)."""
    n = _one(g, t, op)
    c = _other(n, t) if n is not None else None
    if c is None or not g.is_const(c) or c == t:
        return None, None
    return n, c


def match(node, g) -> Optional[Match]:
    x = node.input[0] if node.input else ""
    sx = g.shape(x) if x else None
    if sx is None or len(sx) < 2:
        return None
    rank = len(sx)
    a = _mean_axis(g, node, rank)
    if a is None:
        return None
    m = node.output[0]
    subs = [s for s in _users(g, m, "Sub") if list(s.input) == [x, m]]
    if not subs:
        return None
    for d in [s.output[0] for s in subs]:                      # the square of x - m
        sq = next((u for u in g.users(d) if _std(u) and (
            (u.op_type == "Pow" and u.input[0] == d and scalar(g.const(u.input[1])) == 2.0)
            or (u.op_type == "Mul" and list(u.input) == [d, d]))), None)
        var = g.only_consumer(sq.output[0]) if sq is not None else None
        if var is None or _mean_axis(g, var, rank) != a:
            continue
        add = _one(g, var.output[0], "Add")
        eps = _eps(g, add, var.output[0])
        sd = _one(g, add.output[0], "Sqrt") if eps is not None else None
        if sd is None:
            continue
        found = torch_tail(g, x, m, subs, sd) or _tf(g, x, m, subs, sd)
        if found is None:
            continue
        nodes, out, gamma, beta = found
        nodes = [node] + subs + [sq, var, add, sd] + nodes
        return Match([nodes[-1]] + nodes[:-1], {"x": x, "axis": a, "eps": eps, "gamma": gamma, "beta": beta,
                                                "out": out, "all": nodes})
    return None


def torch_tail(g, x, m, subs, sd):
    """d / sd or d * Reciprocal(sd), then optional * gamma and + beta."""
    nxt = g.only_consumer(sd.output[0])
    nodes = []
    r = reciprocal_reader(g, sd.output[0])
    if r is not None:
        nxt = g.only_consumer(r.output[0])
        if not (_std(nxt) and nxt.op_type == "Mul"):
            return None
        nodes.append(r)
        num = _other(nxt, r.output[0])
    elif _std(nxt) and nxt.op_type == "Div" and nxt.input[1] == sd.output[0]:
        num = nxt.input[0]
    else:
        return None
    if num not in [s.output[0] for s in subs]:
        return None
    nodes.append(nxt)
    out, gamma, beta = nxt.output[0], None, None
    mul, c = const_affine(g, out, "Mul")
    if mul is not None:
        nodes.append(mul)
        out, gamma = mul.output[0], c
    add, c = const_affine(g, out, "Add")
    if add is not None:
        nodes.append(add)
        out, beta = add.output[0], c
    return nodes, out, gamma, beta


def _tf(g, x, m, subs, sd):
    """inv = Reciprocal(sd) [* gamma]; y = x * inv + (beta - m * inv) (or + Neg(m * inv)), or in
    Keras 3's order y = x * inv + (Neg(m) * inv [+ beta])."""
    r = reciprocal_reader(g, sd.output[0])
    if r is None or len(subs) != 1:
        return None
    nodes, inv, gamma = [r], r.output[0], None
    gm, c = const_affine(g, inv, "Mul")
    if gm is not None:
        nodes.append(gm)
        inv, gamma = gm.output[0], c
    muls = _users(g, inv, "Mul")
    xa = next((u for u in muls if _other(u, inv) == x), None)
    neg = next((u for u in _users(g, m, "Neg")), None)
    mb = next((u for u in muls if _other(u, inv) == (neg.output[0] if neg is not None else m)), None)
    if xa is None or mb is None or len(g.users(inv)) != 2:
        return None
    beta, extra = None, [mb]
    c_node = mb
    if neg is not None:                          # Keras 3: -mean * inv [+ beta]
        extra = [neg, mb]
        add, c = const_affine(g, mb.output[0], "Add")
        if add is not None:
            c_node, beta = add, c
    else:
        c_node = g.only_consumer(mb.output[0])
        if _std(c_node) and c_node.op_type == "Sub" and c_node.input[1] == mb.output[0] and \
                g.is_const(c_node.input[0]):
            beta = c_node.input[0]
        elif not (_std(c_node) and c_node.op_type == "Neg"):
            return None
    y = g.only_consumer(c_node.output[0])
    if not (_std(y) and y.op_type == "Add" and sorted(y.input) == sorted([xa.output[0], c_node.output[0]])):
        return None
    if g.only_consumer(xa.output[0]) is not y:
        return None
    return nodes + extra + [xa] + ([c_node] if c_node is not mb else []) + [y], y.output[0], gamma, beta


def _vector(g, name: Optional[str], rank: int, a: int, d: int) -> Optional[np.ndarray]:
    """A constant broadcasting along axis ``a`` only, as a length-``d`` vector (None: not one)."""
    v = np.asarray(g.const(name), np.float64)
    if v.ndim > rank:
        return None
    full = v.reshape((1,) * (rank - v.ndim) + v.shape)
    if any(s != 1 for k, s in enumerate(full.shape) if k != a) or full.shape[a] not in (1, d):
        return None
    return np.broadcast_to(full.reshape(-1), (d,)).astype(np.float64)


def check(mt: Match, g, target) -> Optional[str]:
    x, a = mt.data["x"], mt.data["axis"]
    if not is_float(g, x):
        return "not a float tensor"
    sx = g.shape(x)
    if g.shape(mt.data["out"]) != sx:
        return "the constants broadcast the tensor to another shape"
    t = read_outside(g, mt.data["all"], mt.data["out"])
    if t is not None:
        return f"'{t}' is read outside the layer norm"
    for role in ("gamma", "beta"):
        name = mt.data[role]
        if name is not None:
            vec = _vector(g, name, len(sx), a, sx[a])
            if vec is None:
                return f"{role} '{name}' does not run along the normalised axis {a} only"
            mt.data[role + "_vec"] = vec
    if g.opset < LN_OPSET:
        reason = opset_bump.reason(g, LN_OPSET)
        if reason:
            return f"LayerNormalization needs opset {LN_OPSET}: {reason}"
    return None


def rewrite(mt: Match, g) -> str:
    x, a, out, origin = mt.data["x"], mt.data["axis"], mt.data["out"], mt.origin
    sx = list(g.shape(x))
    rank, d, dt = len(sx), sx[a], g.dtype(x)
    last = mt.node
    for n in mt.data["all"]:
        g.remove(n)
    if g.opset < LN_OPSET:
        opset_bump.raise_to(g, LN_OPSET)
    np_dt = np.float32 if dt is None else helper.tensor_dtype_to_np_dtype(dt)
    gamma = mt.data.get("gamma_vec", np.ones(d))
    ins = [x, g.add_const(f"{last.name}/ln_scale", gamma.astype(np_dt))]
    if mt.data["beta"] is not None:
        ins.append(g.add_const(f"{last.name}/ln_bias", mt.data["beta_vec"].astype(np_dt)))
    perm = None
    if a != rank - 1:
        perm = [k for k in range(rank) if k != a] + [a]
        xt = g.fresh(f"{x}/axis_last")
        g.make("Transpose", [x], [xt], near=last, origin=origin, name=f"{last.name}/to_axis_last", perm=perm)
        g.set_shape(xt, [sx[k] for k in perm], dt)
        ins[0] = xt
    y = out if perm is None else g.fresh(f"{out}/axis_last")
    g.make("LayerNormalization", ins, [y], near=last, origin=origin, name=f"{last.name}/layernorm",
           axis=-1, epsilon=float(mt.data["eps"]))
    if perm is not None:
        g.set_shape(y, [sx[k] for k in perm], dt)
        inv = [perm.index(k) for k in range(rank)]
        g.make("Transpose", [y], [out], near=last, origin=origin, name=f"{last.name}/from_axis_last", perm=inv)
    form = "tf2onnx" if any(n.op_type == "Add" and n.output[0] == out for n in mt.data["all"]) and \
        any(n.op_type == "Mul" and x in n.input for n in mt.data["all"]) else "PyTorch"
    return f"{len(mt.data['all'])}-node {form} layer norm over axis {a} -> LayerNormalization" + (
        f" between Transposes {perm} / back" if perm else "")
