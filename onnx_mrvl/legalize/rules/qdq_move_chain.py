"""``DQ(s, z) -> move -> Q(s, z) -> DQ(s, z) -> move' -> Q(s, z)`` -> ``DQ -> move -> move' -> Q``:
a Q -> DQ pair on a tensor the accelerator cannot hold (not 2-D to 5-D: the 6-D view of a window
partition) between two data moves of codes on one grid is removed.

onnxruntime's quantizer puts a pair after every Reshape / Transpose / Slice / Concat / Pad it
quantizes, so a Swin window partition (``Pad -> Reshape 6-D -> Transpose -> Reshape``), its roll
(``Slice, Slice -> Concat``) and its patch merging's strided Slices are cut by pairs that the float
rules (the 6-D reshape / transpose folding, slices through transposes) do not see through: they
stayed on the CPU (Swin QDQ: 10 regions; "a QuantizeLinear -> DequantizeLinear pair on a 6-D
tensor"). A move only copies values, so a move of values on the
grid ``(s, z)`` (the DQ's output) gives values on that grid, which the Q maps back to their own codes
and the DQ to the same values: the pair computes the identity there (exact; Pad only with a zero
pad value, whose code is z). The last pair, the one an int8 layer or a float op reads, stays: the
chain between a DQ and a Q is one float data move (on the accelerator: values on the grid rounded
to fp16 keep their code, |q - z| <= 255 < 2^10). A pair on a 2-D to 5-D tensor stays too: fuse
makes it a Requantize, exact and no work on codes already on its grid.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match

NAME = "qdq_move_chain"
OPS = ("QuantizeLinear",)
# one data input (input 0) unless listed in MULTI; the others are constants (shapes, perms, starts)
MOVES = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Slice", "Pad", "Concat",
         "DepthToSpace", "SpaceToDepth", "Identity")
DEPTH = 8
HELD_RANKS = (2, 3, 4, 5)   # the ranks the accelerator's element-wise layers take (fuse/patterns.py)


def _key(node, g):
    """(scale, (zero point dtype, value)) of a Q / DQ with constant scalar parameters and 8-bit
    codes, else None."""
    if node.domain not in ("", "ai.onnx") or len(node.input) < 2:
        return None
    s = g.const(node.input[1])
    z = g.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if s is None or np.asarray(s).size != 1 or (len(node.input) > 2 and node.input[2] and z is None):
        return None
    if z is not None and np.asarray(z).dtype not in (np.int8, np.uint8):
        return None   # 8-bit codes only (the accelerator's; 16-bit pairs stay as they are)
    zt = (np.asarray(z).dtype.str, np.asarray(z).reshape(-1).tolist()) if z is not None else None
    return float(np.asarray(s).reshape(-1)[0]), zt


def _data_inputs(node):
    return [i for i in node.input if i] if node.op_type == "Concat" else list(node.input[:1])


def _move(node, g) -> bool:
    """A pure data move whose non-data inputs are constants (Pad: zero value or not constant mode)."""
    if node.op_type not in MOVES or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return False
    rest = [] if node.op_type == "Concat" else [i for i in node.input[1:] if i]
    if any(not g.is_const(i) for i in rest):
        return False
    if node.op_type == "Pad":
        mode = next((a.s.decode() for a in node.attribute if a.name == "mode"), "constant")
        value = g.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if mode == "constant" and value is not None and np.any(np.asarray(value) != 0):
            return False
        if any(a.name == "value" and a.f != 0 for a in node.attribute):
            return False
    return True


def _on_grid(g, t: str, key, depth: int = DEPTH) -> bool:
    """``t`` holds values of the grid ``key``: a DQ of activations with it, or a move of such values."""
    p = g.producer.get(t)
    if p is None or depth == 0:
        return False
    if p.op_type == "DequantizeLinear":
        return not g.is_const(p.input[0]) and _key(p, g) == key
    return _move(p, g) and all(_on_grid(g, i, key, depth - 1) for i in _data_inputs(p))


grid_key, on_grid = _key, _on_grid   # for the rules that look through such pairs (grouped_transpose)


def match(node, g) -> Optional[Match]:
    key = _key(node, g)
    x = node.input[0] if node.input else ""
    move = g.producer.get(x)
    if key is None or move is None or not _move(move, g) or x in g.pinned or len(g.users(x)) != 1:
        return None
    if g.shape(x) is None or len(g.shape(x)) in HELD_RANKS:
        return None
    if not all(_on_grid(g, i, key) for i in _data_inputs(move)):
        return None
    users = g.users(node.output[0])
    dq = users[0] if len(users) == 1 and users[0].op_type == "DequantizeLinear" else None
    if dq is None or _key(dq, g) != key or dq.output[0] in g.pinned or node.output[0] in g.pinned:
        return None
    readers = g.users(dq.output[0])
    for r in readers:   # each reader moves the values on to another Q of the grid: that pair stays
        nxt = g.users(r.output[0]) if r.output else []
        if not (_move(r, g) and r.op_type != "Concat" and r.input[0] == dq.output[0]
                and dq.output[0] not in r.input[1:] and r.output[0] not in g.pinned and len(nxt) == 1
                and nxt[0].op_type == "QuantizeLinear" and _key(nxt[0], g) == key):
            return None
    return Match([node, dq]) if readers else None


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    q, dq = m.nodes
    g.replace_uses(dq.output[0], q.input[0])
    g.remove(dq)
    g.remove(q)
    return "a Q -> DQ pair between two moves of codes on its grid removed (the identity there)"
