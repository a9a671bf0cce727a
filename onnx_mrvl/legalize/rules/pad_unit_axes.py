"""Reshape (adds unit axes) -> Pad -> Reshape (removes them) becomes one Pad on the original
tensor. paddle2onnx writes Paddle's ``F.pad`` on a 4-D NCHW tensor (pad3d) as Unsqueeze to 5-D,
Pad on the last two axes, Squeeze back (PP-HGNetV2 stems); in that form ``pad_fold`` cannot see
the Conv it feeds and the 5-D Pad cannot run on the accelerator."""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from .base import Match
from .pad_fold import pad_spec

NAME = "pad_unit_axes"
OPS = ("Pad",)


def _unit_insertions(small, big) -> Optional[List[int]]:
    """For each axis of ``big``: the axis of ``small`` it is, or -1 for an inserted unit axis."""
    out, j = [], 0
    for d in big:
        if j < len(small) and d == small[j]:
            out.append(j)
            j += 1
        elif d == 1:
            out.append(-1)
        else:
            return None
    return out if j == len(small) else None


def match(node, g) -> Optional[Match]:
    if node.op_type != "Pad" or node.domain not in ("", "ai.onnx"):
        return None
    first = g.producer.get(node.input[0])
    last = g.only_consumer(node.output[0])
    if first is None or last is None or first.op_type != "Reshape" or last.op_type != "Reshape" \
            or first.domain not in ("", "ai.onnx") or last.domain not in ("", "ai.onnx"):
        return None
    spec = pad_spec(node, g)
    s_in, s5, s_out = g.shape(first.input[0]), g.shape(node.input[0]), g.shape(last.output[0])
    if spec is None or s_in is None or s5 is None or s_out is None or len(s5) <= len(s_in):
        return None
    return Match([node, last], {"first": first, "spec": spec, "shapes": (s_in, s5, s_out)})


def check(m: Match, g, target) -> Optional[str]:
    (pads, value, r), (s_in, s5, s_out) = m.data["spec"], m.data["shapes"]
    axes = _unit_insertions(s_in, s5)
    if axes is None:
        return "the first Reshape does more than insert unit axes"
    if any(a < 0 and (pads[i] or pads[i + r]) for i, a in enumerate(axes)):
        return "pads an inserted unit axis"
    n = len(s_in)
    new = [0] * (2 * n)
    for i, a in enumerate(axes):
        if a >= 0:
            new[a], new[a + n] = pads[i], pads[i + r]
    if tuple(s_out) != tuple(s_in[a] + new[a] + new[a + n] for a in range(n)):
        return "the last Reshape does not just remove the inserted axes"
    m.data["new"] = new
    return None


def rewrite(m: Match, g) -> str:
    pad, last = m.nodes
    first, (pads, value, r) = m.data["first"], m.data["spec"]
    origin = Match([pad, last, first]).origin
    g.remove(pad)
    g.remove(last)
    dt = g.dtype(first.input[0])
    from onnx import helper
    vals = np.array(value, dtype=helper.tensor_dtype_to_np_dtype(dt) if dt else np.float32)
    g.make("Pad", [first.input[0], g.add_const(f"{pad.name}/pads", np.array(m.data["new"], np.int64)),
                   g.add_const(f"{pad.name}/value", vals)], [last.output[0]], near=pad, origin=origin,
           name=pad.name, mode="constant")
    return f"{len(m.data['shapes'][1])}-D Pad between unit-axis reshapes -> {len(m.data['new']) // 2}-D Pad"
