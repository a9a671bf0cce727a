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
