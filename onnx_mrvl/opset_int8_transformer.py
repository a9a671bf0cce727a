"""The Mrvl ``Requantize`` op: a QuantizeLinear -> DequantizeLinear pair on an activation inside a
region (docs/fusion.md "int8 in transformers and recurrent models").

A QDQ model quantizes the output of every op onnxruntime's quantizer knows (MatMul, Add, Mul,
Softmax, LayerNormalization, Transpose, Reshape, ...); where no int8 layer absorbs such a pair (the
float ops between int8 layers: LayerNorm, Softmax, GELU, masks, scales), the pair is this one
layer: ``y = (sat(rne(x / s) + z) - z) * s`` with fp32 math, the codes stored as int8 / uint8 (an
int8 tensor, docs/program.md "tensor dtypes"), so the next int8 layer reads them exactly and a
float layer reads their dequantized value. Attributes: the int8 ones of a weightless layer
(``precision`` = "int8", ``in_*`` = ``out_*`` = the pair's scale, zero point and type).
The reference body is the pair itself.
"""
from __future__ import annotations

from onnx import TensorProto, helper

from .opset_int8 import INT8_POOL_ATTRS, QTYPES

ATTRS = INT8_POOL_ATTRS


def _body(a, present, opset):
    if opset < 13:
        raise ValueError("a Requantize reference body needs opset >= 13")
    s = helper.make_tensor("s", TensorProto.FLOAT, [], [float(a["out_scale"])])
    z = helper.make_tensor("z", QTYPES[a["out_type"]], [], [int(a["out_zero_point"])])
    return [helper.make_node("Constant", [], ["rq_s"], value=s),
            helper.make_node("Constant", [], ["rq_z"], value=z),
            helper.make_node("QuantizeLinear", ["X", "rq_s", "rq_z"], ["rq_q"]),
            helper.make_node("DequantizeLinear", ["rq_q", "rq_s", "rq_z"], ["Y"])]


def op_defs(OpDef) -> dict:
    """The OpDef of ``Requantize`` (``OpDef`` passed in: no import cycle with opset)."""
    return {"Requantize": OpDef("Requantize", "Requantize", "mrvl.requantize", ("X",), ATTRS, _body)}
