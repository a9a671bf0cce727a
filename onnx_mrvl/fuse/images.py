"""Which 4-D tensors are images (stored NHWC, the layout of the spatial ops) and which are not.

Tensors are joined into one *storage component* by every op that runs on its operands in a shared
storage order and writes its output in that order too: the order-agnostic Mrvl ops (Sum2D, Mul2D,
Concat, Slice2D, Softmax, LayerNorm), relabelling Transposes, and the CPU ops that compute the same
on permuted data (``layout.LAYOUT_FREE_CPU_OPS``). A component that holds an input or output of a
spatial op (Conv2D, pools, Resize) is an image component: its 4-D tensors are NHWC on a tie, as
before. Any other 4-D tensor is "ND" (attention scores [B, H, T, T] from a BatchMatMul, a mask, a
4-D view of tokens): nothing wants it NHWC, so the ops on it keep the storage their operands were
written in, and no LayoutTransform moves it.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Set

import onnx

from ..graph_index import GraphIndex
from .patterns import Group

LINKING_OPS = ("Sum2D", "Mul2D", "Concat", "Slice2D", "Softmax", "LayerNorm", "Requantize")


class _Components:
    def __init__(self):
        self.parent: Dict[str, str] = {}

    def find(self, t: str) -> str:
        self.parent.setdefault(t, t)
        while self.parent[t] != t:
            self.parent[t] = self.parent[self.parent[t]]
            t = self.parent[t]
        return t

    def join(self, tensors: Iterable[str]) -> None:
        roots = [self.find(t) for t in tensors if t]
        for r in roots[1:]:
            self.parent[r] = roots[0]


def non_image_tensors(g: GraphIndex, groups: List[Group], aliases: Set[str], order: List[onnx.NodeProto],
                      layout_free_cpu_ops: Iterable[str], spatial: Iterable[str]) -> Set[str]:
    """The tensors of storage components that touch no spatial op (see the module docstring)."""
    comp = _Components()
    spatial, free = set(spatial), set(layout_free_cpu_ops)
    grouped = {n.name for grp in groups for n in grp.nodes}
    image_seeds: List[str] = []
    for grp in groups:
        if grp.op in LINKING_OPS:
            comp.join(list(grp.inputs) + [grp.output])
        elif grp.op in spatial:
            image_seeds += [grp.inputs[0], grp.output]
    for n in order:
        if n.name in grouped:
            continue
        if n.name in aliases or (n.op_type in free and n.input and n.input[0]):
            comp.join([n.input[0]] + [o for o in n.output if o])
    image_roots = {comp.find(t) for t in image_seeds if t}
    tensors = {t for n in order for t in list(n.input) + list(n.output) if t} | set(comp.parent)
    return {t for t in tensors if comp.find(t) not in image_roots}
