"""LSTM / GRU / RNN with ``layout=1`` (batch first: X [B, T, I], Y [B, T, D, H], Y_h / Y_c
[B, D, H]) -> the layout-0 op between Transposes, as ONNX defines layout 1:

    X -> Transpose(1, 0, 2) -> op(layout=0) -> Y: Transpose(2, 0, 1, 3), Y_h / Y_c: Transpose(1, 0, 2)

onnxruntime 1.31 refuses layout 1 ("Batchwise recurrent operations (layout == 1) are not
supported"), so a layout-1 node left on the CPU could not run; fuse turns the Transposes into
relabellings (batch 1) or block rotations in the region around the recurrent layer. The initial
states (``initial_h`` / ``initial_c``, [B, D, H] in layout 1) are transposed to [D, B, H]: folded
when constant.
"""
from __future__ import annotations

from typing import Optional

from .base import Match, attr, inp

NAME = "recurrent_layout0"
OPS = ("LSTM", "GRU", "RNN")


def match(node, g) -> Optional[Match]:
    if node.op_type in OPS and node.domain in ("", "ai.onnx") and attr(node, "layout", 0) == 1:
        return Match([node])
    return None


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if g.shape(node.input[0]) is None or len(g.shape(node.input[0])) != 3:
        return "input X has no static 3-D shape"
    if any(o and g.shape(o) is None for o in node.output):
        return "output shapes are not static"
    return None


def _transpose(g, x: str, perm, out: str, node, origin, tag: str) -> str:
    if g.is_const(x):   # a constant initial state: folded
        return g.add_const(f"{node.name}/{tag}", g.const(x).transpose(perm))
    y = out or g.fresh(f"{x}/{tag}")
    g.make("Transpose", [x], [y], near=node, origin=origin, name=f"{node.name}/{tag}", perm=list(perm))
    shape = g.shape(x)
    g.set_shape(y, [shape[p] for p in perm], g.dtype(x))
    return y


def rewrite(m: Match, g) -> str:
    node = m.node
    origin = m.origin
    g.set_input(node, 0, _transpose(g, node.input[0], (1, 0, 2), "", node, origin, "x_tbi"))
    for idx in (5, 6):   # initial_h, initial_c: [B, D, H] -> [D, B, H]
        if inp(node, idx):
            g.set_input(node, idx, _transpose(g, node.input[idx], (1, 0, 2), "", node, origin, f"state{idx}_dbh"))
    perms = {0: (2, 0, 1, 3), 1: (1, 0, 2), 2: (1, 0, 2)}   # stored (layout 0) -> logical (layout 1)
    for idx, o in enumerate(list(node.output)):
        if not o:
            continue
        shape = g.shape(o)
        inv = [perms[idx].index(k) for k in range(len(perms[idx]))]
        inner = g.fresh(f"{o}/layout0")
        g.rename_output(node, idx, inner)
        g.set_shape(inner, [shape[p] for p in inv], g.dtype(o))
        _transpose(g, inner, perms[idx], o, node, origin, f"y{idx}_layout1")
    keep = [a for a in node.attribute if a.name != "layout"]
    del node.attribute[:]
    node.attribute.extend(keep)
    g.changed = True
    return f"{node.op_type} layout 1 -> Transposes around layout 0 (onnxruntime runs layout 0 only)"
