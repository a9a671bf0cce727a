"""QDQ recurrent layers (fuse/qdq_recurrent.py): ``x -> Q -> DQ -> LSTM | GRU | RNN(DQ(W_q), DQ(R_q),
B) -> y``, the form onnxruntime's ``quantize_static`` writes when LSTM / GRU are among
``op_types_to_quantize`` (and other tools' int8 recurrent exports), seeded weights.

``scales``: "tensor" (one scale), "direction" (axis 0, one per direction) or "row" (axis 1, one per
gate row; a single direction); ``weight_zp``: the weights' zero point (onnxruntime's activation-style
weight quantization writes -1 or 1); ``bias``: "fp32", "dq" (a DequantizeLinear of int8 codes) or None.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _quantize_weight(rng, dirs: int, rows: int, cols: int, scales: str, zp: int):
    w = rng.standard_normal((dirs, rows, cols)).astype(np.float32) / np.sqrt(cols)
    if scales == "tensor":
        s = np.array(np.abs(w).max() / 127, np.float32)
        axis, bshape = None, ()
    elif scales == "direction":
        s = (np.abs(w).reshape(dirs, -1).max(axis=1) / 127).astype(np.float32)
        axis, bshape = 0, (dirs, 1, 1)
    else:
        if dirs != 1:
            raise ValueError("per-row scales (axis 1) take one direction")
        s = (np.abs(w[0]).max(axis=1) / 127).astype(np.float32)
        axis, bshape = 1, (1, rows, 1)
    sb = s.reshape(bshape) if bshape else s
    q = np.clip(np.rint(w / sb) + zp, -128, 127).astype(np.int8)
    z = np.full(s.shape, zp, np.int8)
    return q, s, z, axis


def layer(cell: str = "LSTM", direction: str = "forward", *, steps: int = 10, batch: int = 1, feat: int = 12,
          hid: int = 16, scales: str = "tensor", weight_zp: int = 0, bias: str = "fp32", act: str = "u8",
          linear_before_reset: int = 0, seed: int = 0, opset: int = 17, out_pair: bool = False) -> onnx.ModelProto:
    """One QDQ recurrent layer (module docstring); x [T, B, I] -> y [T, D, B, H]; ``out_pair``: Y
    quantized (Q -> DQ, int8, scale 1/127) as onnxruntime's quantizer writes it."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    rows = GATES[cell] * hid
    inits, nodes = [], []
    inits += [numpy_helper.from_array(np.array(0.02, np.float32), "x_s"),
              numpy_helper.from_array(np.array(128 if act == "u8" else 0, np.uint8 if act == "u8" else np.int8), "x_z")]
    nodes += [helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["x_q"], name="x_q"),
              helper.make_node("DequantizeLinear", ["x_q", "x_s", "x_z"], ["x_dq"], name="x_dq")]
    ins = ["x_dq"]
    for role, cols in (("W", feat), ("R", hid)):
        q, s, z, axis = _quantize_weight(rng, dirs, rows, cols, scales, weight_zp)
        inits += [numpy_helper.from_array(q, f"{role}_q"), numpy_helper.from_array(s, f"{role}_s"),
                  numpy_helper.from_array(z, f"{role}_z")]
        kw = {} if axis is None else {"axis": axis}
        nodes.append(helper.make_node("DequantizeLinear", [f"{role}_q", f"{role}_s", f"{role}_z"], [f"{role}_dq"],
                                      name=f"{role}_dq", **kw))
        ins.append(f"{role}_dq")
    if bias:
        b = (rng.standard_normal((dirs, 2 * rows)) * 0.3).astype(np.float32)
        if bias == "dq":
            bs = np.array(np.abs(b).max() / 127, np.float32)
            inits += [numpy_helper.from_array(np.rint(b / bs).astype(np.int8), "B_q"),
                      numpy_helper.from_array(bs, "B_s"), numpy_helper.from_array(np.array(0, np.int8), "B_z")]
            nodes.append(helper.make_node("DequantizeLinear", ["B_q", "B_s", "B_z"], ["B"], name="B_dq"))
        else:
            inits.append(numpy_helper.from_array(b, "B"))
        ins.append("B")
    kw = dict(hidden_size=hid, direction=direction)
    if cell == "GRU":
        kw["linear_before_reset"] = linear_before_reset
    nodes.append(helper.make_node(cell, ins, ["y_f" if out_pair else "y"], name="rnn", **kw))
    if out_pair:
        inits += [numpy_helper.from_array(np.array(1 / 127, np.float32), "y_s"),
                  numpy_helper.from_array(np.array(0, np.int8), "y_z")]
        nodes += [helper.make_node("QuantizeLinear", ["y_f", "y_s", "y_z"], ["y_q"], name="y_q"),
                  helper.make_node("DequantizeLinear", ["y_q", "y_s", "y_z"], ["y"], name="y_dq")]
    g = helper.make_graph(nodes, "qdq_recurrent", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, batch, feat])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [steps, dirs, batch, hid])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def feeds(model: onnx.ModelProto, seed: int = 0) -> dict:
    """Standard-normal x (seeded)."""
    i = model.graph.input[0]
    shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
    return {i.name: np.random.default_rng(1000 + seed).standard_normal(shape).astype(np.float32)}
