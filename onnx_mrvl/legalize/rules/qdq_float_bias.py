"""A QDQ Conv / Gemm with an fp32 bias (torch.ao / FX export, NVIDIA ModelOpt, AMD Quark, tf2onnx
write the bias unquantized) -> the bias as ``DequantizeLinear(int32 codes, s_x * s_w)``, exactly as
onnxruntime's ``BiasQuantization`` graph transformer rewrites it before fusing the group into
QLinearConv / QGemm:

    scale = s_x * s_w (fp32 Mul, per tensor or per output channel)
    codes = int32(Round(b / scale))  (fp32 Div, round half to even)

so fuse's int8 layer (docs/fusion.md "int8") adds the bias onnxruntime adds. Matched as
onnxruntime matches: a Conv / Gemm whose bias is a 1-D initializer, whose input 0 is a
DequantizeLinear with a scalar scale and whose input 1 is a DequantizeLinear with a scalar scale
or one per output channel on the expected axis (Conv 0; Gemm 0 with transB, else 1) and, then,
no ``block_size`` attribute (onnxruntime skips those; the bias stays fp32 and the layer is refused
as int8 with that reason), and whose output a QuantizeLinear reads (directly or through Relu / Clip):
without one onnxruntime leaves the bias fp32 (measured, onnxruntime 1.32) and so do we (the
int8-in layer of fuse/qdq_int8_in.py adds it in fp32). One difference: a per-channel axis written negatively (``axis=-1``)
is taken here; onnxruntime compares the attribute as written, leaves that bias fp32 and runs the
layer in float (the int8 layer then differs from it by the bias's rounding to s_x * s_w, at most
half a bias step; measured identical on tests/test_qdq_variants.py's ``*_negative_axis``).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from .base import Match, attr, dq_producer, inp

NAME = "qdq_float_bias"
OPS = ("Conv", "Gemm")
INT32_MAX = 2.0 ** 31 - 1


def match(node, g) -> Optional[Match]:
    b = inp(node, 2)
    if not b or not g.is_const(b) or g.dtype(b) != onnx.TensorProto.FLOAT or len(g.shape(b) or ()) != 1:
        return None
    dq_x, dq_w = dq_producer(g, node.input[0]), dq_producer(g, node.input[1])
    if dq_x is None or dq_w is None:
        return None
    return Match([node], {"dq_x": dq_x, "dq_w": dq_w})


def _quantized_output(g, t: str, depth: int = 2) -> bool:
    """A QuantizeLinear reads ``t``, or reads the output of a Relu / Clip reading it."""
    for u in g.users(t):
        if u.op_type == "QuantizeLinear":
            return True
        if depth > 1 and u.op_type in ("Relu", "Clip") and _quantized_output(g, u.output[0], depth - 1):
            return True
    return False


def check(m: Match, g, target) -> Optional[str]:
    node, dq_x, dq_w = m.node, m.data["dq_x"], m.data["dq_w"]
    if not _quantized_output(g, node.output[0]):
        # measured (onnxruntime 1.32): a Conv / Gemm whose output no Q reads keeps its fp32 bias
        # and runs in float; fuse's int8-in layer adds that fp32 bias (fuse/qdq_int8_in.py)
        return "the layer's output is not quantized: onnxruntime keeps the fp32 bias (no BiasQuantization)"
    sx, sw = g.const(inp(dq_x, 1)), g.const(inp(dq_w, 1))
    if sx is None or sw is None:
        return "the input or weight scale is not a constant"
    if sx.size != 1:
        return "the input is quantized per axis (onnxruntime quantizes the bias for a per-tensor input only)"
    b = g.const(node.input[2])
    if sw.size != 1:
        axis = 0 if node.op_type == "Conv" else (0 if attr(node, "transB", 0) else 1)
        if any(a.name == "block_size" for a in dq_w.attribute):
            return (f"DequantizeLinear '{dq_w.name}' has a block_size attribute: onnxruntime leaves the fp32 "
                    "bias (and runs the layer in float)")
        rank = len(g.shape(dq_w.input[0]) or ()) or 2
        if sw.ndim != 1 or sw.size != b.size or attr(dq_w, "axis", 1) % rank != axis:
            return f"weight scales of shape {list(sw.shape)} are not one per output channel on axis {axis}"
    scale = (np.float32(sx.reshape(())) * sw.astype(np.float32)).astype(np.float32)
    if scale.size == 1:
        scale = scale.reshape(())   # per tensor (a [1] weight scale too)
    if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        return "the bias scale s_x * s_w is not positive and finite"
    q = np.round(b.astype(np.float32) / scale).astype(np.float32)   # numpy rounds half to even, as Round
    if np.any(np.abs(q) > INT32_MAX):
        return "the bias does not fit int32 at scale s_x * s_w"
    m.data.update(codes=q.astype(np.int32), scale=scale)
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    origin = m.origin
    codes = g.add_const(f"{node.input[2]}_quantized", m.data["codes"])
    scale = g.add_const(f"{node.input[2]}_scale", m.data["scale"])
    out = g.fresh(f"{node.input[2]}_DequantizeLinear_Output")
    per_channel = m.data["scale"].size > 1
    g.make("DequantizeLinear", [codes, scale], [out], near=node, origin=origin,
           name=g.fresh_node_name(f"{node.input[2]}_DequantizeLinear"), **({"axis": 0} if per_channel else {}))
    g.set_shape(out, m.data["codes"].shape, onnx.TensorProto.FLOAT)
    g.set_input(node, 2, out)
    return "fp32 bias -> DequantizeLinear(int32, s_x * s_w) (onnxruntime's BiasQuantization)"
