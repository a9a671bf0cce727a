"""ReduceMean / ReduceMax over ONE spatial axis (2 or 3 of a 4-D tensor, 2 of a 3-D one) -> a chain
of non-overlapping AveragePool / MaxPool windows along that axis whose sizes divide it exactly (as
gap_split), then a Reshape to the reduced shape (keepdims 0 or 1). Audio CNNs (PANNs / Cnn14:
``x.mean(dim=3)`` over mel bins, then ``max + mean`` over time) and OCR heads that average the height
away then stay on the accelerator. Exact for the max; the mean of equal windows of equal windows is
the mean. A mean over a map whose other spatial side is 1 (a 3-D ``[N, C, L]``, tokens) longer than
one window is one GlobalAveragePool instead (up to ``max_pool_kernel ** 2``: fp32 accumulation, one
rounding, docs/fusion.md "Global average pools"; a chain rounds each partial mean to fp16). A mean over the tokens of a 3-D ``[B, N, C]`` (axis 1: the average-pooled head of timm's
EfficientFormer / LeViT, ``x.mean(1)``) is transposed to ``[B, C, N]`` first (a CPU op before the
classifier, which then made a region of its own)."""
from __future__ import annotations

from typing import Optional

from .base import Match, attr, axes_of, is_float, reshape
from .gap_split import factors

NAME = "reduce_axis_to_pool"
OPS = ("ReduceMean", "ReduceMax")
POOL = {"ReduceMean": "AveragePool", "ReduceMax": "MaxPool"}
# A MaxPool window of only -inf gives the lowest float in onnxruntime, not -inf as ReduceMax does:
# a ReduceMax becomes a pool only over a feature map (these producers never write -inf), not over
# attention scores or masks (``max(mask) == -inf`` checks of expanded Attention / Softmax). A
# DequantizeLinear output is finite too (``scale * (q - zero point)``): the QDQ form of such a max.
FEATURE_MAP = ("DequantizeLinear", "Conv", "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",
               "BatchNormalization", "MaxPool", "AveragePool", "GlobalAveragePool", "ReduceMean",
               "Elu", "Selu", "Gelu", "Softplus", "Resize", "Concat")


def match(node, g) -> Optional[Match]:
    if node.op_type not in OPS or node.domain not in ("", "ai.onnx"):
        return None
    sx = g.shape(node.input[0])
    if sx is None or len(sx) not in (3, 4):
        return None
    axes = axes_of(g, node, 1)
    if not axes or len(axes) != 1:
        return None
    axis = axes[0] % len(sx)
    if len(sx) == 3 and axis == 1:                     # [B, N, C] token mean: transposed to [B, C, N]
        return Match([node], {"sx": sx, "axis": axis, "tokens": True})
    if axis < 2:
        return None
    return Match([node], {"sx": sx, "axis": axis})


def _after_scaled_pair(g, t: str) -> str:
    """``_after_pair`` of ``t``, also through a ``Mul`` by a scalar constant that alone reads ``t``
    when a pair follows it (Quark XINT8's mean correction ``ReduceMean -> Mul(0.99609375) -> Q``)."""
    u = g.users(t)
    k = [i for i in u[0].input if i != t] if len(u) == 1 and u[0].op_type == "Mul" and len(u[0].input) == 2 else []
    if len(k) == 1 and g.is_const(k[0]) and g.const(k[0]).size == 1:
        s = u[0].output[0]
        if _after_pair(g, s) != s:
            return _after_pair(g, s)
    return _after_pair(g, t)


def _after_pair(g, t: str) -> str:
    """The DequantizeLinear output of a Q -> DQ pair that alone reads ``t`` (a QDQ export), else ``t``."""
    q = g.users(t)
    dq = g.users(q[0].output[0]) if len(q) == 1 and q[0].op_type == "QuantizeLinear" else []
    return dq[0].output[0] if len(dq) == 1 and dq[0].op_type == "DequantizeLinear" else t


def _before_pair(g, t: str) -> str:
    """The QuantizeLinear input of the Q -> DQ pair that writes ``t``, else ``t``."""
    dq = g.producer.get(t)
    q = g.producer.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
    return q.input[0] if q is not None and q.op_type == "QuantizeLinear" else t


def _normalisation(node, g) -> bool:
    """x - mean(x) (the mean is read by a Sub/Div that reads x too), or mean((x - m) ** 2), or
    mean(x ** 2) (an RMSNorm), each also with a Q -> DQ pair between (onnxruntime's quantizer), that
    pair also after the mean times a scalar constant (Quark's mean correction)."""
    x = node.input[0]
    if any(c.op_type in ("Sub", "Div") and x in c.input for c in g.users(_after_scaled_pair(g, node.output[0]))):
        return True
    p = g.producer.get(_before_pair(g, x))
    return p is not None and (p.op_type == "Pow" or (p.op_type == "Mul" and p.input[0] == p.input[1]))


