"""uint8 weights with a zero point (legacy TFLite uint8 models through tf2onnx, older quantizers:
``DQ(W_q uint8, s, z_w)``) -> ``DQ(W_q - z_w as int8, s, 0)`` when every ``W_q - z_w`` lies in
[-128, 127]:

the dequantized weight ``(W_q - z_w) * s`` is unchanged and so is onnxruntime's integer sum
``sum (x_q - z_x)(W_q - z_w)``, and fuse's int8 layer (symmetric int8 weights, docs/fusion.md
"int8") takes it. Only a DQ that fold_constants keeps (the weight of a QDQ layer). A weight whose
``W_q - z_w`` needs 9 bits is left: fuse's int8 layer takes it with a weight zero point (``q - 128``
with ``z - 128``, the row-sum correction of docs/fusion.md "Asymmetric weights")."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, inp
from .fold_constants import quantized_weight

NAME = "qdq_uint8_weights"
OPS = ("DequantizeLinear",)
REPORT_SKIPS = "uint8 weights"


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx") or not all(g.is_const(i) for i in node.input if i):
        return None
    q = g.const(node.input[0])
    # layer weights only: a QDQ Mul / Add's uint8 constant stays as it is (onnxruntime's QLinearMul /
    # QLinearAdd and the int8 Lookup tables computed by onnxruntime read the uint8 codes; int8 codes
    # would change which of its kernels runs)
    if q.dtype != np.uint8 or not quantized_weight(node, g, elementwise=False):
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    q = g.const(node.input[0]).astype(np.int32)
    z = g.const(inp(node, 2)).astype(np.int32) if inp(node, 2) else np.zeros((), np.int32)
    if attr(node, "block_size", 0):
        return "block-wise scales"
    if z.size > 1:
        shape = [1] * q.ndim
        shape[attr(node, "axis", 1) % q.ndim] = -1
        z = z.reshape(shape)
    d = q - z
    if d.min() < -128 or d.max() > 127:
        return f"W_q - z_w spans [{int(d.min())}, {int(d.max())}], beyond int8"
    m.data["codes"] = d.astype(np.int8)
    m.data["zero"] = np.zeros(g.const(inp(node, 2)).shape if inp(node, 2) else (), np.int8)
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    g.set_input(node, 0, g.add_const(f"{node.input[0]}_int8", m.data["codes"]))
    zero = g.add_const(f"{node.name}/zero_point_int8", m.data["zero"])
    if len(node.input) > 2:
        g.set_input(node, 2, zero)
    else:
        node.input.append("")
        g.set_input(node, 2, zero)
    return "uint8 weights with a zero point -> int8 codes W_q - z_w (exact)"
