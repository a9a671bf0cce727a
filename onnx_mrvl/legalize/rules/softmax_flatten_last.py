"""The Softmax 12 -> 13 adapter's wrapping undone when it softmaxes the last axis:

    Flatten(x, axis=r-1) -> Softmax / LogSoftmax(axis=1 | -1) -> Reshape(to x's shape)
        -> Softmax / LogSoftmax(x, axis=-1)

onnx's version converter raises an opset 11 / 12 Softmax (paddle2onnx's, tf2onnx's) to 13 by
flattening at its axis when it cannot tell the input's rank (``Shape, Flatten, Softmax, Reshape``;
paddle's dynamic reshapes hide it). With the softmax over the last axis that is the same function
without the wrapping, and in a QDQ model the wrapping hid the ``DQ -> Softmax -> Q`` group that
onnxruntime runs as QLinearSoftmax on the opset-12 original: PP-OCRv4 rec QDQ S8 99.94% -> 100%
identical. Exact (a reshape pair removed). Rules: x of a static shape, rank >= 2, the Flatten's and
the Softmax's outputs read only by the next node, the Reshape's shape constant and x's shape."""
from __future__ import annotations

from typing import Optional

from .base import Match, attr

NAME = "softmax_flatten_last"
OPS = ("Softmax", "LogSoftmax")


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx") or node.op_type not in OPS or not node.input:
        return None
    flat = g.producer.get(node.input[0])
    if flat is None or flat.op_type != "Flatten" or flat.domain not in ("", "ai.onnx"):
        return None
    reshape = g.only_consumer(node.output[0])
    if reshape is None or reshape.op_type != "Reshape" or reshape.input[0] != node.output[0]:
        return None
    return Match([node, flat, reshape])


def check(m: Match, g, target) -> Optional[str]:
    node, flat, reshape = m.nodes
    x = flat.input[0]
    sx = g.shape(x)
    if sx is None or len(sx) < 2 or any(d is None or d <= 0 for d in sx):
        return "the flattened tensor has no static shape of rank >= 2"
    r = len(sx)
    if int(attr(flat, "axis", 1)) % r != r - 1:
        return "the Flatten does not split off the last axis"
    if int(attr(node, "axis", -1)) not in (1, -1):
        return "the softmax is not over the flattened tensor's second axis"
    if g.only_consumer(flat.output[0]) is not node:
        return "the flattened tensor has other readers"
    shape = g.const(reshape.input[1]) if len(reshape.input) > 1 else None
    if shape is None or [int(d) for d in shape.reshape(-1)] != list(sx) or attr(reshape, "allowzero", 0):
        return "the Reshape does not restore the flattened tensor's shape"
    return None


def rewrite(m: Match, g) -> str:
    node, flat, reshape = m.nodes
    for n in (reshape, node, flat):
        g.remove(n)
    g.make(node.op_type, [flat.input[0]], [reshape.output[0]], near=node, origin=m.origin, name=node.name,
           axis=-1)
    return f"Flatten -> {node.op_type} -> Reshape over the last axis -> {node.op_type}(axis=-1)"
