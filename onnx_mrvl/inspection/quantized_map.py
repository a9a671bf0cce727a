"""Which tensor of the fp32 original a layer of a converted *quantized* model computes.

compare maps a layer onto the output of the last node of A (the reference) among the layer's
original node names. Comparing an int8 model with the fp32 model it was quantized from, those
names are the quantized model's, and onnxruntime's quantizer renamed and removed nodes:

- QOperator: the QLinear op of node ``n`` is named ``n_quant`` -> ``n``;
- a Relu / Clip after a Conv / Gemm is folded into the output quantization (its node is gone):
  QDQ names the Q of float tensor ``t`` ``t_QuantizeLinear`` -> tensor ``t`` when A writes it later;
  otherwise an activation of A that is the single reader of the mapped tensor and that B knows
  nothing of (no node or origin of that name) -> its output.

A float model converted to fp16 keeps its node names: none of this applies there.
"""
from __future__ import annotations

from typing import Collection, List, Mapping, Sequence

import onnx

FOLDED_ACTIVATIONS = ("Relu", "Clip", "LeakyRelu")


def positions(by_origin: Mapping[str, List[int]], name: str) -> List[int]:
    """A's node positions for an original node name (``n_quant`` -> ``n`` when A has no ``n_quant``)."""
    if name in by_origin or not name.endswith("_quant"):
        return by_origin.get(name, [])
    return by_origin.get(name[: -len("_quant")], [])


def layer_tensor(origin: Sequence[str], mapped: str, after: int, prod_pos: Mapping[str, int],
                 a_users: Mapping[str, List[onnx.NodeProto]], b_names: Collection[str]) -> str:
    """The tensor of A the layer computes, starting from ``mapped`` (the output of A's node at
    position ``after``)."""
    best, best_pos = mapped, prod_pos.get(mapped, after)
    for o in origin:
        if o.endswith("_QuantizeLinear"):
            t = o[: -len("_QuantizeLinear")]
            if prod_pos.get(t, -1) > best_pos:
                best, best_pos = t, prod_pos[t]
    if best != mapped:
        return best
    while True:
        users = a_users.get(best, [])
        if len(users) != 1 or users[0].op_type not in FOLDED_ACTIVATIONS or users[0].name in b_names \
                or not users[0].output:
            return best
        best = users[0].output[0]
