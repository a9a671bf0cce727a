"""Reference bodies of the Mrvl ops for transformer / modern-CNN layers (registered in opset.OPS):
``LayerNorm`` and ``Softmax`` over one axis of the stored tensor, and the smooth activations
(gelu, gelu_tanh, elu, mish) any activation-carrying layer may apply.

``axis`` is an axis of the tensor as stored, usually negative (``-1``: the last stored axis, the
channels of NHWC data or the features of [B, T, D] rows); per-axis vectors (gamma, beta) are 1-D.
"""
from __future__ import annotations

import math
from typing import List

import onnx
from onnx import helper

SMOOTH_ACTIVATIONS = ("gelu", "gelu_tanh", "elu", "mish", "erf", "softplus", "sqrt", "log")


def _c(name: str, values, dims=None, dtype=onnx.TensorProto.FLOAT):
    values = list(values) if isinstance(values, (list, tuple)) else [values]
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name, dtype, dims if dims is not None else [], values))


def smooth_activation_nodes(act: str, x: str, y: str, attrs: dict) -> List[onnx.NodeProto]:
    """``y = act(x)`` in opset-13 ONNX (Gelu is opset 20, Mish 18: written out)."""
    if act == "gelu":        # 0.5 x (1 + erf(x / sqrt 2))
        return [_c("g_isq2", 1.0 / math.sqrt(2.0)), _c("g_one", 1.0), _c("g_half", 0.5),
                helper.make_node("Mul", [x, "g_isq2"], ["g_s"]), helper.make_node("Erf", ["g_s"], ["g_e"]),
                helper.make_node("Add", ["g_e", "g_one"], ["g_a"]), helper.make_node("Mul", [x, "g_a"], ["g_m"]),
                helper.make_node("Mul", ["g_m", "g_half"], [y])]
    if act == "gelu_tanh":   # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        return [_c("g_k", math.sqrt(2.0 / math.pi)), _c("g_c", 0.044715), _c("g_one", 1.0), _c("g_half", 0.5),
                helper.make_node("Mul", [x, x], ["g_x2"]), helper.make_node("Mul", ["g_x2", x], ["g_x3"]),
                helper.make_node("Mul", ["g_x3", "g_c"], ["g_cx3"]), helper.make_node("Add", [x, "g_cx3"], ["g_in"]),
                helper.make_node("Mul", ["g_in", "g_k"], ["g_u"]), helper.make_node("Tanh", ["g_u"], ["g_t"]),
                helper.make_node("Add", ["g_t", "g_one"], ["g_a"]), helper.make_node("Mul", [x, "g_a"], ["g_m"]),
                helper.make_node("Mul", ["g_m", "g_half"], [y])]
    if act == "erf":         # QDQ GELUs: the Erf between Q/DQ pairs (fuse/qdq_transformer.py)
        return [helper.make_node("Erf", [x], [y])]
    if act == "softplus":    # CRN's mask, PyTorch's nn.Softplus
        return [helper.make_node("Softplus", [x], [y])]
    if act == "sqrt":        # magnitude spectra of conv STFTs (DTLN, Silero VAD)
        return [helper.make_node("Sqrt", [x], [y])]
    if act == "log":         # log spectra: max(Log(x) + beta, alpha) (fuse/log_act.py)
        return [_c("l_floor", float(attrs.get("activation_alpha", -3.4028234663852886e38))),
                _c("l_shift", float(attrs.get("activation_beta", 0.0))),
                helper.make_node("Log", [x], ["l_log"]), helper.make_node("Add", ["l_log", "l_shift"], ["l_add"]),
                helper.make_node("Max", ["l_add", "l_floor"], [y])]
    if act == "elu":
        return [helper.make_node("Elu", [x], [y], alpha=float(attrs.get("activation_alpha", 1.0)))]
    if act == "mish":
        return [helper.make_node("Softplus", [x], ["m_sp"]), helper.make_node("Tanh", ["m_sp"], ["m_t"]),
                helper.make_node("Mul", [x, "m_t"], [y])]
    raise ValueError(f"unknown activation {act!r}")


def _reduce_mean(x: str, y: str, axis: int, opset: int, tag: str) -> List[onnx.NodeProto]:
    if opset >= 18:
        return [_c(f"{tag}_axes", [axis], [1], onnx.TensorProto.INT64),
                helper.make_node("ReduceMean", [x, f"{tag}_axes"], [y], keepdims=1)]
    return [helper.make_node("ReduceMean", [x], [y], axes=[axis], keepdims=1)]


