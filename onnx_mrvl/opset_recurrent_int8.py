"""The int8 mode of the recurrent Mrvl ops (``precision="int8_in"``, docs/fusion.md "int8 recurrent
layers"): X quantized with ``in_scale`` / ``in_zero_point`` / ``in_type``, W and R int8 codes with a
scale and zero point per (direction, gate row) (``kernel_scales`` / ``kernel_zero_points``,
``recurrence_scales`` / ``recurrence_zero_points``, D*G*H values each), Y fp16 (``precision="int8"``:
Y int8 codes, ``out_scale`` / ``out_zero_point`` / ``out_type``); ``state_scale`` > 0
(an option) quantizes ``h`` per timestep before the recurrent GEMM (``state_zero_point``, ``state_type``).

Reference body: QuantizeLinear -> DequantizeLinear of X, ``(Cast(W_q) - z) * s`` of W and R (what
DequantizeLinear computes, per gate row), then the float op's body (and Q -> DQ of Y): onnxruntime's
run of the QDQ model. The per-step state quantization (an option, not what any QDQ model writes) is not in the
body: the simulator alone has it.
"""
from __future__ import annotations

from typing import Callable, List

import onnx
from onnx import helper

INT8_RECURRENT_ATTRS = ("precision", "in_scale", "in_zero_point", "in_type", "kernel_scales", "kernel_zero_points",
                        "recurrence_scales", "recurrence_zero_points", "state_scale", "state_zero_point", "state_type",
                        "out_scale", "out_zero_point", "out_type")
PRECISION = "int8_in"   # int8 X, W, R; fp16 Y
INT8 = "int8"           # the same, Y written as int8 codes (out_scale / out_zero_point / out_type)
QTYPES = {"int8": onnx.TensorProto.INT8, "uint8": onnx.TensorProto.UINT8}


def is_int8(a: dict) -> bool:
    return a.get("precision", "fp16") in (PRECISION, INT8)


def _const(name: str, values, dtype, dims) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, dtype, dims, values))


def _dequantize(role: str, a: dict, rows: int) -> List[onnx.NodeProto]:
    """``(float(q) - z) * s`` of the codes input ``role`` ("W" / "R"), s and z per gate row [D, rows, 1]."""
    key = {"W": "kernel", "R": "recurrence"}[role]
    s = [float(v) for v in a[f"{key}_scales"]]
    z = [float(int(v)) for v in a.get(f"{key}_zero_points") or [0] * len(s)]
    dims = [len(s) // rows, rows, 1]
    return [_const(f"q_{role}_s", s, onnx.TensorProto.FLOAT, dims), _const(f"q_{role}_z", z, onnx.TensorProto.FLOAT, dims),
            helper.make_node("Cast", [role], [f"q_{role}_f"], to=onnx.TensorProto.FLOAT),
            helper.make_node("Sub", [f"q_{role}_f", f"q_{role}_z"], [f"q_{role}_c"]),
            helper.make_node("Mul", [f"q_{role}_c", f"q_{role}_s"], [f"q_{role}"])]


def int8_recurrent_body(float_body: Callable, gates: int) -> Callable:
    """The body of an LSTM / GRU / RNN that dispatches on ``precision`` (module docstring)."""
    def body(a, present, opset):
        nodes = float_body(a, present, opset)
        if not is_int8(a):
            return nodes
        if opset < 13:
            raise ValueError("an int8 recurrent layer's reference body needs opset >= 13")
        rows = gates * int(a["hidden_size"])
        it = a["in_type"]
        pre = [_const("q_x_s", [float(a["in_scale"])], onnx.TensorProto.FLOAT, []),
               _const("q_x_z", [int(a["in_zero_point"])], QTYPES[it], []),
               helper.make_node("QuantizeLinear", ["X", "q_x_s", "q_x_z"], ["q_xq"]),
               helper.make_node("DequantizeLinear", ["q_xq", "q_x_s", "q_x_z"], ["q_x"])]
        pre += _dequantize("W", a, rows) + _dequantize("R", a, rows)
        ren = {"X": "q_x", "W": "q_W", "R": "q_R"}
        for n in nodes:
            for i, t in enumerate(n.input):
                if t in ren:
                    n.input[i] = ren[t]
        if a.get("precision") != INT8:
            return pre + nodes
        for n in nodes:   # Q -> DQ of Y
            for i, t in enumerate(n.output):
                if t == "Y":
                    n.output[i] = "q_y"
        ot = a["out_type"]
        return pre + nodes + [_const("q_y_s", [float(a["out_scale"])], onnx.TensorProto.FLOAT, []),
                              _const("q_y_z", [int(a["out_zero_point"])], QTYPES[ot], []),
                              helper.make_node("QuantizeLinear", ["q_y", "q_y_s", "q_y_z"], ["q_yq"]),
                              helper.make_node("DequantizeLinear", ["q_yq", "q_y_s", "q_y_z"], ["Y"])]
    return body

