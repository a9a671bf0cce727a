"""A constant-mode Pad of a float tensor along the channel axis only (axis 1 of a 3-D to 5-D
tensor) becomes a ``Concat`` of the input with constant blocks of the pad value on that axis: the
zero channels that BlazeFace-style residual blocks add before the skip ``Add`` when a block widens
its channels (TFLite's ``PAD`` over NHWC channels, written by tf2onnx as an NCHW Pad on axis 1:
MediaPipe's face / palm detectors, face / iris / hand-recrop landmark models). Exact (a copy); the
Concat is an accelerator op whose constant operands travel as layer weights, where the Pad cut the
region (``pad_to_conv`` takes spatial pads only).

Rules: static shape, non-negative pads on axis 1 only, a finite value, the constant blocks at most
``MAX_CONST`` elements, next to an accelerator op (a data move between CPU ops stays there)."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .base import Match
from .pad_fold import pad_spec
from .pad_to_conv import beside_accelerator_op

NAME = "pad_channel_concat"
OPS = ("Pad",)
MAX_CONST = 1 << 20   # elements of the two constant blocks (2 MB in fp16)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Pad" or node.domain not in ("", "ai.onnx"):
        return None
    spec = pad_spec(node, g)
    if spec is None or not 3 <= spec[2] <= 5:
        return None
    pads, _, r = spec
    if not (pads[1] or pads[1 + r]) or any(p for k, p in enumerate(pads) if k % r != 1):
        return None
    return Match([node], {"spec": spec})


def check(m: Match, g, target) -> Optional[str]:
    pads, value, r = m.data["spec"]
    x = m.node.input[0]
    sx = g.shape(x)
    if g.dtype(x) not in (1, 10):
        return "not a float32 / float16 tensor"
    if sx is None or any(d is None or d <= 0 for d in sx):
        return "shape unknown"
    if pads[1] < 0 or pads[1 + r] < 0:
        return "negative pads (cropping)"
    if not math.isfinite(value):
        return f"pad value {value}"
    size = (pads[1] + pads[1 + r]) * int(np.prod(sx)) // sx[1]
    if size > MAX_CONST:
        return f"{size} constant elements (above {MAX_CONST})"
    if not beside_accelerator_op(g, m.node):
        return "no accelerator op next to it"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    pads, value, r = m.data["spec"]
    x = node.input[0]
    sx = list(g.shape(x))
    dt = np.float16 if g.dtype(x) == 10 else np.float32
    ins = []
    for side, p in (("begin", pads[1]), ("end", pads[1 + r])):
        if p:
            ins.append(g.add_const(f"{node.name}/{side}", np.full([sx[0], p] + sx[2:], value, dt)))
    if pads[1]:
        ins.insert(1, x)
    else:
        ins.insert(0, x)
    g.remove(node)
    g.make("Concat", ins, [node.output[0]], near=node, origin=m.origin, name=node.name, axis=1)
    return f"channel Pad [{pads[1]}, {pads[1 + r]}] (value {value}) -> Concat with constant blocks"