def qdq_norm_mean(node, g) -> bool:
    """``node`` is a (layer / RMS) norm's mean or variance with a Q -> DQ pair on its input or
    output (a QDQ export: fuse's int8 layer norms read it as it is, qdq_layernorm.py / qdq_norm_affine.py)."""
    return _normalisation(node, g) and (_after_scaled_pair(g, node.output[0]) != node.output[0]
                                        or _before_pair(g, node.input[0]) != node.input[0])


def _feature_map(g, x: str, depth: int = 2) -> bool:
    p = g.producer.get(x)
    if p is None:
        return False
    if p.op_type in ("Reshape", "Squeeze", "Unsqueeze") and depth:      # the reshape of a pooled mean
        return _feature_map(g, p.input[0], depth - 1)
    return p.op_type in FEATURE_MAP


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if not is_float(g, node.input[0]) or g.is_const(node.input[0]):
        return "constant or non-float input"
    if g.shape(node.output[0]) is None:
        return "output shape is not static"
    if attr(node, "noop_with_empty_axes", 0):
        return "noop_with_empty_axes"
    if _normalisation(node, g):
        return "mean / variance of a decomposed LayerNorm (kept in fp32 on the CPU with its Sub/Div)"
    if node.op_type == "ReduceMax" and not _feature_map(g, node.input[0]):
        return "not over a feature map (may hold -inf, which MaxPool does not keep)"
    size = m.data["sx"][m.data["axis"]]
    if m.data.get("tokens") and node.op_type == "ReduceMax":
        return "a max over the tokens of [B, N, C] (taken for means only)"
    steps = factors(size, target.max_pool_kernel)
    sx = m.data["sx"]
    other = 1 if len(sx) == 3 or m.data.get("tokens") else sx[5 - m.data["axis"]]
    if node.op_type == "ReduceMean" and other == 1 and size <= target.max_pool_kernel ** 2 and \
            (steps is None or len(steps) > 1):
        steps = [size]      # the mean of a [.., L, 1] map: one global pool, one rounding (gap_split)
    if steps is None or size < 2:
        return f"axis of size {size} has no exact factorisation into windows <= {target.max_pool_kernel}"
    m.data["steps"] = steps
    m.data["fold"] = m.data["sx"][0] > target.max_batch   # leading axis of rows (time steps): into channels
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    sx, axis, steps = list(m.data["sx"]), m.data["axis"], m.data["steps"]
    origin, dt = m.origin, g.dtype(node.input[0])
    g.remove(node)
    x = node.input[0]
    if m.data.get("tokens"):                           # [B, N, C] -> [B, C, N], then the mean over axis 2
        t = g.fresh(f"{x}/tokens_last")
        g.make("Transpose", [x], [t], near=node, origin=origin, name=f"{node.name}/tokens_last", perm=[0, 2, 1])
        sx = [sx[0], sx[2], sx[1]]
        g.set_shape(t, sx, dt)
        x, axis = t, 2
    if len(sx) == 3:                                   # [N, C, L] -> [N, C, 1, L]
        sx = [sx[0], sx[1], 1, sx[2]]
        x = reshape(g, x, sx, near=node, origin=origin, tag="to4d")
        axis = 3
    if m.data.get("fold"):                             # [N, C, H, W] -> [1, N*C, H, W]: a per-channel pool
        sx = [1, sx[0] * sx[1], sx[2], sx[3]]
        x = reshape(g, x, sx, near=node, origin=origin, tag="rows_to_channels")
    if steps == [sx[axis]] and sx[axis] > g.target.max_pool_kernel:   # one global pool (check)
        y = g.fresh(f"{node.output[0]}/gap")
        g.make("GlobalAveragePool", [x], [y], near=node, origin=origin, name=f"{node.name}/gap")
        sx[axis] = 1
        g.set_shape(y, sx, dt)
        steps, x = [], y
    for k, d in enumerate(steps):
        win = [d, 1] if axis == 2 else [1, d]
        sx[axis] //= d
        y = g.fresh(f"{node.output[0]}/pool{k}")
        g.make(POOL[node.op_type], [x], [y], near=node, origin=origin, name=f"{node.name}/pool{k}",
               kernel_shape=win, strides=win, pads=[0, 0, 0, 0])
        g.set_shape(y, sx, dt)
        x = y
    reshape(g, x, list(g.shape(node.output[0])), near=node, origin=origin, out=node.output[0], tag="reduced")
    if not steps:
        return f"{node.op_type} over axis {m.data['axis']} -> GlobalAveragePool"
    return f"{node.op_type} over axis {m.data['axis']} -> {' then '.join(map(str, steps))} {POOL[node.op_type]}"
