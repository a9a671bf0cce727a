"""QDQ layers with asymmetric weights (a weight zero point), as onnxruntime's quantizer writes for
weights it quantizes like activations (ALBERT's shared layer weights, HuBERT's weight-normalised
positional conv), TFLite-derived uint8 weights and Quark / ModelOpt asymmetric weights:
``DQ(x_q) -> MatMul / Gemm / Conv(DQ(W_q, s_w, z_w)) -> Q -> DQ`` with seeded weights and
scales that fit the data (tests/test_int8_weight_zero_point.py)."""
from __future__ import annotations

from typing import Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

F32 = TensorProto.FLOAT
QT = {"int8": (np.int8, -128, 127), "uint8": (np.uint8, 0, 255)}


def _asym_codes(w: np.ndarray, axis: int, per_channel: bool, wtype: str):
    """(codes, scales, zero points) of an asymmetric min/max quantization of ``w`` (along ``axis``
    per channel, else per tensor), codes of ``wtype``."""
    dt, lo, hi = QT[wtype]
    red = tuple(i for i in range(w.ndim) if i != axis) if per_channel else None
    wmin, wmax = np.minimum(w.min(axis=red), 0), np.maximum(w.max(axis=red), 0)
    s = ((wmax - wmin) / (hi - lo)).astype(np.float32)
    z = np.clip(np.round(lo - wmin / s), lo, hi).astype(dt)
    shape = [-1 if i == axis else 1 for i in range(w.ndim)] if per_channel else [1] * w.ndim
    q = np.clip(np.round(w / s.reshape(shape)) + z.astype(np.int32).reshape(shape), lo, hi).astype(dt)
    return q, np.asarray(s, np.float32), np.asarray(z, dt)


def _q(dt_name: str, scale: float, zp: int, name: str):
    dt = QT[dt_name][0]
    return [nh.from_array(np.array(scale, np.float32), f"{name}_s"), nh.from_array(np.array(zp, dt), f"{name}_z")]


def asym_weight_layer(op: str = "MatMul", act: str = "int8", wtype: str = "int8", per_channel: bool = True,
                      seed: int = 0, shift: float = 0.6, output_q: bool = True) -> Tuple[onnx.ModelProto, np.ndarray]:
    """(model, a sample input) of one QDQ layer with asymmetric weights: ``op`` MatMul ([6, 48] x
    [48, 24]), Gemm (transB, with an int32 bias), Conv (3x3 on [1, 8, 10, 10], 16 outputs, a bias)
    or ConvGroups (a HuBERT-style grouped 1-D conv, kernel 16, 4 groups, pad 8). ``shift``: the
    weights' mean (a zero point far from the type's middle); ``output_q`` False: no Q -> DQ after the
    layer (its output float: an int8-in layer)."""
    rng = np.random.default_rng(seed)
    conv = op.startswith("Conv")
    if op == "MatMul":
        xs, ws, axis = (6, 48), (48, 24), 1
    elif op == "Gemm":
        xs, ws, axis = (6, 48), (24, 48), 0
    elif op == "Conv":
        xs, ws, axis = (1, 8, 10, 10), (16, 8, 3, 3), 0
    else:
        xs, ws, axis = (1, 16, 40), (16, 4, 16), 0
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal(ws) * 0.2 + shift * 0.2).astype(np.float32)
    q, s, z = _asym_codes(w, axis, per_channel, wtype)
    shape = [-1 if i == axis else 1 for i in range(w.ndim)] if per_channel else [1] * w.ndim
    wd = (q.astype(np.int32) - z.astype(np.int32).reshape(shape)) * s.reshape(shape)   # DequantizeLinear
    xlo, xhi = QT[act][1:]
    sx = float(np.abs(x).max() * 2 / (xhi - xlo))
    zx = (xlo + xhi + 1) // 2 if act == "uint8" else 0
    vec = (lambda a: a.reshape(-1)) if per_channel else (lambda a: a.reshape(()))
    inits = _q(act, sx, zx, "x") + [nh.from_array(q, "w_q"), nh.from_array(vec(s), "w_s"), nh.from_array(vec(z), "w_z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["x_q"]),
             helper.make_node("DequantizeLinear", ["x_q", "x_s", "x_z"], ["x_d"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w_d"],
                              **({"axis": axis} if per_channel else {}))]
    xd = (np.clip(np.rint(x / np.float32(sx)) + zx, xlo, xhi) - zx) * np.float32(sx)
    ins = ["x_d", "w_d"]
    o = ws[axis]
    if op == "MatMul":
        y = xd @ wd
        attrs = {}
    else:
        sb = (np.float32(sx) * np.broadcast_to(s.reshape(-1), (o,))).astype(np.float32)
        bq = np.rint(rng.standard_normal(o).astype(np.float32) * 0.1 / sb).astype(np.int32)
        inits += [nh.from_array(bq, "b_q"), nh.from_array(sb, "b_s")]
        nodes.append(helper.make_node("DequantizeLinear", ["b_q", "b_s"], ["b_d"], axis=0))
        ins.append("b_d")
        if op == "Gemm":
            y = xd @ wd.T + bq * sb
            attrs = {"transB": 1}
        elif op == "Conv":
            attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
            y = None
        else:
            attrs = dict(kernel_shape=[16], pads=[8, 8], group=4)
            y = None
    nodes.append(helper.make_node(op if not conv else "Conv", ins, ["y_f"], name="layer", **attrs))
    if y is None:   # the float conv through onnxruntime for the output range
        import onnxruntime as ort
        probe = helper.make_model(helper.make_graph(
            [helper.make_node("Conv", ["x", "w"] + (["b"] if len(ins) > 2 else []), ["y"], **attrs)], "p",
            [helper.make_tensor_value_info("x", F32, list(xs))], [helper.make_tensor_value_info("y", F32, None)],
            [nh.from_array(wd.astype(np.float32), "w"), nh.from_array((bq * sb).astype(np.float32), "b")]),
            opset_imports=[helper.make_opsetid("", 13)])
        probe.ir_version = 8
        y = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": xd.astype(np.float32)})[0]
    ylo, yhi = QT[act][1:]
    sy = float(np.abs(y).max() * 2.2 / (yhi - ylo))
    zy = zx
    if output_q:
        inits += _q(act, sy, zy, "y")
        nodes += [helper.make_node("QuantizeLinear", ["y_f", "y_s", "y_z"], ["y_q"]),
                  helper.make_node("DequantizeLinear", ["y_q", "y_s", "y_z"], ["y"])]
    else:
        nodes[-1].output[0] = "y"
    m = helper.make_model(helper.make_graph(nodes, f"asym_{op}", [helper.make_tensor_value_info("x", F32, list(xs))],
                                            [helper.make_tensor_value_info("y", F32, list(np.shape(y)))], inits),
                          opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m, x
