"""``Log(v + eps)`` with a tiny constant eps (<= 2^-31) -> ``max(Log(v), log eps)``.

basic-pitch's ``10 log10(|X|^2 + 1e-10)`` (tf2onnx), ``torch.log(spec + 1e-10)`` exports: 1e-10 is 0
in fp16 (below its smallest subnormal, 2^-24 ~ 6e-8), so a power bin that fp16 flushes to 0 gives
``log(0) = -inf`` instead of ``log(1e-10)`` (the simulator then reports a non-finite result). In the
log domain the eps is an ordinary number: for v = 0 both sides are ``log eps``; for any non-zero fp16
v >= 2^-24 they differ by ``log(1 + eps / v) <= eps / v <= 2^-7``, below half an fp16 ulp of the
result (|log v| >= 11 wherever the difference exceeds 2^-12); negative v gives NaN on both sides.
(An fp32 v between 0 and 2^-24, which fp16 storage flushes anyway, meets the floor: up to ln 2 below
the fp32 value.) The fuse stage runs ``Log -> Max(., c)`` as one log activation with a floor
(fuse/log_act.py). Left alone: a larger eps (fp16 keeps the sum), an Add read by anything else, a
non-scalar or non-constant addend."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .base import Match, is_float
from .log_floor_clamp import floor_after_log

NAME = "log_eps_floor"
RESTORABLE = True   # a float re-expression: put back when none of it is offloaded (split/restore.py)
OPS = ("Log",)
EPS_MAX = 2.0 ** -31


def match(node, g) -> Optional[Match]:
    if node.op_type != "Log" or node.domain not in ("", "ai.onnx") or not is_float(g, node.input[0]):
        return None
    add = g.producer.get(node.input[0])
    if add is None or add.op_type != "Add" or add.domain not in ("", "ai.onnx") or len(add.input) != 2:
        return None
    if len(g.users(add.output[0])) != 1 or add.output[0] in g.pinned:
        return None
    k = 1 if g.const(add.input[1]) is not None else 0 if g.const(add.input[0]) is not None else None
    if k is None or g.const(add.input[1 - k]) is not None:
        return None
    c = np.asarray(g.const(add.input[k]))
    if c.size != 1 or c.dtype.kind != "f":
        return None
    eps = float(c.reshape(-1)[0])
    v = add.input[1 - k]
    if not (0.0 < eps <= EPS_MAX) or v in g.pinned or g.shape(v) != g.shape(add.output[0]):
        return None
    return Match([node, add], {"eps": eps, "v": v})


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    log, add = m.nodes
    floor_after_log(g, log, add, m.data["v"], m.data["eps"])
    return (f"Log(v + {m.data['eps']:g}) -> max(Log(v), {math.log(m.data['eps']):g}): the eps fp16 flushes, "
            f"in the log domain")
