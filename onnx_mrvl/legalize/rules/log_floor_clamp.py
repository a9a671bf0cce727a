"""``Log(max(v, eps))`` with an eps below fp16's smallest normal -> ``max(Log(v), log eps)``.

Log-spectrogram front ends floor the power before the log: ``log(clamp(x, min=1e-10))`` (torchaudio,
librosa-style exports, openWakeWord's melspectrogram). 1e-10 is 0 in fp16 (below its smallest
subnormal, 6e-8): the clamp stored in fp16 flushes it, and digital silence comes out as
``log(0) = -inf`` instead of ``log(1e-10)``. ``log`` is monotone, so the floor taken after the log is
the same value (exact in fp32; ``log(0) = -inf`` meets ``max(-inf, log eps) = log eps``), and in the
log domain it is an ordinary number. Left alone: a bound fp16 holds as a normal (the clamp is exact
enough there), a clamp read by anything else, an upper bound (a Clip with a finite max)."""
from __future__ import annotations

import math
from typing import Optional

from .base import Match, inp, is_float, origin_of
from .log_range_scale import FP16_MIN_NORMAL, floor_clamp

NAME = "log_floor_clamp"
RESTORABLE = True   # a float re-expression: put back when none of it is offloaded (split/restore.py)
OPS = ("Log",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Log" or node.domain not in ("", "ai.onnx") or not is_float(g, node.input[0]):
        return None
    c = floor_clamp(g, node)
    if c is None or c.input[0] in g.pinned:
        return None
    eps = float(g.const(inp(c, 1)).reshape(-1)[0])
    return Match([node, c], {"eps": eps}) if eps < FP16_MIN_NORMAL else None


def check(m: Match, g, target) -> Optional[str]:
    return None


def floor_after_log(g, log, floor_node, v: str, eps: float) -> None:
    """``Log(floor_node(v))`` -> ``Max(Log(v), log eps)``: the Log reads ``v``, ``floor_node`` (the
    clamp or the ``+ eps``) goes, and the floor is taken in the log domain under the Log's output name."""
    y = log.output[0]
    mid = g.fresh(f"{y}/unfloored")
    g.set_input(log, 0, v)
    g.remove(floor_node)
    g.rename_output(log, 0, mid)
    floor = g.scalar_like(f"{floor_node.name}/log_floor", math.log(eps), mid)
    g.make("Max", [mid, floor], [y], near=log, origin=origin_of(floor_node, log), name=f"{floor_node.name}/log_floor")


def rewrite(m: Match, g) -> str:
    log, c = m.nodes
    floor_after_log(g, log, c, c.input[0], m.data["eps"])
    return f"Log(max(v, {m.data['eps']:g})) -> max(Log(v), {math.log(m.data['eps']):g}): the floor fp16 flushes, in the log domain"
