"""The integer bias of onnxruntime's first dynamic quantizer -> a float bias after the scale, the form
rule 1c (``dynamic_int8``) takes (docs/legalize.md "dynamic_int_bias").

The quantizer of onnxruntime 1.2 - 1.5 (``producer_name "onnx.quantize"``; ddddocr's captcha OCR
ships such a model) quantizes a Conv / MatMul bias at run time and adds it to the int32 accumulator:

    ConvInteger / MatMulInteger(x_q, W_q, x_zp, W_zp) -> Add(acc, [Reshape](Cast(int32)(Floor | Round(
        Div(B, Mul(x_scale, W_scale)))))) -> Cast(float) -> Mul(x_scale * W_scale)

which is ``acc * s + B`` up to the bias' rounding (less than one step ``s`` of the accumulator).
Rewritten: ``... -> Cast(float) -> Mul(s) -> Add(B)`` with B a float constant (reshaped like the
integer bias), the form of today's ``quantize_dynamic``, which rule 1c makes a float Conv (the bias
folded) or MatMul + Add. Like rule 1c, it drops a rounding of the dynamic run (closer to fp32).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from .base import Match, attr
from .qtensor import FLOAT, domain

NAME = "dynamic_int_bias"
OPS = ("Add",)
INTEGER_OPS = ("ConvInteger", "MatMulInteger")


def _producer(g, t: str, *ops):
    p = g.producer.get(t)
    return p if p is not None and not domain(p) and p.op_type in ops else None


def _mul_operands(g, t: str):
    """The input names of the Mul writing ``t`` as a set (``{t}`` when no Mul writes it)."""
    p = _producer(g, t, "Mul")
    return frozenset(p.input) if p is not None else frozenset([t])


def match(node, g) -> Optional[Match]:
    if node.op_type != "Add" or domain(node) or len(node.input) != 2:
        return None
    for k in (0, 1):
        acc = _producer(g, node.input[k], *INTEGER_OPS)
        if acc is not None and g.only_consumer(node.input[k]) is node:
            return Match([node], {"acc": acc, "bias_q": node.input[1 - k]})
    return None


def check(m: Match, g, target) -> Optional[str]:
    node, t = m.node, m.data["bias_q"]
    reshape = _producer(g, t, "Reshape")
    shape = None
    if reshape is not None:
        shape = g.const(reshape.input[1])
        if shape is None:
            return f"Add '{node.name}': the integer bias' Reshape has no constant shape"
        t = reshape.input[0]
    cast = _producer(g, t, "Cast")
    if cast is None or attr(cast, "to") != onnx.TensorProto.INT32:
        return f"Add '{node.name}' after {m.data['acc'].op_type} does not add Cast(int32) of a rounded float bias"
    rnd = _producer(g, cast.input[0], "Floor", "Round")
    div = _producer(g, rnd.input[0], "Div") if rnd is not None else None
    if div is None:
        return f"Add '{node.name}': its integer bias is not Cast(int32)(Floor | Round(Div(B, scale)))"
    bias = g.const(div.input[0])
    if bias is None or bias.dtype != np.float32:
        return f"Add '{node.name}': the bias B of its Div '{div.name}' is not a float32 constant"
    tocast = g.only_consumer(node.output[0])
    if tocast is None or domain(tocast) or tocast.op_type != "Cast" or attr(tocast, "to") != FLOAT:
        return f"Add '{node.name}' is not read by one Cast(float) alone"
    mul = g.only_consumer(tocast.output[0])
    if mul is None or domain(mul) or mul.op_type != "Mul":
        return f"Cast '{tocast.name}' after the integer bias is not read by one Mul (the accumulator's scale)"
    scale = mul.input[1] if mul.input[0] == tocast.output[0] else mul.input[0]
    if _mul_operands(g, scale) != _mul_operands(g, div.input[1]):
        return f"the integer bias of Add '{node.name}' is divided by '{div.input[1]}', the accumulator scaled " \
               f"by '{scale}': not the same scale"
    if shape is not None:
        try:
            bias = bias.reshape([int(d) for d in shape])
        except ValueError:
            return f"Add '{node.name}': the bias of {bias.size} values does not take the Reshape's shape {shape.tolist()}"
    m.data.update(bias=bias.astype(np.float32), cast=tocast, mul=mul, dead=[x for x in (reshape, cast, rnd, div) if x])
    return None


def rewrite(m: Match, g) -> str:
    node, acc, cast, mul = m.node, m.data["acc"], m.data["cast"], m.data["mul"]
    origin = m.origin
    g.remove(node)
    g.set_input(cast, 0, acc.output[0])
    out = mul.output[0]
    scaled = g.fresh(f"{out}/scaled")
    g.rename_output(mul, 0, scaled)
    b = g.add_const(f"{node.name}/bias", m.data["bias"])
    g.make("Add", [scaled, b], [out], near=mul, origin=origin, name=node.name)
    for d in m.data["dead"]:   # the run-time bias quantization, unless something else reads it
        if not any(g.users(o) for o in d.output):
            g.remove(d)
    return f"{acc.op_type}'s integer bias -> a float bias Add after its scale"


__all__ = ["NAME", "OPS", "match", "check", "rewrite"]
