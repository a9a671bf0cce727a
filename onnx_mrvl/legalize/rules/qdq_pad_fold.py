"""A zero Pad between Q/DQ pairs in front of QDQ Convs (tf2onnx writes TF's asymmetric SAME padding
as an explicit Pad; onnxruntime's quantizer puts a pair after it):

    DQ(x_q; s, z) -> Pad(0) -> Q(s, z) -> DQ(s, z) -> Conv   =>   DQ(x_q; s, z) -> Conv(pads + Pad's)

Exact: the pair after the Pad has the DQ's scale and zero point, so it maps every value (the
dequantized codes and the pad's 0 = the code z) to itself, and a Conv's own zero padding pads the
same 0. The float ``pad_fold`` cannot see through the pair; this leaves fuse an int8 Conv2D
(docs/fusion.md "int8") instead of a Pad on the CPU between two regions.

MaxPool readers too (Keras ResNet's ``ZeroPadding2D`` before ``pool1``, quantized): when the zero
point is its type's lowest code every dequantized value is >= 0, so the pad's zeros never win a
max, and a MaxPool's own padding (never the max) gives the same windows; exact when every window
still holds a value (merged pads below the kernel), no dilation, ``ceil_mode`` 0 and no Indices.

Through tf2onnx's layout Transpose (Keras' ``ZeroPadding2D`` / ``correct_pad`` on NHWC data before a
stride-2 depthwise conv, MobileNet; each op between its own pair of one scale):
``DQ -> Pad -> Q -> DQ -> Transpose -> Q -> DQ -> Conv`` => ``DQ -> Transpose -> Q -> DQ -> Conv``
with the pads moved through the permutation (exact: the Transpose moves values, the pairs map 0 to 0).
The same through an Unsqueeze (tf2onnx's Conv1D: a causal or SAME ``Pad`` of ``[N, C, T]``, then
``ExpandDims`` to ``[N, C, 1, T]`` for the Conv2D; the inserted axis gets no pad; Keras audio models).

A float Pad before the pair (no DequantizeLinear of that scale before it: a calibrated
``quantize_dynamic`` model, whose pad ``pad_sink`` moved below tf2onnx's Transpose) folds the same
way with the pair kept: ``Pad(0) -> Q -> DQ -> Conv`` => ``Q -> DQ -> Conv(pads)`` (Q(0) is the zero
point, which dequantizes to the conv's own padding 0).
"""
from __future__ import annotations

from typing import Optional


from ... import provenance
from ..graph import set_attr
from .base import Match, attr, inp
from .pad_fold import pad_spec

NAME = "qdq_pad_fold"
OPS = ("Pad",)


def _only(g, t: str, op: str):
    users = g.users(t)
    return users[0] if len(users) == 1 and users[0].op_type == op and t not in g.pinned else None


def _qp(g, n):
    s = g.const(inp(n, 1))
    z = g.const(inp(n, 2)) if inp(n, 2) else None
    if s is None or s.size != 1 or (inp(n, 2) and (z is None or z.size != 1)):
        return None
    return float(s.reshape(-1)[0]), (int(z.reshape(-1)[0]) if z is not None else 0), \
        (z.dtype if z is not None else None)


LOWEST = {"int8": -128, "uint8": 0}


def _maxpool_reason(c, qp, new, s) -> Optional[str]:
    """Why the pad's zeros could change MaxPool ``c``'s result (None: they cannot)."""
    if qp[2] is None or str(qp[2]) not in LOWEST or qp[1] != LOWEST[str(qp[2])]:
        return f"MaxPool {c.name}: zero point {qp[1]} is not the lowest code (values below the pad's 0)"
    k = list(attr(c, "kernel_shape") or [])
    if len(k) != s or any(new[i] >= k[i] or new[s + i] >= k[i] for i in range(s)):
        return f"MaxPool {c.name}: merged pads {new} reach a window of padding only (kernel {k})"
    if any(d != 1 for d in (attr(c, "dilations") or [])) or attr(c, "ceil_mode", 0) or \
            (len(c.output) > 1 and c.output[1]):
        return f"MaxPool {c.name} has dilations, ceil_mode or an Indices output"
    return None


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx"):
        return None
    dq_a = g.producer.get(node.input[0])
    if dq_a is not None and dq_a.op_type != "DequantizeLinear":
        dq_a = None
    q = _only(g, node.output[0], "QuantizeLinear")
    dq_b = _only(g, q.output[0], "DequantizeLinear") if q is not None else None
    if dq_b is None:
        return None
    moved = None
    users = g.users(dq_b.output[0])
    tr = users[0] if len(users) == 1 and users[0].op_type in MOVES and dq_b.output[0] not in g.pinned else None
    if tr is not None:   # tf2onnx's NHWC -> NCHW Transpose / Conv1D's Unsqueeze before the conv, with its pair
        q2 = _only(g, tr.output[0], "QuantizeLinear")
        dq2 = _only(g, q2.output[0], "DequantizeLinear") if q2 is not None else None
        if dq2 is None:
            return None
        moved, dq_b = (tr, q2, dq2, dq_b), dq2
    convs = g.users(dq_b.output[0])
    if not convs or dq_b.output[0] in g.pinned or any(c.op_type not in ("Conv", "MaxPool") or c.input[0] != dq_b.output[0]
                                                      or list(c.input).count(dq_b.output[0]) != 1 for c in convs):
        return None
    spec = pad_spec(node, g)
    if spec is None:
        return None
    if moved is not None:   # the pads as the conv sees them: output axis i is input axis src[i] (None: new)
        pads, value, r = spec
        src = _sources(moved[0], g, r)
        if src is None:
            return None
        spec = ([pads[p] if p is not None else 0 for p in src] + [pads[r + p] if p is not None else 0 for p in src],
                value, len(src))
        m_src = src
    else:
        m_src = None
    return Match([node, q, dq_b] + convs, {"spec": spec, "dq_a": dq_a, "moved": moved, "src": m_src})


