"""A constant-mode Pad on the spatial axes only, feeding only Convs / AveragePools / MaxPools
(one, or several when an exporter merged identical Pads), folds into their pads (within target.max_pad;
any size for a Conv whose kernel exceeds max_kernel: conv_kernel_split pads its tiles). AveragePool takes it with
count_include_pad=1; MaxPool only when the pad value is -inf or the input is provably >= 0."""
from __future__ import annotations

import math
from typing import Optional

from ... import provenance
from .base import Match, attr, inp, scalar
from ..graph import set_attr

NAME = "pad_fold"
OPS = ("Pad",)
NONNEG_PRODUCERS = ("Relu", "Sigmoid", "Softplus", "Abs", "Exp")


def pad_spec(node, g):
    """(pads per axis [begin..., end...], value) of a Pad in any opset form, or None."""
    mode = attr(node, "mode", "constant")
    if mode != "constant":
        return None
    pads = attr(node, "pads") if g.opset < 11 else None
    if pads is None:
        p = g.const(inp(node, 1))
        if p is None:
            return None
        pads = [int(v) for v in p.reshape(-1)]
    value = attr(node, "value", 0.0) if g.opset < 11 else 0.0
    if inp(node, 2):
        v = scalar(g.const(node.input[2]))
        if v is None:
            return None
        value = v
    sx = g.shape(node.input[0])
    if sx is None:
        return None
    r = len(sx)
    if inp(node, 3):
        axes = g.const(node.input[3])
        if axes is None:
            return None
        full = [0] * (2 * r)
        axes = [int(a) % r for a in axes.reshape(-1)]
        for k, a in enumerate(axes):
            full[a], full[a + r] = pads[k], pads[k + len(axes)]
        pads = full
    return list(pads), float(value), r


def _nonneg(g, name) -> bool:
    p = g.producer.get(name)
    if p is None:
        return False
    if p.op_type in NONNEG_PRODUCERS:
        return True
    if p.op_type == "Clip":
        lo = attr(p, "min") if g.opset < 11 else scalar(g.const(inp(p, 1)))
        return lo is not None and lo >= 0
    if p.op_type == "Max":
        return any(scalar(g.const(i)) is not None and scalar(g.const(i)) >= 0 for i in p.input)
    return False


def match(node, g) -> Optional[Match]:
    if node.op_type != "Pad" or node.domain not in ("", "ai.onnx"):
        return None
    out = node.output[0]
    users = g.users(out)
    # tf2onnx merges identical Pads: one Pad may feed several convs / pools (NASNet)
    if not users or out in g.pinned or any(
            u.op_type not in ("Conv", "AveragePool", "MaxPool") or list(u.input).count(out) != 1
            or u.input[0] != out for u in users):
        return None
    spec = pad_spec(node, g)
    if spec is None:
        return None
    return Match([node] + users, {"spec": spec})


def check(m: Match, g, target) -> Optional[str]:
    pad, users = m.nodes[0], m.nodes[1:]
    pads, value, r = m.data["spec"]
    if any(pads[a] or pads[a + r] for a in (0, 1)):
        return "pads the batch or channel axis"
    if any(v < 0 for v in pads):
        return "negative pads (cropping)"
    news = []
    for user in users:
        new = _merged(user, pad, pads, value, r, g, target)
        if isinstance(new, str):
            return new if len(users) == 1 else f"{user.op_type} {user.name}: {new}"
        news.append(new)
    m.data["new"] = news
    return None


def _merged(user, pad, pads, value, r, g, target):
    """The user's pads with the Pad's added, or the reason it cannot take them."""
    if attr(user, "auto_pad", "NOTSET") != "NOTSET":
        return f"{user.op_type} still has auto_pad"
    own = list(attr(user, "pads") or [0] * (2 * (r - 2)))
    s = r - 2
    new = [own[k] + pads[2 + k] for k in range(s)] + [own[s + k] + pads[r + 2 + k]
                                                      for k in range(s)]
    limit = target.max_pad["conv" if user.op_type == "Conv" else "pool"]
    if max(new) > limit and not _kernel_split(user, g, target):
        return f"merged pads {new} exceed target.max_pad ({limit})"
    if user.op_type == "Conv" and value != 0.0:
        return f"pad value {value} is not 0"
    if user.op_type == "AveragePool":
        if value != 0.0:
            return f"pad value {value} is not 0"
        if attr(user, "count_include_pad", 0) == 0 and any(own):
            return "AveragePool already excludes its own pads from the count"
    if user.op_type == "MaxPool":
        if not (value == -math.inf or (value <= 0 and _nonneg(g, pad.input[0]))):
            return f"pad value {value} is not -inf and the input is not provably >= 0"
        kernel = attr(user, "kernel_shape")
        if any(new[k] >= kernel[k] or new[k + r - 2] >= kernel[k] for k in range(r - 2)):
            return "a pooling window would see only padding"
    return new


def _kernel_split(user, g, target) -> bool:
    """A Conv whose kernel exceeds ``max_kernel``: conv_kernel_split (later) tiles it and pads its edge
    tiles through chains of Pads of at most ``max_pad`` that pad_to_conv runs on the accelerator, so a
    Pad of any size folds (torchcrepe's ``F.pad(x, (0, 0, 254, 254))`` before its 512-tap conv, as the
    TorchScript exporter writes it; the dynamo exporter puts those pads in the Conv already)."""
    w = g.shape(user.input[1]) if len(user.input) > 1 else None
    return user.op_type == "Conv" and w is not None and len(w) > 2 and max(w[2:]) > target.max_kernel


def rewrite(m: Match, g) -> str:
    pad, users = m.nodes[0], m.nodes[1:]
    for user, new in zip(users, m.data["new"]):
        g.set_input(user, 0, pad.input[0])
        set_attr(user, "pads", new)
        if user.op_type == "AveragePool":
            set_attr(user, "count_include_pad", 1)
        provenance.set_origin(user, provenance.merge_origin(user, pad))
    g.remove(pad)
    return ", ".join(f"Pad folded into {u.op_type} {u.name} (pads {new})"
                     for u, new in zip(users, m.data["new"]))
