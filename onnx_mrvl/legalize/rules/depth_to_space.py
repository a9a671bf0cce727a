"""DepthToSpace and SpaceToDepth (DCR / CRD) -> Reshape to 6-D, Transpose, Reshape back (the ONNX
definitions). fuse runs the reshapes on the accelerator and the transpose as block rotations
(fuse/perms.rotations), so super-resolution / YOLO Focus-like blocks stay in one region."""
from __future__ import annotations

from typing import Optional

from .base import Match, attr, reshape

NAME = "depth_to_space"
OPS = ("DepthToSpace", "SpaceToDepth")


def match(node, g) -> Optional[Match]:
    if node.op_type not in OPS or node.domain not in ("", "ai.onnx"):
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    sx, sy = g.shape(node.input[0]), g.shape(node.output[0])
    if sx is None or sy is None or len(sx) != 4:
        return "input or output shape is not static 4-D"
    b = int(attr(node, "blocksize", 0) or 0)
    n, c, h, w = sx
    if b < 1 or (node.op_type == "DepthToSpace" and c % (b * b)) or \
            (node.op_type == "SpaceToDepth" and (h % b or w % b)):
        return f"blocksize {b} does not divide the input {sx}"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    n, c, h, w = g.shape(node.input[0])
    b = int(attr(node, "blocksize"))
    mode = attr(node, "mode", "DCR")
    if node.op_type == "DepthToSpace" and mode == "CRD":
        six, perm = [n, c // (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3]
    elif node.op_type == "DepthToSpace":
        six, perm = [n, b, b, c // (b * b), h, w], [0, 3, 4, 1, 5, 2]
    elif mode == "CRD":   # SpaceToDepth's CRD (opset 25): channel-major blocks
        six, perm = [n, c, h // b, b, w // b, b], [0, 1, 3, 5, 2, 4]
    else:
        six, perm = [n, c, h // b, b, w // b, b], [0, 3, 5, 1, 2, 4]
    origin = m.origin
    dtype, sy = g.dtype(node.input[0]), list(g.shape(node.output[0]))
    g.remove(node)
    x6 = reshape(g, node.input[0], six, near=node, origin=origin, tag="6d")
    t6 = g.fresh(f"{node.output[0]}/perm")
    g.make("Transpose", [x6], [t6], near=node, origin=origin, name=f"{node.name}/transpose", perm=perm)
    g.set_shape(t6, [six[p] for p in perm], dtype)
    reshape(g, t6, sy, near=node, origin=origin, out=node.output[0], tag="4d")
    return f"{node.op_type} ({mode}) -> Reshape, Transpose, Reshape"
