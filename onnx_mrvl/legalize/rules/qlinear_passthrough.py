"""QOperator models: a standard op running on int8 codes (MaxPool, Flatten, Reshape, Transpose,
nearest Resize, Pad, Split, ...: onnxruntime's quantizer leaves them reading the quantized tensor)
-> DequantizeLinear -> the same op in float -> QuantizeLinear with the input's scale and zero
point. The op only moves or selects values (MaxPool: a monotonic map commutes with the max), so the
codes are the same; the QDQ import then sees the ``DQ -> op -> Q`` form of the QDQ format.
A constant-mode Pad's value (a code; 0 when absent) becomes its dequantized float.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, inp, str_attr
from .qtensor import FLOAT, PASS_OPS, QTYPES, dequantized, domain, float_like, qparams, quantize_into

NAME = "qlinear_passthrough"
OPS = PASS_OPS
REPORT_SKIPS = "QOperator int8"


def match(node, g) -> Optional[Match]:
    if domain(node) or node.op_type not in PASS_OPS or not node.input or not node.input[0]:
        return None
    x = node.input[0]
    if g.dtype(x) not in QTYPES + (None,) or g.is_const(x):
        return None
    params = qparams(g, x)
    if isinstance(params, str):
        return None
    outs = [0] if node.op_type == "MaxPool" else list(range(len(node.output)))
    return Match([node], {"params": params, "outs": [k for k in outs if node.output[k]]})


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if g.opset < 13:
        return f"opset {g.opset} (the quantized-domain rewrite needs opset 13)"
    if node.op_type == "Resize" and (str_attr(node, "mode", "nearest") or "nearest") != "nearest":
        return f"an int8 {str_attr(node, 'mode')} Resize '{node.name}' (onnxruntime interpolates the codes; " \
               f"kept as it is)"
    if node.op_type == "Pad":
        if (str_attr(node, "mode", "constant") or "constant") == "constant" and inp(node, 2) and \
                not g.is_const(inp(node, 2)):
            return f"Pad '{node.name}' has a computed pad value"
    return None


def rewrite(m: Match, g) -> str:
    node, params = m.node, m.data["params"]
    origin = m.origin
    x = dequantized(g, node.input[0], params, near=node, origin=origin)
    g.set_input(node, 0, x)
    if node.op_type == "Pad" and (str_attr(node, "mode", "constant") or "constant") == "constant":
        code = g.const(inp(node, 2)) if inp(node, 2) else None
        code = 0 if code is None else int(np.asarray(code).reshape(-1)[0])
        s = float(np.asarray(g.const(params[0])).reshape(-1)[0])
        z = int(np.asarray(g.const(params[1])).reshape(-1)[0]) if params[1] else 0
        value = g.add_const(f"{node.name}/pad_value", np.array(np.float32((code - z) * np.float32(s)), np.float32))
        while len(node.input) < 3:
            node.input.append("")
        g.set_input(node, 2, value)
    for k in m.data["outs"]:
        out = node.output[k]
        y = float_like(g, out, f"{out}/float")
        g.rename_output(node, k, y)
        g.dtypes[y] = FLOAT
        quantize_into(g, y, out, params, near=node, origin=origin)
    return f"{node.op_type} on int8 codes -> DequantizeLinear, {node.op_type}, QuantizeLinear"


__all__ = ["NAME", "OPS", "match", "check", "rewrite"]
