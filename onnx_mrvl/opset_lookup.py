"""The int8 ``Lookup`` op (docs/fusion.md "int8", Lookup): attributes and reference body.

``Y = DQ_out(T[c, Q_in(X) - lo])``: X quantized with (``in_scale``, ``in_zero_point``, ``in_type``)
exactly as QuantizeLinear, the code (offset by the type's minimum ``lo``) indexes row ``c`` of the
int32 table ``T`` [``channels``, 256] (``c`` the channel along the last axis when ``channels`` > 1,
else row 0), and the output code is dequantized with (``out_scale``, ``out_zero_point``, ``out_type``).
``precision`` "fp32" (fuse/qdq_f32chain.py): ``T`` is float32 and holds the output values: ``Y = T[c, Q_in(X) - lo]``.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from .opset_int8 import INT8_POOL_ATTRS, QRANGE, QTYPES

LOOKUP_ATTRS = INT8_POOL_ATTRS + ("channels",)


def _const(name, values, dtype, dims):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, dtype, dims, values))


def lookup_body(a: dict, present, opset: int):
    if opset < 13:
        raise ValueError("an int8 Lookup's reference body needs opset >= 13")
    it, values = a["in_type"], a.get("precision") == "fp32"
    c = int(a.get("channels", 1))
    nodes = [_const("l_in_s", [float(a["in_scale"])], onnx.TensorProto.FLOAT, []),
             _const("l_in_z", [int(a["in_zero_point"])], QTYPES[it], []),
             _const("l_lo", [QRANGE[it][0]], onnx.TensorProto.INT32, []),
             _const("l_flat", [-1], onnx.TensorProto.INT64, [1]),
             helper.make_node("QuantizeLinear", ["X", "l_in_s", "l_in_z"], ["l_xq"]),
             helper.make_node("Cast", ["l_xq"], ["l_xi"], to=onnx.TensorProto.INT32),
             helper.make_node("Sub", ["l_xi", "l_lo"], ["l_idx0"]),
             helper.make_node("Reshape", ["T", "l_flat"], ["l_table"])]
    idx = "l_idx0"
    if c > 1:   # row c of the table: offset 256 * c along the last (channel) axis
        nodes += [_const("l_rows", [int(v) for v in np.arange(c) * 256], onnx.TensorProto.INT32, [c]),
                  helper.make_node("Add", ["l_idx0", "l_rows"], ["l_idx"])]
        idx = "l_idx"
    if values:   # the fp32 values themselves
        return nodes + [helper.make_node("Gather", ["l_table", idx], ["Y"], axis=0)]
    ot = a["out_type"]
    nodes += [_const("l_out_s", [float(a["out_scale"])], onnx.TensorProto.FLOAT, []),
              _const("l_out_z", [int(a["out_zero_point"])], QTYPES[ot], [])]
    return nodes + [helper.make_node("Gather", ["l_table", idx], ["l_yi"], axis=0),
                    helper.make_node("Cast", ["l_yi"], ["l_yq"], to=QTYPES[ot]),
                    helper.make_node("DequantizeLinear", ["l_yq", "l_out_s", "l_out_z"], ["Y"])]
