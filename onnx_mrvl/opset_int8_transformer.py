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


INT8_OUT = "int8_out"   # ``precision`` of a float layer that writes int8 codes (an absorbed Q -> DQ pair)
INT8_OUT_ATTRS = ("precision", "out_scale", "out_zero_point", "out_type", "in_scale", "in_zero_point", "in_type")


def is_int8_out(attrs: dict) -> bool:
    return attrs.get("precision") == INT8_OUT


def int8_out_body(body):
    """The body of a float layer (LayerNorm, Mul2D) that dispatches on ``precision``: as it is, or
    ("int8_out") followed by QuantizeLinear -> DequantizeLinear of its output (the absorbed pair),
    and with ``in_*`` preceded by that of its data input (it reads int8 codes)."""
    def wrapped(a, present, opset):
        if not is_int8_out(a):
            return body(a, present, opset)
        x = "A" if "A" in present else "X"
        inner = body(a, present, opset)
        for n in inner:
            n.output[:] = ["rq_y" if o == "Y" else o for o in n.output]
            n.input[:] = ["rq_y" if i == "Y" else "rq_x" if i == x and "in_type" in a else i for i in n.input]
        pair = _body(a, present, opset)
        pair[2].input[0] = "rq_y"
        for node in pair:
            node.output[:] = ["rq_" + o if o != "Y" else o for o in node.output]
            node.input[:] = ["rq_" + i if i != "rq_y" else i for i in node.input]
        if "in_type" in a:
            inp = _body(dict(a, out_scale=a["in_scale"], out_zero_point=a["in_zero_point"], out_type=a["in_type"]),
                        present, opset)
            inp[2].input[0] = x
            for node in inp:
                node.output[:] = ["in_" + o if o != "Y" else "rq_x" for o in node.output]
                node.input[:] = [("in_" + i) if i != x else i for i in node.input]
            inner = inp + inner
        return inner + pair
    return wrapped