MOVES = ("Transpose", "Unsqueeze")


def _sources(n, g, r: int):
    """Per output axis of the Transpose / Unsqueeze ``n`` of a rank-``r`` tensor, the input axis it
    holds (None: an axis of 1 the Unsqueeze inserts); None when its axes are not constant."""
    if n.op_type == "Transpose":
        perm = [int(v) for v in (attr(n, "perm") or range(r - 1, -1, -1))]
        return perm if sorted(perm) == list(range(r)) else None
    axes = attr(n, "axes") if len(n.input) < 2 else g.const(n.input[1])
    if axes is None:
        return None
    out = r + len(list(axes))
    new = sorted({int(a) % out for a in list(axes)})
    if len(new) != len(list(axes)):
        return None
    rest = iter(range(r))
    return [None if i in new else next(rest) for i in range(out)]


def _moved_shape(sx, src):
    return [1 if p is None else sx[p] for p in src]


def check(m: Match, g, target) -> Optional[str]:
    pad, q, dq_b, *convs = m.nodes
    pads, value, r = m.data["spec"]
    qa = _qp(g, m.data["dq_a"]) if m.data["dq_a"] is not None else None
    qq, qb = _qp(g, q), _qp(g, dq_b)
    moved = m.data.get("moved")
    if moved is not None and not (_qp(g, moved[1]) == _qp(g, moved[3]) == qb):
        return "the pairs around the Transpose do not have the DequantizeLinear's scale and zero point"
    if qq is None or qq != qb:
        return "the pair after the Pad does not have one scale and zero point"
    m.data["keep"] = qa is None or qa != qq      # no identical DQ before the Pad: the pair stays
    if m.data["keep"] and g.dtype(pad.input[0]) not in (None, 1):
        return "the Pad's input is not float"
    if value != 0.0:
        return f"pad value {value} is not 0"
    if any(pads[a] or pads[a + r] for a in (0, 1)) or any(v < 0 for v in pads):
        return "pads the batch or channel axis, or crops"
    news = []
    for c in convs:
        if attr(c, "auto_pad", "NOTSET") != "NOTSET":
            return f"{c.op_type} {c.name} still has auto_pad"
        s = r - 2
        own = list(attr(c, "pads") or [0] * (2 * s))
        new = [own[k] + pads[2 + k] for k in range(s)] + [own[s + k] + pads[r + 2 + k] for k in range(s)]
        kind = "conv" if c.op_type == "Conv" else "pool"
        if max(new) > target.max_pad[kind]:
            return f"merged pads {new} exceed target.max_pad ({target.max_pad[kind]})"
        if c.op_type == "MaxPool":
            why = _maxpool_reason(c, qq, new, s)
            if why:
                return why
        news.append(new)
    m.data["new"] = news
    return None


def rewrite(m: Match, g) -> str:
    pad, q, dq_b, *convs = m.nodes
    moved = m.data.get("moved")
    if m.data["keep"]:      # the pair reads the unpadded values; the convs pad
        sx = list(g.shape(pad.input[0]))
        g.set_input(q, 0, pad.input[0])
        first = [q.output[0], (moved[3] if moved is not None else dq_b).output[0]]
        for t in first:
            g.set_shape(t, sx, g.dtype(t))
        if moved is not None:
            for t in (moved[0].output[0], moved[1].output[0], moved[2].output[0]):
                g.set_shape(t, _moved_shape(sx, m.data["src"]), g.dtype(t))
        for c, new in zip(convs, m.data["new"]):
            set_attr(c, "pads", new)
            provenance.set_origin(c, provenance.merge_origin(c, pad))
        g.remove(pad)
        return ", ".join(f"float Pad folded into {c.op_type} {c.name} behind its Q/DQ pair (pads {new})"
                         for c, new in zip(convs, m.data["new"]))
    if moved is not None:   # the Transpose reads the unpadded values; its pair and the convs as before
        tr, q2, dq2, dq_mid = moved
        g.set_input(tr, 0, pad.input[0])
        sx = g.shape(pad.input[0])
        for t in (tr.output[0], q2.output[0], dq2.output[0]):
            g.set_shape(t, _moved_shape(sx, m.data["src"]), g.dtype(t))
        for c, new in zip(convs, m.data["new"]):
            set_attr(c, "pads", new)
            provenance.set_origin(c, provenance.merge_origin(c, pad, q, dq_mid))
        for n in (dq_mid, q, pad):
            g.remove(n)
        return ", ".join(f"Pad and its Q/DQ pair moved through {tr.op_type} {tr.name} and folded into {c.op_type} "
                         f"{c.name} (pads {new})" for c, new in zip(convs, m.data["new"]))
    for c, new in zip(convs, m.data["new"]):
        g.set_input(c, 0, pad.input[0])
        set_attr(c, "pads", new)
        provenance.set_origin(c, provenance.merge_origin(c, pad, q, dq_b))
    for n in (dq_b, q, pad):
        g.remove(n)
    return ", ".join(f"Pad and its Q/DQ pair folded into {c.op_type} {c.name} (pads {new})"
                     for c, new in zip(convs, m.data["new"]))
