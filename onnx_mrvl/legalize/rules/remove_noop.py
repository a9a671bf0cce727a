"""No-op Cast (same type), Reshape (same shape), Transpose (identity perm), Pad (all pads 0),
Concat (one input), Resize (same shape, every output pixel sampled exactly at its input pixel) and
Expand to the shape x has (TorchScript's ``u.expand_as(y[..., :2])`` in an in-place slice update,
Conditional-DETR's box head) are removed. torchvision detection exports (GeneralizedRCNNTransform) put the last three between the
input and the backbone: a resize to the size the image already has, batching by Pad + Concat."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ...resize_index import nearest_indices
from .base import Match, attr, bypass_reason, inp

NAME = "remove_noop"
OPS = ("Cast", "Reshape", "Transpose", "Pad", "Concat", "Resize", "Expand")
# coordinate modes that map output index o to input coordinate o when the scale is 1
_IDENTITY_CTM = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def _noop_resize(node, g) -> bool:
    sx, sy = g.shape(node.input[0]), g.shape(node.output[0])
    if sx is None or sx != sy:
        return False
    ctm = attr(node, "coordinate_transformation_mode", "half_pixel")
    if attr(node, "mode", "nearest") != "nearest":
        return ctm in _IDENTITY_CTM
    mode = attr(node, "nearest_mode", "round_prefer_floor")
    for n in sx:
        idx = nearest_indices(n, n, 1.0, ctm, mode)
        if idx is None or not np.array_equal(idx, np.arange(n)):
            return False
    return True


def _noop_pad(node, g) -> bool:
    if g.shape(node.input[0]) is None:
        return False
    pads = attr(node, "pads") if g.opset < 11 else (g.const(inp(node, 1)) if inp(node, 1) else None)
    return pads is not None and not np.any(np.asarray(pads))


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx") or not node.input:
        return None
    x, y = node.input[0], node.output[0]
    if node.op_type == "Cast":
        if g.dtype(x) is not None and g.dtype(x) == attr(node, "to"):
            return Match([node])
    elif node.op_type in ("Reshape", "Expand"):
        sx, sy = g.shape(x), g.shape(y)
        if sx is not None and sx == sy and (node.op_type == "Reshape" or None not in sx):
            return Match([node])
    elif node.op_type == "Transpose":
        perm = attr(node, "perm")
        sx = g.shape(x)
        if perm is not None and list(perm) == sorted(perm):
            return Match([node])
        if perm is None and sx is not None and len(sx) <= 1:
            return Match([node])
    elif node.op_type == "Pad":
        if _noop_pad(node, g):
            return Match([node])
    elif node.op_type == "Concat":
        if len([i for i in node.input if i]) == 1 and len(node.input) == 1:
            return Match([node])
    elif node.op_type == "Resize":
        if _noop_resize(node, g):
            return Match([node])
    return None


def check(m: Match, g, target) -> Optional[str]:
    return bypass_reason(m, g)


def rewrite(m: Match, g) -> str:
    g.bypass(m.node, m.node.input[0], m.node.output[0])
    return f"no-op {m.node.op_type} removed"
