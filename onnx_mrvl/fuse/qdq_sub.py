"""QDQ Adds and Subs that are the int8 Sum2D of another Add (docs/fusion.md "int8", residual adds):
``c + DQ(a)`` (the constant first: YOLOv8's ``anchors + rb``) is ``DQ(a) + c``; a Sub
(``DQ(a) - DQ(b)``, ``DQ(a) - c``, ``c - DQ(a)``: YOLOv8's box decode) is the Sum2D of ``a + b``
with ``subtract`` (1: A - B, 2: B - A, B the second input or the constant), computed in float:
onnxruntime has no QLinearSub and runs ``DQ -> Sub -> Q`` in fp32, which is the layer's
``fp32(va - vb)`` and its rounding. Each builds a copy of the node as that Add (qdq_pool.build_add) and
puts the original node back in the group."""
from __future__ import annotations

from typing import Union

import onnx

from ..graph_index import GraphIndex
from ..target import Target
from .groups import Group
from .qconst import constant_value
from .qdq import activation_input
from .qdq_pool import build_add


def _as_add(g: GraphIndex, n: onnx.NodeProto, swap: bool, target: Target, claimed) -> Union[Group, str, None]:
    add = onnx.NodeProto()
    add.CopyFrom(n)
    add.op_type = "Add"
    if swap:
        add.input[0], add.input[1] = n.input[1], n.input[0]
    found = activation_input(g, add.input[0])
    if found is None or isinstance(found[1], str):
        return found and found[1]
    grp = build_add(g, add, target, claimed, found[1])
    if isinstance(grp, Group):
        grp.nodes = [n if x is add else x for x in grp.nodes]
    return grp


def build_add_const_first(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed=frozenset()):
    """``c + DQ(a) -> Q -> DQ`` as ``DQ(a) + c`` (onnxruntime fuses or not the same node either way),
    or None (not that form), or a reason."""
    if n.op_type != "Add" or len(n.input) != 2 or constant_value(g, n.input[0]) is None:
        return None
    return _as_add(g, n, True, target, claimed)


def build_sub(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed=frozenset()) -> Union[Group, str, None]:
    """A QDQ Sub as a subtracting int8 Sum2D in float; None when neither operand is a DQ of an
    activation, or a reason."""
    if n.op_type != "Sub" or len(n.input) != 2:
        return None
    first_const = constant_value(g, n.input[0]) is not None
    grp = _as_add(g, n, first_const, target, claimed)
    if not isinstance(grp, Group):
        return grp
    for k in ("in2_scale", "in2_zero_point", "in2_type") if "operand" in grp.weights else ():
        grp.attrs.pop(k, None)   # a constant operand: its fp32 value (no QLinear kernel reads its codes)
    grp.attrs.update(requant="float", subtract=2 if first_const else 1)
    return grp
