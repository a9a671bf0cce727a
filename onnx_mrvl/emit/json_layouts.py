"""The layout labels of the Nodes-JSON: by rank, a region input's storage (fuse's ``__nhwc``
tensors, LayoutTransform sources), an order-agnostic layer's storage permutation, TVM's 4-D padding."""
from __future__ import annotations

from typing import List, Sequence

import onnx

from .. import opset

LAYOUT_BY_RANK = {4: "NCHW", 2: "NC", 3: "NCW", 1: "C"}


def pad_to_4d(shape: Sequence[int]) -> List[int]:
    """TVM's resizeInputOutputLayoutTo4dim: pad a shape with trailing 1s to 4 dims."""
    return list(shape) + [1] * (4 - len(shape))


def input_layout(region: onnx.ModelProto, t: str, shape: Sequence[int]) -> str:
    """Layout label of region input ``t``: NHWC for fuse's ``__nhwc`` tensors, else by rank; but a
    4-D input that fuse relabelled through a Transpose (``Transpose(0,2,3,1) -> Reshape ->
    Transpose(0,3,1,2)`` on a graph input, tf2onnx's NHWC graphs) is the source of a
    LayoutTransform whose ``src_layout`` names its real storage: take that (ND when two disagree),
    so the compile step's storage check sees the data as fuse stored it."""
    layout = "NHWC" if t.endswith("__nhwc") and len(shape) == 4 else LAYOUT_BY_RANK.get(len(shape), "ND")
    if len(shape) != 4:
        return layout
    srcs = {opset.node_attrs(n).get("src_layout") for n in region.graph.node
            if n.domain == opset.DOMAIN and n.op_type == "LayoutTransform" and t in n.input}
    if not srcs or srcs == {layout}:
        return layout
    return srcs.pop() if len(srcs) == 1 else "ND"


def rank_layout(shape: Sequence[int]) -> str:
    return "NHWC" if len(shape) == 4 else ("NC" if len(shape) == 2 else LAYOUT_BY_RANK.get(len(shape), "ND"))


def stored_layout(node, shape: Sequence[int]) -> str:
    """Layout of what an order-agnostic layer (Sum2D, Mul2D, Concat, Slice2D) writes: its storage permutation
    (fuse's ``mrvl.storage`` metadata; none means logical order, NCHW for 4-D tensors)."""
    if len(shape) != 4:
        return rank_layout(shape)
    perm = next((p.value for p in node.metadata_props if p.key == "mrvl.storage"), None)
    if perm is None:
        return "NCHW"
    return {"[0, 2, 3, 1]": "NHWC", "[0,2,3,1]": "NHWC"}.get(perm.strip(), "ND")
