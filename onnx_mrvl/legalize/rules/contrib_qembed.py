"""com.microsoft ``QEmbedLayerNormalization`` (``quantize_dynamic`` of a model whose embeddings
onnxruntime's optimizer fused into EmbedLayerNormalization) -> ``EmbedLayerNormalization`` on the
dequantized tables, which ``contrib_embed`` decomposes (Gathers on the CPU, the Adds and the layer
norm on the accelerator).

The CPU kernel dequantizes every table value it reads, ``(q - zero_point) * scale`` in fp32 (one
scale and zero point per table), then adds and normalises in fp32 as EmbedLayerNormalization does:
dequantizing the constant tables first computes the same values. Inputs: input_ids, segment_ids,
word / position / segment tables, gamma, beta (all quantized), mask, their scales (8-12) and zero
points (13-17).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, inp
from .contrib_ops import MS, float_attr
from .contrib_ops import REPORT_SKIPS, match  # noqa: F401  (the contrib rules' own)

NAME = "contrib_qembed"
OPS = ("QEmbedLayerNormalization",)
TABLES = {2: (8, 13), 3: (9, 14), 4: (10, 15), 5: (11, 16), 6: (12, 17)}   # table -> (scale, zero point)


def _dequantized(g, n, idx: int) -> Optional[np.ndarray]:
    q = g.const(inp(n, idx))
    s_name, z_name = inp(n, TABLES[idx][0]), inp(n, TABLES[idx][1])
    s = g.const(s_name) if s_name else None
    z = g.const(z_name) if z_name else np.zeros(1, np.int32)
    if q is None or s is None or z is None or s.size != 1 or z.size != 1:
        return None
    return ((q.astype(np.float32) - np.float32(z.reshape(-1)[0])) * np.float32(s.reshape(-1)[0])).astype(np.float32)


def check(m: Match, g, target) -> Optional[str]:
    n = m.node
    for idx in TABLES:
        if inp(n, idx) and _dequantized(g, n, idx) is None:
            return f"QEmbedLayerNormalization '{n.name}': input {idx} '{inp(n, idx)}' is not a constant table " \
                   f"with one constant scale and zero point"
    return None


def rewrite(m: Match, g) -> str:
    n = m.node
    ins = [inp(n, 0), inp(n, 1)]
    for idx in TABLES:
        ins.append(g.add_const(f"{n.name}/{inp(n, idx)}_dequantized", _dequantized(g, n, idx)) if inp(n, idx) else "")
    ins.append(inp(n, 7))
    while ins and not ins[-1]:
        ins.pop()
    outs = list(n.output)
    g.remove(n)
    g.make("EmbedLayerNormalization", ins, outs, near=n, origin=m.origin, name=n.name, domain=MS,
           epsilon=float_attr(n, "epsilon", 1e-12))
    return "QEmbedLayerNormalization -> EmbedLayerNormalization on the dequantized tables"
