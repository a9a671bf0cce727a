"""A ``reflect`` or ``edge`` Pad (constant pads, static float input) -> per padded axis, the border
rows gathered from the tensor and concatenated around it:

    Pad(x, reflect, [p .. q] on axis a)  ->  Concat(GatherElements(x, L, a), x, GatherElements(x, R, a), a)

with index tables L = [p, p-1, .., 1] and R = [n-2, .., n-1-q] along ``a`` (edge: L = [0] * p,
R = [n-1] * q), broadcast over the other axes. Exact (only data moves); the gathers are the
accelerator's indexed copy (fuse/gather_elements.py), the Concat its concat. Audio front ends pad
this way before framing (librosa / nnAudio's CQT ``reflect`` centring: basic-pitch's constant-Q
transform pads every octave, which left a CPU Pad between the regions of consecutive octaves), and
so do style-transfer / super-resolution nets (``ReflectionPad2d``, ``ReplicationPad2d``).

Not for: ``wrap`` mode, pads computed at run time, negative pads (crops), a reflect pad not smaller
than its axis, rank outside 2-5 (the gather's ranks), non-float data.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from .base import Contradiction, Match, inp, is_float

NAME = "pad_reflect_gather"
OPS = ("Pad",)
MODES = ("reflect", "edge")
RANKS = (2, 3, 4, 5)


def _mode(node) -> str:
    for a in node.attribute:
        if a.name == "mode":
            return a.s.decode()
    return "constant"


def _pads(node, g, rank) -> Optional[List[int]]:
    if g.opset < 11:
        p = next((list(a.ints) for a in node.attribute if a.name == "pads"), None)
    else:
        arr = g.const(inp(node, 1))
        p = None if arr is None else [int(v) for v in np.asarray(arr).reshape(-1)]
    if p is None:
        return None
    if inp(node, 3):
        axes = g.const(node.input[3])
        if axes is None:
            return None
        full = [0] * (2 * rank)
        axes = [int(a) % rank for a in np.asarray(axes).reshape(-1)]
        for k, a in enumerate(axes):
            full[a], full[a + rank] = p[k], p[k + len(axes)]
        p = full
    return p if len(p) == 2 * rank else None


def match(node, g) -> Optional[Match]:
    if node.op_type != "Pad" or node.domain not in ("", "ai.onnx") or _mode(node) not in MODES:
        return None
    shape = g.shape(node.input[0])
    if shape is None:
        return None
    pads = _pads(node, g, len(shape))
    if pads is None:
        return None
    return Match([node], {"pads": pads, "shape": list(shape), "mode": _mode(node)})


def check(m: Match, g, target) -> Optional[str]:
    shape, pads = m.data["shape"], m.data["pads"]
    r = len(shape)
    if r not in RANKS:
        return f"a {r}-D pad (the accelerator's gather takes 2-D to 5-D)"
    if not is_float(g, m.node.input[0]):
        return "non-float data"
    if any(d is None or d <= 0 for d in shape):
        return "a non-static shape"
    if any(p < 0 for p in pads):
        return "a negative pad (a crop)"
    if not any(pads):
        return "pads nothing"
    if m.data["mode"] == "reflect" and any(max(pads[a], pads[a + r]) >= shape[a] for a in range(r)):
        return Contradiction("a reflect pad as wide as its axis (onnxruntime allows at most the axis length - 1)")
    return None


def _index(rows: List[int], shape: List[int], axis: int) -> np.ndarray:
    """``rows`` along ``axis``, broadcast to ``shape`` (with ``len(rows)`` on ``axis``) as int64."""
    view = [1] * len(shape)
    view[axis] = len(rows)
    full = list(shape)
    full[axis] = len(rows)
    return np.ascontiguousarray(np.broadcast_to(np.asarray(rows, np.int64).reshape(view), full))


def rewrite(m: Match, g) -> str:
    node = m.node
    shape, pads, mode = list(m.data["shape"]), m.data["pads"], m.data["mode"]
    r = len(shape)
    origin = m.origin
    out_name = node.output[0]
    dt = g.dtype(node.input[0])
    g.remove(node)
    cur = node.input[0]
    axes = [a for a in range(r) if pads[a] or pads[a + r]]
    for k, a in enumerate(axes):
        n, p, q = shape[a], pads[a], pads[a + r]
        left = list(range(p, 0, -1)) if mode == "reflect" else [0] * p
        right = list(range(n - 2, n - 2 - q, -1)) if mode == "reflect" else [n - 1] * q
        parts = []
        for tag, rows in (("left", left), ("right", right)):
            if not rows:
                continue
            t = g.fresh(f"{out_name}/{mode}{a}_{tag}")
            idx = g.add_const(f"{node.name}/{mode}{a}_{tag}_index", _index(rows, shape, a))
            g.make("GatherElements", [cur, idx], [t], near=node, origin=origin,
                   name=f"{node.name}/{mode}{a}_{tag}", axis=a)
            g.set_shape(t, [len(rows) if i == a else d for i, d in enumerate(shape)], dt)
            parts.append((tag, t))
        seq = [t for tag, t in parts if tag == "left"] + [cur] + [t for tag, t in parts if tag == "right"]
        shape[a] = n + p + q
        out = out_name if k == len(axes) - 1 else g.fresh(f"{out_name}/{mode}{a}")
        g.make("Concat", seq, [out], near=node, origin=origin, name=f"{node.name}/{mode}{a}", axis=a)
        g.set_shape(out, list(shape), dt)
        cur = out
    return f"{mode} Pad on axes {axes} -> GatherElements of the border rows + Concat"
