"""Dropout is the identity at inference: removed. A used mask output becomes all ones.

At inference (``training_mode`` absent or a constant false, ``is_test`` not 0) the mask is all
true (bool; the input's type below opset 10): a constant of the input's static shape, or
``ConstantOfShape(Shape(x))`` when the shape is not static or the mask is a graph output.
A Dropout with ``training_mode`` true or not constant stays (it runs on the CPU).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import TensorProto, helper

from .base import Match, attr, const_input, inp

NAME = "remove_dropout"
OPS = ("Dropout",)


def match(node, g) -> Optional[Match]:
    if node.op_type == "Dropout" and node.domain in ("", "ai.onnx"):
        return Match([node])
    return None


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if inp(node, 2):
        mode = const_input(g, node, 2)
        if mode is None:
            return "training_mode is not a constant"
        if bool(mode.reshape(-1)[0]):
            return "training_mode is true"
    if attr(node, "is_test", 1) == 0:
        return "is_test=0 (training)"
    mask = _mask(node, g)
    if mask and mask in g.pinned and mask not in g.outputs:
        return "its mask is read inside a subgraph"
    m.data["keep"] = _copies_io(node, g)
    if m.data["keep"] and not mask:
        return "it copies a graph input or output to a graph output"
    return None


def _copies_io(node, g) -> bool:
    """The Dropout cannot go: it copies a graph input (or output) to a graph output."""
    src, dst = node.input[0], node.output[0]
    return bool(dst) and dst in g.pinned and (g.producer.get(src) is None or src in g.pinned)


def _mask(node, g) -> str:
    """The mask output name when something reads it, else ""."""
    mask = node.output[1] if len(node.output) > 1 else ""
    return mask if mask and (g.used(mask) or mask in g.pinned) else ""


def _mask_dtype(node, g) -> int:
    if g.opset >= 10:
        return TensorProto.BOOL
    return g.dtype(node.input[0]) or TensorProto.FLOAT


def _ones_mask(m: Match, g, mask: str) -> str:
    node = m.node
    x = node.input[0]
    dtype = _mask_dtype(node, g)
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    shape = g.shape(x)
    if shape is not None and mask not in g.outputs:
        g.set_const(mask, np.ones(shape, dtype=np_dtype))
        return f"mask -> constant ones {list(shape)}"
    one = helper.make_tensor("value", dtype, [1], np.ones(1, dtype=np_dtype).tolist())
    if shape is not None:
        dims = g.add_const(f"{node.name}/mask_shape", np.asarray(shape, dtype=np.int64))
        how = f"ConstantOfShape {list(shape)}"
    else:
        dims = g.fresh(f"{node.name}/mask_shape")
        g.make("Shape", [x], [dims], near=node, origin=m.origin, name=f"{node.name}/mask_shape")
        how = "ConstantOfShape(Shape(x))"
    g.make("ConstantOfShape", [dims], [mask], near=node, origin=m.origin,
           name=f"{node.name}/mask", value=one)
    if shape is not None:
        g.set_shape(mask, shape, dtype)
    return f"mask -> {how} of ones"


def rewrite(m: Match, g) -> str:
    node = m.node
    mask = _mask(node, g)
    ones = "; " + _ones_mask(m, g, mask) if mask else ""
    if m.data.get("keep"):  # only the mask goes; the copy stays a CPU Dropout
        if g.producer.get(node.output[1]) is node:
            del g.producer[node.output[1]]
        del node.output[1:]
        g.changed = True
        return "Dropout kept (it copies a graph input to a graph output)" + ones
    if node.output[0]:
        g.bypass(node, node.input[0], node.output[0])
    else:  # only the mask was requested (not valid ONNX, but harmless)
        g.remove(node)
    return "Dropout removed" + ones
