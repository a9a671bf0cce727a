"""A zero constant-mode Pad on the spatial axes of a 4-D tensor that pad_fold could not fold
(it feeds a MaxPool over data that may be negative, a Slice, a Concat, several consumers of
which one cannot take it, ...) -> an identity depthwise 1x1 Conv carrying the pads
(``Conv(x, ones[C, 1, 1, 1], group=C, pads)``): exact (``x * 1``, zeros outside) and an
accelerator op, so the Pad does not cut a region (TF ZeroPadding2D, NASNet reduction cells).
Only next to ops the accelerator runs, so a Pad between CPU ops does not become a lone region."""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import TensorProto

from .base import Match
from .pad_fold import _pad_spec

NAME = "pad_to_conv"
OPS = ("Pad",)
NEIGHBOURS = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "Add",
              "Mul", "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Concat",
              "Resize", "BatchNormalization", "Max", "Min")


def match(node, g) -> Optional[Match]:
    if node.op_type != "Pad" or node.domain not in ("", "ai.onnx"):
        return None
    spec = _pad_spec(node, g)
    if spec is None or spec[2] != 4:
        return None
    return Match([node], {"spec": spec})


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    pads, value, r = m.data["spec"]
    sx = g.shape(node.input[0])
    if g.dtype(node.input[0]) != TensorProto.FLOAT or sx is None:
        return "not a static float32 tensor"
    if value != 0.0:
        return f"pad value {value} is not 0"
    if any(pads[a] or pads[a + r] for a in (0, 1)):
        return "pads the batch or channel axis"
    if any(v < 0 for v in pads):
        return "negative pads (cropping)"
    if max(pads) > target.max_pad["conv"]:
        return f"pads {pads} exceed target.max_pad ({target.max_pad['conv']})"
    user = g.only_consumer(node.output[0])
    if user is not None and user.op_type in ("Transpose", "Reshape"):
        return "read by a Transpose / Reshape (pad_sink moves it below first)"
    p = g.producer.get(node.input[0])
    if (p is None or p.op_type not in NEIGHBOURS) and not any(
            u.op_type in NEIGHBOURS for u in g.users(node.output[0])):
        return "no accelerator op next to it"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    pads, _, _ = m.data["spec"]
    c = g.shape(node.input[0])[1]
    w = g.add_const(f"{node.name}/ones", np.ones((c, 1, 1, 1), np.float32))
    g.remove(node)
    g.make("Conv", [node.input[0], w], [node.output[0]], near=node, origin=m.origin,
           name=f"{node.name}/conv", kernel_shape=[1, 1], strides=[1, 1], dilations=[1, 1],
           group=c, pads=[pads[2], pads[3], pads[6], pads[7]])
    return f"Pad {pads} -> identity depthwise Conv with those pads"
