"""Standalone activations: an activation that no conv/fc/sum/mul absorbed (after a Concat, a
Reshape or a CPU op) becomes ``Mul2D(x, 1.0)`` carrying the activation. ``x * 1 == x`` exactly (also
in fp16), so no new accelerator op is needed.

    Relu | Clip | LeakyRelu | Sigmoid | Tanh | HardSigmoid | HardSwish | Elu | Gelu | Mish | Erf | Softplus | Sqrt | Log
                                                                         -> Mul2D(x, 1) + activation
    Sigmoid(x) -> Mul(x, .)  /  HardSigmoid(x; 1/6, 1/2) -> Mul(x, .)    -> Mul2D(x, 1) + silu / hard_swish
    written-out gelu / gelu_tanh / mish (smooth_acts.py), from their first node -> Mul2D(x, 1) + it
    Log(x) [-> Max(., c)]                                                -> Mul2D(x, 1) + log (floor c; log_act.py)

Rule: always, when the tensor is float32 with a static shape of rank 2-5 and the activation is in
``target.activations``. Next to accelerator ops this saves a CPU round trip; between CPU ops it makes
a region without conv/fc, which the partitioner leaves on the CPU (``Mul(x, 1)`` then costs nothing
measurable there). PRelu with one constant slope is a leaky_relu; a per-channel slope on 4-D data
is a depthwise 1x1 ``Conv2D`` with unit weights carrying prelu (Mul2D has no slope input).
"""
from __future__ import annotations

import onnx
import numpy as np

from ..graph_index import GraphIndex, attr
from ..target import Target
from . import smooth_acts, steps
from .groups import Group
from .patterns import allowed_activations, tensor_reason

ACTIVATION_OPS = ("Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu", "Gelu", "Mish",
                  "PRelu", "Erf", "Softplus", "Sqrt", "Log", "Max", "Min")


def _mul2d(g: GraphIndex, x: str, m) -> Group:
    rank = len(g.shape(x))
    return Group("Mul2D", "mrvl.mul", list(m.nodes), [x], m.output, dict(m.attrs),
                 {"operand": np.ones([1] * rank, np.float32)})


def build_smooth_standalone(g: GraphIndex, n: onnx.NodeProto, target: Target):
    """``Mul2D(x, 1)`` with the written-out gelu / gelu_tanh / mish (smooth_acts.py) whose first
    node is ``n``; None when ``n`` starts no such form (it is then matched as itself)."""
    allowed = allowed_activations(["Mul2D"], target)
    for x in dict.fromkeys(n.input):
        if not x or g.is_const(x):
            continue
        m = smooth_acts.match(g, x, allowed)
        if m is None or n.name not in {k.name for k in m.nodes}:
            continue
        reason = tensor_reason(g, x, m.output, target, "standalone activation")
        return reason or _mul2d(g, x, m)
    return None


def build_standalone_activation(g: GraphIndex, n: onnx.NodeProto, target: Target):
    """``Mul2D(x, 1)`` with the activation of ``n`` (or of the gate ``n`` and its Mul), or a reason."""
    x = n.input[0] if n.input else ""
    if not x or not n.output or not n.output[0]:
        return "activation without an input or output"
    reason = tensor_reason(g, x, n.output[0], target, "standalone activation")
    if reason:
        return reason
    allowed = allowed_activations(["Mul2D"], target)
    m = None
    if n.op_type in ("Sigmoid", "HardSigmoid"):
        m = steps.gated_by(g, n, allowed)
    if m is None:
        m = steps.classify(g, n, 1, allowed)
    if m is None:
        if n.op_type == "Clip":
            return "Clip with bounds that are not constant"
        if n.op_type in ("Max", "Min"):
            return (f"{n.op_type} of two tensors, or of a bound that is not one float constant "
                    f"(the accelerator clamps by constants)")
        if n.op_type == "PRelu":
            return _prelu_conv(g, n, x, target) or (
                "standalone activation PRelu with a non-constant slope, or a per-channel one on a tensor "
                "that is not 4-D (fuses only into a preceding conv; a single constant slope runs anywhere "
                "as leaky_relu, a per-channel one on 4-D data as a depthwise 1x1 identity conv)")
        if n.op_type == "Erf" and not steps.erf_of_qdq_gelu(g, n):
            # the erf activation takes only the Erf of a QDQ GELU (read by QuantizeLinear); a float
            # GELU fuses whole; any other Erf has no accelerator op
            return "no accelerator op for Erf"
        kind = _kind(n)
        return f"activation {kind} is not in the target's activations ({', '.join(allowed) or 'none'})"
    return _mul2d(g, x, m)


def _prelu_conv(g: GraphIndex, n: onnx.NodeProto, x: str, target: Target):
    """A per-channel PRelu on 4-D data as a depthwise 1x1 Conv2D with unit weights (exact: x * 1)
    carrying prelu, or None."""
    shape = g.shape(x)
    if len(shape) != 4 or not g.is_const(n.input[1]) or "prelu" not in target.activations:
        return None
    c = shape[1]
    m = steps.classify(g, n, c, ("prelu",))
    if m is None or c > target.max_channels:
        return None
    return Group("Conv2D", "mrvl.conv2d_nhwc2nhwc", list(m.nodes), [x], m.output,
                 dict(strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], group=c, kernel_shape=[1, 1],
                      channels=c, **m.attrs), {"W": np.ones((c, 1, 1, 1), np.float32), **m.weights})


def _kind(n: onnx.NodeProto) -> str:
    if n.op_type == "HardSigmoid":
        return f"hard_sigmoid(alpha={attr(n, 'alpha', 0.2):g}, beta={attr(n, 'beta', 0.5):g})"
    return {"Relu": "relu", "LeakyRelu": "leaky_relu", "Sigmoid": "sigmoid", "Tanh": "tanh",
            "HardSwish": "hard_swish", "Elu": "elu", "Mish": "mish", "Erf": "erf", "Softplus": "softplus", "Sqrt": "sqrt", "Log": "log",
            "Gelu": f"gelu(approximate={attr(n, 'approximate', b'none')!r})"}.get(n.op_type, n.op_type)
