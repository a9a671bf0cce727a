"""A constant-mode Pad read only by a Transpose, or by a Reshape that only inserts/removes unit
axes, moves below it (pads remapped): tf2onnx writes a Keras ``Conv1D(padding="causal")`` as
``Pad([N, T, C]) -> Reshape [N, 1, T, C] -> Transpose -> Conv``; once next to the Conv the Pad
folds into it (pad_fold) instead of running on the CPU."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr
from .pad_fold import pad_spec

NAME = "pad_sink"
OPS = ("Pad",)


def _unit_map(src, dst):
    """Axis of ``dst`` holding each non-unit axis of ``src`` (None when the reshape does more than
    insert/remove unit axes)."""
    a = [i for i, d in enumerate(src) if d != 1]
    b = [j for j, d in enumerate(dst) if d != 1]
    if [src[i] for i in a] != [dst[j] for j in b]:
        return None
    return dict(zip(a, b))


def match(node, g) -> Optional[Match]:
    if node.op_type != "Pad" or node.domain not in ("", "ai.onnx"):
        return None
    user = g.only_consumer(node.output[0])
    if user is None or user.op_type not in ("Transpose", "Reshape") or user.input[0] != node.output[0]:
        return None
    spec = pad_spec(node, g)
    sx, sp, so = g.shape(node.input[0]), g.shape(node.output[0]), g.shape(user.output[0])
    if spec is None or sx is None or sp is None or so is None:
        return None
    pads, value, r = spec
    padded = [i for i in range(r) if pads[i] or pads[i + r]]
    if user.op_type == "Transpose":
        perm = [int(p) for p in (attr(user, "perm") or list(range(r))[::-1])]
        where = {perm[j]: j for j in range(r)}
    else:
        where = _unit_map(sp, so)
        if where is None or any(i not in where or sx[i] == 1 for i in padded):
            return None
    return Match([node, user], {"spec": spec, "where": where, "so": so, "sx": sx})


def check(m: Match, g, target) -> Optional[str]:
    pads = m.data["spec"][0]
    if any(v < 0 for v in pads):
        return "negative pads (cropping)"
    return None


def rewrite(m: Match, g) -> str:
    pad, user = m.nodes
    pads, value, r = m.data["spec"]
    where, so, sx = m.data["where"], list(m.data["so"]), m.data["sx"]
    ro = len(so)
    new = [0] * (2 * ro)
    shape = list(so)
    for i in range(r):
        if pads[i] or pads[i + r]:
            j = where[i]
            new[j], new[j + ro] = pads[i], pads[i + r]
            shape[j] = sx[i]
    origin = m.origin
    y = user.output[0]
    mid = g.fresh(f"{y}/unpadded")
    g.remove(pad)
    g.remove(user)
    if user.op_type == "Transpose":
        g.make("Transpose", [pad.input[0]], [mid], near=user, origin=origin, name=user.name,
               perm=[int(p) for p in (attr(user, "perm") or list(range(r))[::-1])])
    else:
        g.make("Reshape", [pad.input[0], g.add_const(f"{user.name}/shape", np.array(shape, np.int64))],
               [mid], near=user, origin=origin, name=user.name)
    g.set_shape(mid, shape, g.dtype(pad.input[0]))
    ins = [mid, g.add_const(f"{pad.name}/pads", np.array(new, np.int64))]
    if value != 0.0:
        ins.append(g.add_const(f"{pad.name}/value", np.array(value, np.float32)))
    g.make("Pad", ins, [y], near=user, origin=origin, name=pad.name, mode="constant")
    return f"Pad moved below {user.op_type} {user.name} (pads {new})"
