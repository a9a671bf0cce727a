"""The last time step of a one-direction LSTM / GRU / RNN's ``Y`` -> its ``Y_h``.

Keras 2 ``GRU(return_sequences=False)`` through tf2onnx: ``Y [T, 1, B, H] -> Squeeze(axis 1) ->
Slice(start -1, axis 0) [1, B, H]`` (torch: ``out[-1]`` as ``Gather(-1, axis 0)``). For a forward
layer without ``sequence_lens`` (layout 0) that step is ``Y_h`` [1, B, H] value for value, so the
reader takes ``Reshape(Y_h, its shape)`` (exact): the slice along time was a CPU op between the
recurrent layer and the head ("split or slice on the leading axis")."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, axes_of, inp, reshape, str_attr

NAME = "rnn_last_step"
OPS = ("Slice", "Gather")
RNNS = ("LSTM", "GRU", "RNN")


def _last_index(g, node, steps: int) -> bool:
    """``node`` takes index T-1 (or -1) of axis 0 alone."""
    if node.op_type == "Gather":
        idx = g.const(node.input[1])
        return attr(node, "axis", 0) == 0 and idx is not None and idx.size == 1 and \
            int(idx.reshape(-1)[0]) in (-1, steps - 1)
    if attr(node, "starts") is not None:   # opset < 10
        starts, ends, axes, steps_ = attr(node, "starts"), attr(node, "ends"), attr(node, "axes"), None
    else:
        starts, ends = g.const(inp(node, 1)), g.const(inp(node, 2))
        axes = axes_of(g, node, 3)
        steps_ = g.const(inp(node, 4)) if inp(node, 4) else None
        if starts is None or ends is None or axes is None:
            return None
        starts, ends = [int(v) for v in starts.reshape(-1)], [int(v) for v in ends.reshape(-1)]
    axes = list(axes) if axes else list(range(len(starts)))
    if axes != [0] or (steps_ is not None and int(np.asarray(steps_).reshape(-1)[0]) != 1):
        return False
    return starts[0] in (-1, steps - 1) and ends[0] >= steps


def match(node, g) -> Optional[Match]:
    if node.op_type not in OPS or node.domain not in ("", "ai.onnx"):
        return None
    p = g.producer.get(node.input[0])
    squeeze = None
    if p is not None and p.op_type == "Squeeze" and g.only_consumer(p.output[0]) is node:
        squeeze, p = p, g.producer.get(p.input[0])
    if p is None or p.op_type not in RNNS or p.domain not in ("", "ai.onnx") or p.output[0] != \
            (squeeze.input[0] if squeeze is not None else node.input[0]):
        return None
    sy, so = g.shape(p.output[0]), g.shape(node.output[0])
    if sy is None or so is None or len(sy) != 4 or sy[1] != 1:
        return None
    if squeeze is not None and [a % 4 for a in (axes_of(g, squeeze, 1) or [])] != [1]:
        return None
    if not _last_index(g, node, sy[0]):
        return None
    return Match([node] + ([squeeze] if squeeze is not None else []), {"rnn": p, "shape": list(so)})


def check(m: Match, g, target) -> Optional[str]:
    rnn = m.data["rnn"]
    if (str_attr(rnn, "direction", "forward") or "forward") != "forward":
        return f"{rnn.op_type} '{rnn.name}' runs {str_attr(rnn, 'direction')} (Y_h is not the last step of Y)"
    if inp(rnn, 4):
        return f"{rnn.op_type} '{rnn.name}' has sequence_lens (Y_h is each sequence's own last step)"
    if attr(rnn, "layout", 0) != 0:
        return f"{rnn.op_type} '{rnn.name}' is batch-first (layout 1)"
    return None


def rewrite(m: Match, g) -> str:
    node, rnn = m.node, m.data["rnn"]
    if len(rnn.output) < 2 or not rnn.output[1]:
        while len(rnn.output) < 2:
            rnn.output.append("")
        g.rename_output(rnn, 1, g.fresh(f"{rnn.name}/Y_h"))
        sy = g.shape(rnn.output[0])
        g.set_shape(rnn.output[1], [1, sy[2], sy[3]], g.dtype(rnn.output[0]))
    out = node.output[0]
    for n in m.nodes:
        g.remove(n)
    reshape(g, rnn.output[1], m.data["shape"], near=node, origin=m.origin, out=out, tag="last_step")
    return f"last step of {rnn.op_type} '{rnn.name}' Y -> its Y_h"


__all__ = ["NAME", "OPS", "match", "check", "rewrite"]