def _per_axis(v: str, out: str, axis: int) -> List[onnx.NodeProto]:
    """A 1-D vector reshaped to broadcast along the negative ``axis``: [C] + [1] * (-axis - 1)."""
    trailing = -axis - 1
    if trailing == 0:
        return [helper.make_node("Identity", [v], [out])]
    return [_c(f"{out}_shape", [-1] + [1] * trailing, [trailing + 1], onnx.TensorProto.INT64),
            helper.make_node("Reshape", [v, f"{out}_shape"], [out])]


def layernorm_body(a, present, opset):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over ``axis`` (negative: of the stored tensor);
    ``rms`` = 1: no mean subtracted, y = x / sqrt(mean(x^2) + eps) * gamma [+ beta] (RMSNorm)."""
    axis, eps = int(a["axis"]), float(a["epsilon"])
    if int(a.get("rms", 0)):
        nodes = [helper.make_node("Identity", ["X"], ["ln_d"])]
    else:
        nodes = _reduce_mean("X", "ln_mean", axis, opset, "ln_m")
        nodes += [helper.make_node("Sub", ["X", "ln_mean"], ["ln_d"])]
    nodes += [helper.make_node("Mul", ["ln_d", "ln_d"], ["ln_d2"])]
    nodes += _reduce_mean("ln_d2", "ln_var", axis, opset, "ln_v")
    nodes += [_c("ln_eps", eps), helper.make_node("Add", ["ln_var", "ln_eps"], ["ln_ve"]),
              helper.make_node("Sqrt", ["ln_ve"], ["ln_sd"]), helper.make_node("Div", ["ln_d", "ln_sd"], ["ln_n"])]
    y = "ln_n"
    if present.get("gamma"):
        nodes += _per_axis("gamma", "ln_g", axis) + [helper.make_node("Mul", [y, "ln_g"], ["ln_ng"])]
        y = "ln_ng"
    if present.get("beta"):
        nodes += _per_axis("beta", "ln_b", axis) + [helper.make_node("Add", [y, "ln_b"], ["ln_nb"])]
        y = "ln_nb"
    return nodes + [helper.make_node("Identity", [y], ["Y"])]


def softmax_body(a, present, opset):
    """exp(x - max) / sum(exp(x - max)) over one ``axis`` of the stored tensor; with ``log`` = 1
    its logarithm (x - max) - log(sum(exp(x - max))); with ``nan_fill`` = c, c where that is NaN;
    with an additive mask ``M`` (an int8 Softmax's, fuse/qdq_masked_softmax.py) of ``x + M``."""
    if present.get("M"):
        inner = softmax_body(a, {k: v for k, v in present.items() if k != "M"}, opset)
        for n in inner:
            n.input[:] = ["sm_xm" if i == "X" else i for i in n.input]
        return [helper.make_node("Add", ["X", "M"], ["sm_xm"])] + inner
    if "nan_fill" in a:
        inner = softmax_body({k: v for k, v in a.items() if k != "nan_fill"}, present, opset)
        inner[-1].output[0] = "sm_y"
        return inner + [helper.make_node("IsNaN", ["sm_y"], ["sm_nan"]), _c("sm_fill", float(a["nan_fill"])),
                        helper.make_node("Where", ["sm_nan", "sm_fill", "sm_y"], ["Y"])]
    axis, log = int(a["axis"]), bool(a.get("log", 0))
    if opset >= 13 or axis == -1:   # before 13 Softmax flattens from ``axis`` on: same for the last
        return [helper.make_node("LogSoftmax" if log else "Softmax", ["X"], ["Y"], axis=axis)]
    nodes = [helper.make_node("ReduceMax", ["X"], ["sm_max"], axes=[axis], keepdims=1),
             helper.make_node("Sub", ["X", "sm_max"], ["sm_d"]), helper.make_node("Exp", ["sm_d"], ["sm_e"]),
             helper.make_node("ReduceSum", ["sm_e"], ["sm_s"], axes=[axis], keepdims=1)]
    if log:
        return nodes + [helper.make_node("Log", ["sm_s"], ["sm_ls"]), helper.make_node("Sub", ["sm_d", "sm_ls"], ["Y"])]
    return nodes + [helper.make_node("Div", ["sm_e", "sm_s"], ["Y"])]
