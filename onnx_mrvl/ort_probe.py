"""What one onnxruntime kernel writes where its arithmetic is undefined, asked of onnxruntime itself.

onnxruntime's QLinearSoftmax (com.microsoft, contrib_ops/cpu/quantization/qlinear_softmax.cc)
builds a 256-entry table ``E[k] = exp((k - 255 + b / s_x) * s_x)``, b = max(0, ln(FLT_MAX / D) - 5).
With ``s_x = +inf`` (quantize_static's scale of a -inf attention mask): ``b / s_x = 0``, every entry
below the last is ``exp(-inf) = 0`` and the last ``exp(0 * inf) = NaN``; the row's sum reads the
last entry at its maximum, so it is NaN, every quotient ``E * floor(1 / s_y) / sum`` is NaN, and the
code written is the C++ cast of NaN to an integer plus the zero point, saturated: undefined behaviour
whose result depends on the build (measured, onnxruntime 1.32 x86-64: code 0 for uint8 and int8,
whatever the zero point, the input codes or D). ``qlinear_softmax_codes`` runs the kernel once on
seeded codes of the node's shape, so a rule relying on those codes holds for the onnxruntime the
model is run with (or does not apply)."""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx import numpy_helper as nh
from . import file_weights

_CACHE: Dict[Tuple, Optional[np.ndarray]] = {}
TYPES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}


def qlinear_softmax_codes(x_scale: float, x_zero_point: int, y_scale: float, y_zero_point: int, dtype,
                          shape: Sequence[int], axis: int, opset: int) -> Optional[np.ndarray]:
    """The distinct codes onnxruntime's QLinearSoftmax of ``dtype`` codes (uint8 / int8) writes for
    inputs of ``shape`` (a row of equal codes, a row of the type's extremes, the rest seeded random
    codes) with these quantization parameters, or None when onnxruntime cannot run it. Cached."""
    dt = np.dtype(dtype)
    key = (float(x_scale), dt, int(x_zero_point), float(y_scale), int(y_zero_point),
           tuple(int(d) for d in shape), int(axis), int(opset))
    if key not in _CACHE:
        _CACHE[key] = _run(*key)
    return _CACHE[key]


def _run(x_scale, dt, xz, y_scale, yz, shape, axis, opset) -> Optional[np.ndarray]:
    import onnxruntime as ort
    if dt not in TYPES or not shape or any(d < 1 for d in shape) or not -len(shape) <= axis < len(shape):
        return None
    axis %= len(shape)
    info = np.iinfo(dt)
    codes = np.random.default_rng(0).integers(info.min, info.max + 1, size=shape).astype(dt)
    rows = np.moveaxis(codes, axis, -1).reshape(-1, shape[axis])
    rows[0] = xz
    if len(rows) > 1:
        rows[1, ::2], rows[1, 1::2] = info.min, info.max
    codes = np.moveaxis(rows.reshape(np.moveaxis(codes, axis, -1).shape), -1, axis)
    t = TYPES[dt]
    inits = [nh.from_array(np.array(x_scale, np.float32), "xs"), nh.from_array(np.array(xz, dt), "xz"),
             nh.from_array(np.array(y_scale, np.float32), "ys"), nh.from_array(np.array(yz, dt), "yz")]
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                            axis=axis, opset=opset, name="probe")
    g = helper.make_graph([node], "qlinear_softmax_probe", [helper.make_tensor_value_info("x", t, list(shape))],
                          [helper.make_tensor_value_info("y", t, list(shape))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", max(opset, 13)),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(file_weights.serialized(m), so, providers=["CPUExecutionProvider"])
        out = sess.run(None, {"x": codes})[0]
    except Exception:  # noqa: BLE001 - onnxruntime refuses the parameters: nothing is known
        return None
    return np.unique(out)
