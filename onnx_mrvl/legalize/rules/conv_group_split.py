"""Grouped Conv that is neither group=1 nor depthwise (group == C_in) -> Split on channels,
one Conv per group, Concat on channels."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, inp
from ..graph import del_attr

NAME = "conv_group_split"
OPS = ("Conv",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx"):
        return None
    group = attr(node, "group", 1)
    if group == 1:
        return None
    sx = g.shape(node.input[0])
    if sx is None or group == sx[1]:
        return None
    return Match([node], {"group": group, "cin": sx[1]})


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if not g.is_const(node.input[1]) or (inp(node, 2) and not g.is_const(node.input[2])):
        return "weight or bias is not constant"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    group, cin = m.data["group"], m.data["cin"]
    w = g.const(node.input[1])
    b = g.const(node.input[2]) if inp(node, 2) else None
    og = w.shape[0] // group
    origin = m.origin
    g.remove(node)
    parts = [g.fresh(f"{node.input[0]}/g{k}") for k in range(group)]
    sizes = [cin // group] * group
    if g.opset >= 13:
        g.make("Split", [node.input[0], g.add_const(f"{node.name}/split",
                                                    np.array(sizes, np.int64))], parts,
               near=node, origin=origin, name=f"{node.name}/split", axis=1)
    else:
        g.make("Split", [node.input[0]], parts, near=node, origin=origin,
               name=f"{node.name}/split", axis=1, split=sizes)
    outs = []
    for k in range(group):
        ins = [parts[k], g.add_const(f"{node.name}/W{k}", w[k * og:(k + 1) * og])]
        if b is not None:
            ins.append(g.add_const(f"{node.name}/B{k}", b[k * og:(k + 1) * og]))
        outs.append(g.fresh(f"{node.output[0]}/g{k}"))
        conv = g.make("Conv", ins, [outs[-1]], near=node, origin=origin,
                      name=f"{node.name}/g{k}")
        conv.attribute.extend(node.attribute)
        del_attr(conv, "group")
    g.make("Concat", outs, [node.output[0]], near=node, origin=origin,
           name=f"{node.name}/concat", axis=1)
    return f"group={group} Conv -> Split + {group} Conv + Concat"
