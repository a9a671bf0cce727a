"""Reference body of the int8 Concat (docs/fusion.md "int8"): Q -> DQ of every input with its own
quantization (``in_scales``, ``in_zero_points``, ``in_type``), the float Concat, Q -> DQ of Y."""
from __future__ import annotations

import onnx
from onnx import helper

from .opset_int8 import QTYPES, is_int8

INT8_CONCAT_ATTRS = ("in_scales", "in_zero_points")


def _const(name, values, dtype, dims):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, dtype, dims, values))


def int8_concat_body(float_body):
    def body(a, present, opset):
        if not is_int8(a):
            return float_body(a, present, opset)
        n, it, ot = a["num_inputs"], a["in_type"], a["out_type"]
        nodes = [_const("c_out_s", [float(a["out_scale"])], onnx.TensorProto.FLOAT, []),
                 _const("c_out_z", [int(a["out_zero_point"])], QTYPES[ot], [])]
        for i in range(n):
            nodes += [_const(f"c_s{i}", [float(a["in_scales"][i])], onnx.TensorProto.FLOAT, []),
                      _const(f"c_z{i}", [int(a["in_zero_points"][i])], QTYPES[it], []),
                      helper.make_node("QuantizeLinear", [f"X{i}", f"c_s{i}", f"c_z{i}"], [f"c_q{i}"]),
                      helper.make_node("DequantizeLinear", [f"c_q{i}", f"c_s{i}", f"c_z{i}"], [f"c_x{i}"])]
        return nodes + [helper.make_node("Concat", [f"c_x{i}" for i in range(n)], ["c_y"], axis=a["axis"]),
                        helper.make_node("QuantizeLinear", ["c_y", "c_out_s", "c_out_z"], ["c_yq"]),
                        helper.make_node("DequantizeLinear", ["c_yq", "c_out_s", "c_out_z"], ["Y"])]
    return body
