"""Optional chain steps of the fusion patterns: what may follow an anchor and be absorbed into it.

Each step looks at the tensor the group produces so far and, when the node consuming it can be
absorbed, returns a ``StepMatch`` (nodes absorbed, the new output tensor, changes to the group).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
import onnx

from ..graph_index import GraphIndex, attr


@dataclass
class StepMatch:
    nodes: List[onnx.NodeProto]
    output: str
    attrs: dict = field(default_factory=dict)
    weights: dict = field(default_factory=dict)
    scale: Optional[np.ndarray] = None   # per-channel multiplier to fold into the anchor
    shift: Optional[np.ndarray] = None   # per-channel addend to fold into the anchor


def _channel_vector(value: np.ndarray, channels: int, rank: int, axis: int = 1) -> Optional[np.ndarray]:
    """``value`` as a length-``channels`` vector when it broadcasts along ``axis`` only (1: the
    channels of NCHW / [N, C]; -1: the features of an N-D FC output)."""
    v = np.asarray(value, dtype=np.float32)
    if v.size == 1:
        return np.full(channels, float(v.reshape(-1)[0]), np.float32)
    if v.ndim > rank:
        return None
    full = v.reshape((1,) * (rank - v.ndim) + v.shape)
    axis %= rank
    if full.shape[axis] != channels or any(d != 1 for i, d in enumerate(full.shape) if i != axis):
        return None
    return full.reshape(channels).astype(np.float32)


def per_channel_op(g: GraphIndex, y: str, channels: int, rank: int, op_type: str,
                   axis: int = 1) -> Optional[StepMatch]:
    """``y (op) const`` with a per-channel constant (bias add or scale), foldable into the anchor."""
    n = g.single_consumer(y)
    if n is None or n.op_type != op_type or len(n.input) != 2:
        return None
    other = n.input[1] if n.input[0] == y else n.input[0]
    if other == y or not g.is_const(other) or not g.is_float(n.output[0]):
        return None
    vec = _channel_vector(g.const(other), channels, rank, axis)
    if vec is None or g.shape(n.output[0]) != g.shape(y):
        return None
    if op_type == "Add":
        return StepMatch([n], n.output[0], shift=vec)
    return StepMatch([n], n.output[0], scale=vec)


def batchnorm(g: GraphIndex, y: str, channels: int, rank: int, axis: int = 1) -> Optional[StepMatch]:
    """Inference-mode BatchNormalization with constant statistics: a per-channel scale and shift
    (BN normalises axis 1: nothing to fold when the anchor's channels are on another axis)."""
    n = g.single_consumer(y)
    if axis % max(rank, 1) != 1:
        return None
    if n is None or n.op_type != "BatchNormalization" or n.input[0] != y:
        return None
    if len([o for o in n.output if o]) != 1 or attr(n, "training_mode", 0):
        return None
    if len(n.input) < 5 or not all(g.is_const(t) for t in n.input[1:5]):
        return None
    gamma, beta, mean, var = (np.asarray(g.const(t), np.float64).reshape(-1) for t in n.input[1:5])
    if any(v.size != channels for v in (gamma, beta, mean, var)):
        return None
    scale = gamma / np.sqrt(var + float(attr(n, "epsilon", 1e-5)))
    return StepMatch([n], n.output[0], scale=scale.astype(np.float32),
                     shift=(beta - mean * scale).astype(np.float32))


def _add(g, y, channels, rank, axis=1):
    return per_channel_op(g, y, channels, rank, "Add", axis)


def _mul(g, y, channels, rank, axis=1):
    return per_channel_op(g, y, channels, rank, "Mul", axis)


# chain step name -> matcher (g, tensor, channels, rank, axis) -> StepMatch | None
FOLD_STEPS = {"bias": _add, "batchnorm": batchnorm, "scale": _mul, "shift": _add}


def activation(g: GraphIndex, y: str, channels: int, allowed, axis: int = 1) -> Optional[StepMatch]:
    """An activation consuming ``y`` (including x*sigmoid(x), x*hard_sigmoid(x) and the written-out
    gelu / gelu_tanh / mish forms)."""
    users = g.consumers.get(y, [])
    if y in g.output_set or any(u.name in g.excluded for u in users):
        return None
    if len(users) >= 2:   # gelu / gelu_tanh / mish written out (smooth_acts.py), silu, hard_swish
        from . import smooth_acts
        return smooth_acts.match(g, y, allowed) or (_gated(g, y, users, allowed) if len(users) == 2 else None)
    if len(users) != 1:
        return None
    return classify(g, users[0], channels, allowed, axis)


def classify(g: GraphIndex, n: onnx.NodeProto, channels: int, allowed, axis: int = 1) -> Optional[StepMatch]:
    """``n`` itself as an activation the accelerator applies (its input is ``n.input[0]``), or None;
    ``axis``: where the layer's channels are (a PRelu slope must run along it)."""
    out = n.output[0] if n.output else None
    y = n.input[0] if n.input else None
    kind, attrs, weights = None, {}, {}
    if n.op_type == "Relu":
        kind = "relu"
    elif n.op_type == "Clip":
        lo = g.const(n.input[1]) if len(n.input) > 1 and n.input[1] else None
        hi = g.const(n.input[2]) if len(n.input) > 2 and n.input[2] else None
        if lo is None and hi is None:
            lo, hi = attr(n, "min"), attr(n, "max")
        if lo is None or hi is None:
            return None
        kind = "clamp"
        attrs = {"activation_min": float(np.asarray(lo).reshape(-1)[0]),
                 "activation_max": float(np.asarray(hi).reshape(-1)[0])}
    elif n.op_type in ("Max", "Min"):
        bound = _one_sided_bound(g, n)
        if bound is None:
            return None
        # Max(x, c) / Min(x, c) (a one-bound Clip, clip_canonical's form; tf2onnx's tf.maximum(x, c)):
        # clamp with the other bound at the float32 limit (an fp16 inf stays inf, NaN stays NaN)
        kind = "clamp"
        attrs = {"activation_min": bound if n.op_type == "Max" else -FLT32_MAX,
                 "activation_max": FLT32_MAX if n.op_type == "Max" else bound}
    elif n.op_type == "LeakyRelu":
        kind, attrs = "leaky_relu", {"activation_alpha": float(attr(n, "alpha", 0.01))}
    elif n.op_type == "PRelu" and g.is_const(n.input[1]) and np.asarray(g.const(n.input[1])).size == 1:
        # one slope for every element (torch.nn.PReLU() default): exactly a leaky relu, which any
        # layer can carry (no slope input needed)
        kind = "leaky_relu"
        attrs = {"activation_alpha": float(np.asarray(g.const(n.input[1])).reshape(-1)[0])}
    elif n.op_type == "PRelu" and g.is_const(n.input[1]):
        rank = len(g.shape(y) or [])
        slope = g.const(n.input[1])
        vec = _channel_vector(slope, channels, rank, axis) if rank >= 2 else None
        if vec is None:
            return None
        kind, weights = "prelu", {"slope": vec}
    elif n.op_type == "Sigmoid":
        kind = "sigmoid"
    elif n.op_type == "Tanh":
        kind = "tanh"
    elif n.op_type == "HardSigmoid":
        kind = "hard_sigmoid"
        attrs = {"activation_alpha": float(attr(n, "alpha", 0.2)), "activation_beta": float(attr(n, "beta", 0.5))}
    elif n.op_type == "HardSwish":
        kind = "hard_swish"
    elif n.op_type == "Log":
        from . import log_act
        return log_act.classify(g, n, allowed)
    elif n.op_type in ("Gelu", "Mish", "Elu", "Erf", "Softplus", "Sqrt"):
        from . import smooth_acts
        if n.op_type == "Erf" and not erf_of_qdq_gelu(g, n):
            return None
        return smooth_acts.classify_single(n, allowed)
    if kind is None or kind not in allowed or out is None:
        return None
    return StepMatch([n], out, attrs=dict(activation=kind, **attrs), weights=weights)


FLT32_MAX = float(np.finfo(np.float32).max)


def _one_sided_bound(g: GraphIndex, n: onnx.NodeProto) -> Optional[float]:
    """The constant of ``Max(x, c)`` / ``Min(x, c)``: a one-element float constant second operand that
    does not change x's shape; None otherwise (two tensors, a per-channel bound, a broadcast)."""
    if len(n.input) != 2 or not n.input[0] or g.is_const(n.input[0]) or not g.is_const(n.input[1]):
        return None
    c = np.asarray(g.const(n.input[1]))
    sx = g.shape(n.input[0])
    if c.size != 1 or c.dtype.kind != "f" or sx is None or c.ndim > len(sx) or g.shape(n.output[0]) != sx:
        return None
    return float(c.reshape(-1)[0])


def _gated(g: GraphIndex, y: str, users, allowed) -> Optional[StepMatch]:
    """``y * sigmoid(y)`` (silu) or ``y * hard_sigmoid(y; 1/6, 1/2)`` (hard_swish)."""
    gate = next((u for u in users if u.op_type in ("Sigmoid", "HardSigmoid")), None)
    mul = next((u for u in users if u.op_type == "Mul"), None)
    if gate is None or mul is None or gate.output[0] not in mul.input or y not in mul.input:
        return None
    return gated_by(g, gate, allowed)


def gated_by(g: GraphIndex, gate: onnx.NodeProto, allowed) -> Optional[StepMatch]:
    """The gate ``Sigmoid(y)`` / ``HardSigmoid(y; 1/6, 1/2)`` read only by a ``Mul(y, gate)``:
    silu / hard_swish of ``y`` (nodes: the gate and the Mul)."""
    y = gate.input[0]
    mul = g.single_consumer(gate.output[0])
    if mul is None or mul.op_type != "Mul" or sorted(mul.input) != sorted([y, gate.output[0]]):
        return None
    if y == gate.output[0] or mul.name in g.excluded or not mul.output[0]:
        return None
    if gate.op_type == "Sigmoid":
        kind = "silu"
    elif (abs(attr(gate, "alpha", 0.2) - 1 / 6) < 1e-6 and abs(attr(gate, "beta", 0.5) - 0.5) < 1e-6):
        kind = "hard_swish"
    else:
        return None
    if kind not in allowed:
        return None
    return StepMatch([gate, mul], mul.output[0], attrs={"activation": kind})


def erf_of_qdq_gelu(g: GraphIndex, n: onnx.NodeProto) -> bool:
    """An Erf read only by QuantizeLinear nodes (the Erf of a GELU that onnxruntime's quantizer cut
    with Q/DQ pairs): the ``erf`` activation takes it; a lone Erf elsewhere stays on the CPU."""
    users = g.consumers.get(n.output[0], []) if n.output else []
    return bool(users) and all(u.op_type == "QuantizeLinear" for u in users) and n.output[0] not in g.output_set
