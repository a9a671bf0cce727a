"""The Reshape that only drops unit axes after a Conv (conv_1d_to_2d's ``to1d``: [N,O,1,L] ->
[N,O,L]) moves below the elementwise activation that reads it (Relu, GELU written out as Mul / Erf /
Add / Mul / Mul, SiLU as Sigmoid + Mul, ...): the activation then reads the Conv directly and fuse
absorbs it as the Conv's epilogue instead of a separate Mul2D layer after the reshape (Whisper's
Conv1d + GELU, audio front ends' Conv1d + ReLU).

The nodes moved are every node reachable from the reshaped tensor through elementwise ops whose
other operands are that set's tensors or one-element constants, with the shape unchanged; the set
is taken only when nothing else reads its inner tensors. Each tensor leaving the set gets the
Reshape back to its original shape."""
from __future__ import annotations

from typing import Optional

from .base import Match, reshape

NAME = "squeeze_sink"
OPS = ("Reshape",)
ELEMENTWISE = {"Relu", "Sigmoid", "Tanh", "Erf", "Elu", "LeakyRelu", "Softplus", "HardSigmoid", "HardSwish",
               "Mish", "Gelu", "Neg", "Clip", "Mul", "Add", "Sub", "Div", "Pow"}
MAX_NODES = 16


def _drops_unit_axes(src, dst) -> bool:
    return src is not None and dst is not None and len(dst) < len(src) and \
        [d for d in src if d != 1] == [d for d in dst if d != 1]


def _operand_ok(g, i: str, inside, rank: int) -> bool:
    return not i or i in inside or (g.is_const(i) and g.const(i).size == 1 and g.const(i).ndim <= rank)


def _closure(g, root: str, shape):
    """(nodes, exits) of the elementwise set reading ``root`` (see the module docstring), or None.
    A node joins once every operand is in the set or a one-element constant; the others reading the
    set's tensors are where it ends (each such tensor an exit); every reader of ``root`` must join."""
    inside, nodes, grown = {root}, [], True
    while grown:
        grown = False
        for t in list(inside):
            for c in g.users(t):
                if any(c is x for x in nodes) or c.op_type not in ELEMENTWISE or c.domain not in ("", "ai.onnx"):
                    continue
                if len(c.output) != 1 or not all(_operand_ok(g, i, inside, len(shape)) for i in c.input):
                    continue
                if g.shape(c.output[0]) is None or list(g.shape(c.output[0])) != list(shape):
                    continue
                nodes.append(c)
                inside.add(c.output[0])
                grown = True
                if len(nodes) > MAX_NODES:
                    return None
    if not nodes or any(not any(u is x for x in nodes) for u in g.users(root)):
        return None
    exits = [c.output[0] for c in nodes
             if c.output[0] in g.pinned or any(not any(u is x for x in nodes) for u in g.users(c.output[0]))]
    return nodes, exits


def match(node, g) -> Optional[Match]:
    if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or node.output[0] in g.pinned:
        return None
    prod = g.producer.get(node.input[0])
    if prod is None or prod.op_type != "Conv":
        return None
    src, dst = g.shape(node.input[0]), g.shape(node.output[0])
    if not _drops_unit_axes(src, dst):
        return None
    found = _closure(g, node.output[0], dst)
    if found is None:
        return None
    nodes, exits = found
    return Match([node] + nodes, {"src": list(src), "dst": list(dst), "exits": exits})


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    node, moved = m.nodes[0], m.nodes[1:]
    src, dst = m.data["src"], m.data["dst"]
    y = node.output[0]
    for c in moved:
        for k, i in enumerate(c.input):
            if i == y:
                g.set_input(c, k, node.input[0])
    g.remove(node)
    for c in moved:
        g.set_shape(c.output[0], src, g.dtype(c.output[0]))
    for t in m.data["exits"]:
        p = g.producer[t]
        t4 = g.fresh(f"{t}/4d")
        inner = [c for c in g.users(t) if any(c is x for x in moved)]
        g.rename_output(p, 0, t4)
        for c in inner:     # the set keeps reading the unsqueezed tensor
            for k, i in enumerate(c.input):
                if i == t:
                    g.set_input(c, k, t4)
        g.set_shape(t4, src, g.dtype(t4))
        reshape(g, t4, dst, near=p, origin=m.origin, out=t, tag="squeeze")
    return f"unit-axis Reshape moved below {len(moved)} elementwise node(s)"
