"""A QDQ Conv / Gemm whose bias is a DequantizeLinear of integer codes at a scale other than
``s_x * s_w`` (AMD Quark XINT8 writes the bias as int8 codes at its own power-of-two scale; other
toolkits int16 / int32 at their own scale) -> the same dequantized bias as
``DequantizeLinear(int32 codes, s_x * s_w)``, when that is exact:

    b = fp32((q_b - z_b) * s_b)                  (what onnxruntime's DequantizeLinear adds)
    scale = fp32(s_x * s_w)                      (per tensor or per output channel)
    codes = (q_b - z_b) * s_b / scale            (integers, |codes| < 2^31)
    fp32(codes * scale) == b                     (checked element by element)

onnxruntime leaves such a group unfused (its QDQ selectors take an int32 bias only) and runs the
float Conv / Gemm on the dequantized values, adding ``b``; fuse's int8 layer (docs/fusion.md "int8")
takes an int32 bias at ``s_x * s_w``: it adds the same ``b``. With power-of-two scales (Quark XINT8)
the float sums onnxruntime forms are exact, so the int8 layer's integer sums are its numbers; with
other scales the float sums round in onnxruntime's order (the int8 layer differs at near-ties only).
A Conv onnxruntime runs in float keeps fuse's float path (ort_plan: the plan is stamped on the model
as given). A Conv's bias that is no exact multiple of ``s_x * s_w`` is left (fuse's float path adds
it as stored). A Gemm's is rounded half to even to ``s_x * s_w`` (Quark XINT8's classifier heads:
an int8 bias at ``s_x * s_w / 2``): the layer's sum then differs from onnxruntime's float Gemm by at
most half a step of ``s_x * s_w``, an output code only at a near-tie (onnxruntime's Gemm, with
its bias added inside the SGEMM, has no float-path emulation here).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from .base import Match, attr, dq_producer, inp

NAME = "qdq_int_bias_rescale"
OPS = ("Conv", "Gemm")
INT32_MAX = 2 ** 31 - 1


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx"):
        return None
    dq_b = dq_producer(g, inp(node, 2))
    if dq_b is None or not all(g.is_const(i) for i in dq_b.input if i):
        return None
    dq_x, dq_w = dq_producer(g, node.input[0]), dq_producer(g, node.input[1])
    if dq_x is None or dq_w is None or g.is_const(dq_x.input[0]) or not g.is_const(dq_w.input[0]):
        return None
    qb, sb, sx, sw = (g.const(t) for t in (dq_b.input[0], inp(dq_b, 1), inp(dq_x, 1), inp(dq_w, 1)))
    if qb is not None and qb.dtype == np.int32 and not (inp(dq_b, 2) and np.any(g.const(inp(dq_b, 2)))) \
            and sb is not None and sx is not None and sw is not None and sx.size == 1 \
            and np.allclose(sb.reshape(-1), np.float32(sx.reshape(-1)[0]) * sw.astype(np.float32).reshape(-1),
                            rtol=1e-5, atol=0):
        return None   # onnxruntime's own bias (fuse/qdq.py takes it)
    return Match([node, dq_b], {"dq_x": dq_x, "dq_w": dq_w})


def _channels(node, g, sw: np.ndarray, dq_w) -> Optional[int]:
    """The layer's output channels (from the weight codes), or None."""
    w = g.const(dq_w.input[0])
    if w is None or w.ndim < 2:
        return None
    axis = 0 if node.op_type == "Conv" else (0 if attr(node, "transB", 0) else 1)
    if sw.size != 1 and attr(dq_w, "axis", 1) % w.ndim != axis:
        return None
    return int(w.shape[axis])


def check(m: Match, g, target) -> Optional[str]:
    node, dq_b = m.nodes
    dq_x, dq_w = m.data["dq_x"], m.data["dq_w"]
    qb = g.const(dq_b.input[0])
    if qb is None or qb.dtype.kind not in "iu" or qb.ndim != 1:
        return "the bias codes are not a 1-D integer constant"
    sb = np.asarray(g.const(dq_b.input[1]), np.float32).reshape(-1)
    zb = np.asarray(g.const(inp(dq_b, 2)), np.int64).reshape(-1) if inp(dq_b, 2) else np.zeros(1, np.int64)
    sx, sw = g.const(inp(dq_x, 1)), g.const(inp(dq_w, 1))
    if sx is None or sw is None or sx.size != 1:
        return "the input is not quantized per tensor by a constant scale"
    sw = np.asarray(sw, np.float32).reshape(-1)
    o = _channels(node, g, sw, dq_w)
    if o is None or qb.size != o or sw.size not in (1, o) or sb.size not in (1, o) or zb.size not in (1, o):
        return "the bias / weight scales are not one per tensor or per output channel"
    scale = (np.float32(sx.reshape(-1)[0]) * sw).astype(np.float32)
    if not np.all(np.isfinite(scale)) or np.any(scale <= 0) or not np.all(np.isfinite(sb)):
        return "the bias scale s_x * s_w is not positive and finite"
    b = ((qb.astype(np.int64) - zb).astype(np.float32) * sb).astype(np.float32)   # DequantizeLinear
    ratio = b.astype(np.float64) / np.broadcast_to(scale, b.shape).astype(np.float64)
    codes = np.round(ratio)   # half to even
    if np.any(np.abs(codes) > INT32_MAX):
        return "the bias does not fit int32 at s_x * s_w"
    codes = codes.astype(np.int32)
    exact = np.array_equal((codes.astype(np.float32) * np.broadcast_to(scale, b.shape)).astype(np.float32), b)
    if not exact and node.op_type == "Conv":   # fuse's float-path Conv adds the stored bias itself
        return "the dequantized bias is not an exact int32 multiple of s_x * s_w (fuse adds it as stored)"
    m.data.update(codes=codes, exact=exact, scale=scale.reshape(()) if scale.size == 1 else scale)
    return None


def rewrite(m: Match, g) -> str:
    node, dq_b = m.nodes
    name = dq_b.output[0]
    codes = g.add_const(f"{name}_int32", m.data["codes"])
    scale = g.add_const(f"{name}_int32_scale", m.data["scale"])
    out = g.fresh(f"{name}_int32")
    per_channel = m.data["scale"].size > 1
    g.make("DequantizeLinear", [codes, scale], [out], near=node, origin=m.origin,
           name=g.fresh_node_name(f"{dq_b.name}/int32"), **({"axis": 0} if per_channel else {}))
    g.set_shape(out, list(m.data["codes"].shape), onnx.TensorProto.FLOAT)
    g.set_input(node, 2, out)
    kind = str(np.asarray(g.const(dq_b.input[0])).dtype)
    return (f"bias DequantizeLinear of {kind} codes -> int32 codes at s_x * s_w "
            f"({'the same fp32 bias' if m.data['exact'] else 'rounded half to even: at most half a step of s_x * s_w'})")


__all__ = ["NAME", "OPS", "match", "check", "rewrite"]
