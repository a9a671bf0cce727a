"""A QDQ Conv / Gemm / MatMul whose output is not quantized (no Q -> DQ pair after it, nor after a
one-input op after it: NVIDIA ModelOpt / TensorRT-style exports quantize the inputs of the weighted
ops only, so the layer before a residual Add or at the model's output writes float, which
onnxruntime computes in fp32) that cannot be an int8-in / fp16-out layer (``qdq_int8_in.py``, tried
first: int4 / block-wise weights, weights quantized along another axis, a folded BN it cannot take) as the **fp16 layer on its dequantized weights**
(docs/quantize.md "importing pre-quantized models"). A QDQ layer that has its output pair but cannot be int8 (an
activation other than Relu/Clip before the Q, ...) stays on the CPU with
``qdq.build``'s reason, exactly as onnxruntime runs it. The fallback:
``W = (W_q - z) * s`` and ``B = b_q * s_b`` in fp32 as onnxruntime's DequantizeLinear computes them,
the weight / bias DequantizeLinear absorbed, the layer's decision saying why it is not int8.
Its activation Q -> DQ pairs stay (Requantize layers or absorbed by the int8 layers around it).

Not for activations of another width (int16 / int4): those layers stay on the CPU with the reason,
so the quantization the model asks for is not silently dropped.
"""
from __future__ import annotations

from typing import Optional

import onnx

from ..graph_index import GraphIndex
from ..target import Target
from .batch_matmul import build as build_matmul
from .groups import Group
from .patterns import build_conv, build_fc
from .qconst import dequantized_const
from .qdq import Dequantized, qparams

NOTE = "fp16 with dequantized int8 weights (not an int8 layer: {why})"


def _quantized_next(g: GraphIndex, t: str, depth: int = 2) -> bool:
    """A QuantizeLinear reads ``t``, or the output of a one-input op reading it (an activation
    between the layer and its Q: a QDQ layer the int8 layer cannot fold, left as it is)."""
    for c in g.consumers.get(t, []):
        if c.op_type == "QuantizeLinear":
            return True
        if depth > 1 and len([i for i in c.input if i and not g.is_const(i)]) == 1 and \
                _quantized_next(g, c.output[0], depth - 1):
            return True
    return False


def build_dequantized(g: GraphIndex, n: onnx.NodeProto, target: Target, why: str) -> Optional[Group]:
    """The fp16 group of QDQ layer ``n`` on its dequantized weight (and bias) when its output is
    not quantized (the model computes it in float), or None (it stays on the CPU with ``why``)."""
    if _quantized_next(g, n.output[0]):
        return None
    dq_in = g.producer.get(n.input[0])
    if dq_in is not None and dq_in.op_type == "DequantizeLinear" and isinstance(qparams(g, dq_in), str):
        return None   # activations of a width the MLIP has no mode for: the reason stands
    consts, absorbed = {}, []
    for t in n.input[1:3]:
        dq = g.producer.get(t) if t else None
        if dq is None or dq.op_type != "DequantizeLinear":
            continue
        if not all(g.is_const(i) for i in dq.input if i) or dq.name in g.excluded:
            return None
        c = dequantized_const(g, dq)
        if c is None:
            return None
        consts[t] = c
        if len(g.consumers.get(t, [])) == 1:
            absorbed.append(dq)
    if not consts:
        return None
    view = Dequantized(g, consts)
    grp = {"Conv": build_conv, "Gemm": build_fc}.get(n.op_type, build_matmul)(view, n, target)
    if not isinstance(grp, Group):
        return None
    grp.nodes += absorbed
    grp.note = NOTE.format(why=why)
    return grp
