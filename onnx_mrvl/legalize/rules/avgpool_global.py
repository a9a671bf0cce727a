"""AveragePool whose window is the whole feature map (no pads), larger than the pool window limit ->
GlobalAveragePool, which gap_split then cuts into windows that fit: ``F.avg_pool2d(x,
x.shape[2:])`` (ARM's DS-CNN keyword spotter, many PyTorch classifiers), Keras' AveragePooling2D over
the map. The same mean. A QDQ pool (``DQ -> AveragePool -> Q``) too: onnxruntime gives the same codes
for the whole-map AveragePool and the GlobalAveragePool (measured: 0 of 76 800 codes differ, int8 and
uint8, 25x5 / 7x7 / 20x20 maps), and gap_split keeps an int8 global pool whole."""
from __future__ import annotations

from typing import Optional

from .base import Match, attr

NAME = "avgpool_global"
OPS = ("AveragePool",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "AveragePool" or node.domain not in ("", "ai.onnx"):
        return None
    sx = g.shape(node.input[0])
    if sx is None or len(sx) < 3:
        return None
    k = attr(node, "kernel_shape")
    if k is None or list(k) != list(sx[2:]):
        return None
    if any(int(p) for p in (attr(node, "pads") or [])) or \
            attr(node, "auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return None
    if any(int(d) != 1 for d in (attr(node, "dilations") or [])):
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    if max(attr(m.node, "kernel_shape")) <= target.max_pool_kernel:
        return "the window fits the pool limit as it is"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    g.remove(node)
    g.make("GlobalAveragePool", [node.input[0]], [node.output[0]], near=node, origin=m.origin, name=node.name)
    return f"AveragePool over the whole {list(attr(node, 'kernel_shape'))} map -> GlobalAveragePool"
