"""Conv / MaxPool / AveragePool get explicit kernel_shape, strides, dilations and pads
(auto_pad SAME_UPPER / SAME_LOWER / VALID resolved against the static input shape); an empty
optional bias input is dropped."""
from __future__ import annotations

from typing import Optional

from .base import Match, attr, inp
from ..graph import del_attr, set_attr

NAME = "conv_attrs"
OPS = ("Conv", "MaxPool", "AveragePool")


def match(node, g) -> Optional[Match]:
    if node.op_type not in OPS or node.domain not in ("", "ai.onnx"):
        return None
    auto = attr(node, "auto_pad", "NOTSET")
    names = ["kernel_shape", "strides", "pads"] + (["dilations"] if node.op_type == "Conv" else [])
    missing = [n for n in names if attr(node, n) is None]
    empty_bias = node.op_type == "Conv" and len(node.input) == 3 and not node.input[2]
    if auto == "NOTSET" and not missing and not empty_bias:
        return None
    return Match([node], {"auto": auto})


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    sx = g.shape(node.input[0])
    if sx is None:
        return "input shape is not static"
    if node.op_type == "Conv":
        sw = g.shape(node.input[1])
        if sw is None:
            return "weight shape is unknown"
        kernel = list(attr(node, "kernel_shape") or sw[2:])
    else:
        kernel = list(attr(node, "kernel_shape"))
    r = len(sx) - 2
    strides = list(attr(node, "strides") or [1] * r)
    dil = list(attr(node, "dilations") or [1] * r)
    pads = list(attr(node, "pads") or [0] * (2 * r))
    auto = m.data["auto"]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * r)
        for k in range(r):
            out = -(-sx[2 + k] // strides[k])
            total = max(0, (out - 1) * strides[k] + (kernel[k] - 1) * dil[k] + 1 - sx[2 + k])
            small = total // 2
            pads[k], pads[k + r] = (small, total - small) if auto == "SAME_UPPER" else \
                (total - small, small)
    elif auto == "VALID":
        pads = [0] * (2 * r)
    m.data.update(kernel=kernel, strides=strides, dil=dil, pads=pads)
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    del_attr(node, "auto_pad")
    set_attr(node, "kernel_shape", m.data["kernel"])
    set_attr(node, "strides", m.data["strides"])
    set_attr(node, "pads", m.data["pads"])
    if node.op_type == "Conv" or attr(node, "dilations") is not None:
        set_attr(node, "dilations", m.data["dil"])
    if node.op_type == "Conv" and len(node.input) == 3 and not inp(node, 2):
        g.trim_inputs(node, 2)
    g.changed = True
    return f"explicit attributes (auto_pad {m.data['auto']} -> pads {m.data['pads']})"
