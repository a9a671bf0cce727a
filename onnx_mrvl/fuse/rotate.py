"""A real permutation of accelerator data (one the storage cannot absorb: a channel shuffle, a
pixel shuffle written as reshape-transpose-reshape, a tensor a Transpose relabelled before a
layout change) done in the region as block rotations (``perms.rotations``): per rotation a Mrvl
``Reshape`` to the 4-D view ``[A, B, R, 1]`` and an NCHW->NHWC ``LayoutTransform`` (-> ``[A, R, 1,
B]``), then a ``Reshape`` to the stored shape. The nodes are named ``rotate_*``.
"""
from __future__ import annotations

from typing import List, Sequence

import onnx

from .. import opset


def materialize(m, t: str, name: str, out: str, steps: List[List[int]], final: List[int],
                origin: Sequence[str]) -> onnx.NodeProto:
    """Add the rotations of stored tensor ``name`` (tensor ``t``) to the Materializer ``m``; return the
    last Reshape, writing ``out`` with shape ``final`` (the caller adds it)."""
    x = name
    for view in steps:
        for op, attrs, shape in (("Reshape", {"shape": view}, view),
                                 ("LayoutTransform", {"src_layout": "NCHW", "dst_layout": "NHWC"},
                                  [view[0], view[2], 1, view[1]])):
            y = m.fresh(f"{t}__rot")
            composite = "mrvl.reshape" if op == "Reshape" else "mrvl.layout_transform_nchw2nhwc"
            m.add(opset.make_node(op, [x], [y], name=m.fresh(f"rotate_{t}"), origin=origin,
                                  attrs=attrs, composite=composite), None)
            m.vinfo[y] = list(shape)
            m.mrvl_tensors.add(y)
            x = y
    m.mrvl_tensors.add(out)
    return opset.make_node("Reshape", [x], [out], name=m.fresh(f"reshape_{t}"), origin=origin,
                           attrs={"shape": list(final)}, composite="mrvl.reshape")
