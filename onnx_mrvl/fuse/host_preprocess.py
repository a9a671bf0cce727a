"""Input preprocessing of a QDQ model on the host: element-wise ops with constants between a model
input and its first QuantizeLinear (``x -> Sub(mean) -> Div(std) -> Q``, normalization exported
inside the graph).

onnxruntime computes them in fp32 and quantizes the result; as fp16 layers in the region their
output is rounded to fp16 first, which moves codes that lie near a rounding tie of the Q
(googlenet_like, benchmarks/bench_int8_arch.py: 73% of the output identical, 1 step). On the host
they are exact and cheap (one pass over the input), and the region starts at the Q: its int8 layer
quantizes the host's fp32 result as the real runtime's ``quantize`` of a region input does.
"""
from __future__ import annotations

from typing import Set

from ..graph_index import GraphIndex

OPS = ("Add", "Sub", "Mul", "Div")
REASON = ("input preprocessing of a QDQ model (element-wise ops on a model input before its first "
          "QuantizeLinear): runs on the host in fp32 as onnxruntime computes it (an fp16 layer would "
          "move codes near rounding ties of the QuantizeLinear)")


def host_nodes(g: GraphIndex, order) -> Set[str]:
    """Names of the element-wise nodes that only carry a model input (with constants) to
    QuantizeLinear nodes: every reader of their output is such a node or a QuantizeLinear."""
    carried = set(g.inputs)
    cand = []
    for n in order:
        if n.op_type not in OPS or n.domain not in ("", "ai.onnx") or len(n.output) != 1:
            continue
        data = [i for i in n.input if i and not g.is_const(i)]
        if len(data) == 1 and data[0] in carried and g.is_float(n.output[0]):
            cand.append(n)
            carried.add(n.output[0])
    keep: Set[str] = set()
    for n in reversed(cand):   # readers before writers
        readers = g.consumers.get(n.output[0], [])
        if readers and n.output[0] not in g.output_set and \
                all(r.op_type == "QuantizeLinear" or r.name in keep for r in readers):
            keep.add(n.name)
    return keep
