"""``Split(Concat(x_1 .. x_n, axis=a), axis=a)`` whose pieces are the Concat's parts -> the parts.

``torch.stack(xs).sum(0)`` (segmentation_models_pytorch's FPN merge block, any "stack then reduce" of
same-shaped maps) exports as ``Unsqueeze(0)`` of each map, a Concat on the new leading axis and a
ReduceSum over it; ``reduce_sum_split`` turns the sum into a Split + Adds, which leaves a Concat on
the batch axis (a CPU op between two regions) feeding a Split that cuts it back into its parts.
Reading the parts directly is exact (no value changes). Refused: another axis, pieces that are not
the parts in order, unknown shapes, a Split output that is a graph output."""
from __future__ import annotations

from typing import Optional

from .base import Match

NAME = "split_of_concat"
OPS = ("Split",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Split" or node.domain not in ("", "ai.onnx"):
        return None
    c = g.producer.get(node.input[0])
    if c is None or c.op_type != "Concat" or c.domain not in ("", "ai.onnx"):
        return None
    return Match([node, c])


def _axis(node, rank: int) -> int:
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    return axis % rank


def check(m: Match, g, target) -> Optional[str]:
    split, concat = m.nodes
    shapes_in = [g.shape(i) for i in concat.input]
    shapes_out = [g.shape(o) for o in split.output]
    if any(s is None for s in shapes_in + shapes_out):
        return "a shape is unknown"
    rank = len(shapes_in[0])
    if _axis(split, rank) != _axis(concat, rank):
        return "the Split and the Concat use different axes"
    if [tuple(s) for s in shapes_in] != [tuple(s) for s in shapes_out]:
        return "the Split's pieces are not the Concat's parts"
    if any(o in g.pinned for o in split.output) or any(not i for i in concat.input):
        return "a piece is a graph output"
    return None


def rewrite(m: Match, g) -> str:
    split, concat = m.nodes
    for part, piece in zip(concat.input, split.output):
        g.replace_uses(piece, part)
    g.remove(split)
    if not g.users(concat.output[0]) and concat.output[0] not in g.pinned:
        g.remove(concat)
    return f"{len(split.output)} pieces read from the Concat's parts"
