"""A per-channel ``QuantizeLinear(axis=1) -> DequantizeLinear(scale 1)`` after an int8-in layer's
float chain (legalize ``qdq_channel_input``'s form of NNCF's per-channel quantized depthwise-conv
inputs) as that layer's epilogue: a per-channel fp32 division by ``s_c`` (``post_ops`` "div" with
one value per output channel, ``post_sizes``), then the output quantizer of scale 1. Exact:
QuantizeLinear computes ``sat(rne(x / s_c) + z)`` with ``x / s_c`` in fp32, the division here, and
the scale-1 quantize-dequantize then gives ``q - z``, which fp16 holds exactly (|q - z| <= 255)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..graph_index import GraphIndex, attr
from .qdq import qparams


def channel_pair(g: GraphIndex, y: str, claimed, channels: int) -> Optional[tuple]:
    """(Q, DQ, the DQ's (1.0, z, type), s [channels] as floats) when a per-channel (axis 1)
    QuantizeLinear alone reads ``y`` and one per-tensor DequantizeLinear of scale 1 and the same
    zero point alone reads its codes, else None."""
    users = g.consumers.get(y, [])
    if len(users) != 1 or y in g.output_set or users[0].op_type != "QuantizeLinear" or len(users[0].input) < 3:
        return None
    q, shape = users[0], g.shape(y)
    if shape is None or len(shape) not in (2, 4) or shape[1] != channels:   # axis 1 is the layer's channels
        return None
    if q.domain not in ("", "ai.onnx") or attr(q, "axis", 1) != 1 or not all(g.is_const(i) for i in q.input[1:3]):
        return None
    s, z = np.asarray(g.const(q.input[1])), np.asarray(g.const(q.input[2]))
    if s.dtype != np.float32 or s.shape != (channels,) or z.shape != (channels,) or not np.all(z == z[0]) \
            or not (np.isfinite(s).all() and np.all(s > 0)):
        return None
    dqs = g.consumers.get(q.output[0], [])
    if len(dqs) != 1 or dqs[0].op_type != "DequantizeLinear" or dqs[0].output[0] in g.output_set:
        return None
    dq = dqs[0]
    qd = qparams(g, dq)
    if isinstance(qd, str) or qd is None or float(qd[0]) != 1.0 or int(qd[1]) != int(z[0]) or \
            str(qd[2]) != str(z.dtype):
        return None
    if {q.name, dq.name} & (set(g.excluded) | set(claimed)):
        return None
    return q, dq, qd, [float(v) for v in s]
