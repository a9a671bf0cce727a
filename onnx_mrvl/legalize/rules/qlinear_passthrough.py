"""QOperator models: a standard op running on int8 codes (MaxPool, Flatten, Reshape, Transpose,
nearest Resize, Pad, Split, ...: onnxruntime's quantizer leaves them reading the quantized tensor)
-> DequantizeLinear -> the same op in float -> QuantizeLinear with the input's scale and zero
point. The op only moves or selects values (MaxPool: a monotonic map commutes with the max), so the
codes are the same; the QDQ import then sees the ``DQ -> op -> Q`` form of the QDQ format.
A constant-mode Pad's value (a code; 0 when absent) becomes its dequantized float.

When nothing upstream writes the codes' scale (an int8 graph input: TFLite models through tf2onnx
move the NHWC int8 input to NCHW before its DequantizeLinear), the scale and zero point are those of
the op's readers when every reader is a DequantizeLinear with one constant scale and zero point:
``op(codes) -> DQ(s, z)`` is ``DQ(s, z) -> op -> Q(s, z) -> DQ(s, z)``, exactly. A ``Concat`` of
int8 codes (tf2onnx writes it on the codes of TFLite's CONCATENATION, whose inputs share one scale)
is taken the same way, with its readers' scale or, without one, its inputs' common scale.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, inp, str_attr
from .qtensor import (FLOAT, PASS_OPS, QTYPES, QParams, dequantized, domain, float_like, qparams, quantize_into,
                      same_param, scalar_const)

NAME = "qlinear_passthrough"
OPS = PASS_OPS + ("Concat",)
REPORT_SKIPS = "QOperator int8"


def reader_params(g, node, outs) -> Optional[QParams]:
    """The one (scale, zero point) of the DequantizeLinear nodes that read every used output of
    ``node`` (None when another node or a graph output reads one, or their parameters differ)."""
    found = None
    for k in outs:
        out = node.output[k]
        if out in g.pinned or not g.users(out):
            return None
        for c in g.users(out):
            if c.op_type != "DequantizeLinear" or domain(c) or c.input[0] != out or not g.is_const(inp(c, 1)) \
                    or not scalar_const(g, inp(c, 1)) or not scalar_const(g, inp(c, 2)):
                return None
            p = (inp(c, 1), inp(c, 2))
            if found is None:
                found = p
            elif not (same_param(g, found[0], p[0]) and same_param(g, found[1], p[1])):
                return None
    return found


def match(node, g) -> Optional[Match]:
    if domain(node) or node.op_type not in OPS or not node.input or not node.input[0]:
        return None
    data = [x for x in (node.input if node.op_type == "Concat" else node.input[:1]) if x]
    if any(g.dtype(x) not in QTYPES + (None,) for x in data) or all(g.is_const(x) for x in data):
        return None
    if node.op_type == "Concat" and any(g.dtype(x) not in QTYPES for x in data):
        return None
    outs = [0] if node.op_type == "MaxPool" else list(range(len(node.output)))
    outs = [k for k in outs if node.output[k]]
    params = qparams(g, data[0]) if node.op_type != "Concat" and not g.is_const(data[0]) else "concat"
    if isinstance(params, str):
        params = reader_params(g, node, outs)
    if params is None and node.op_type == "Concat":
        each = [qparams(g, x) for x in data]
        if all(not isinstance(p, str) and same_param(g, p[0], each[0][0]) and same_param(g, p[1], each[0][1])
               for p in each):
            params = each[0]
    if params is None:
        return None
    return Match([node], {"params": params, "outs": outs, "data": len(data)})


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
    for i in range(m.data["data"]):
        g.set_input(node, i, dequantized(g, node.input[i], params, near=node, origin=origin))
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
