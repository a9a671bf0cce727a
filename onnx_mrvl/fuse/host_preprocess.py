"""Input preprocessing of a QDQ model on the host: float ops between a model input and its first
QuantizeLinears, computed from the model input (and constants) only: element-wise ops with constants
(``x -> Sub(mean) -> Div(std) -> Q``, normalization exported inside the graph), a normalization of
the input over its features (a LayerNormalization, or its decomposed form: ReduceMean, Pow by a
constant, Sqrt, Reciprocal, binary ops of two such values, with the Q -> DQ pairs onnxruntime's
quantizer put inside it: Llama's first RMSNorm of the float hidden state, a legacy-torch LayerNorm
of a float graph input), constant-shape moves of computed values, and rows picked by constant
indices (a recurrent decoder's ``hidden[:, k]`` per layer, each quantized with its own scale).

onnxruntime computes them in fp32 and quantizes the result; as fp16 layers in the region their
input and output are rounded to fp16 first, which moves codes that lie near a rounding tie of the Q
(googlenet_like, benchmarks/bench_int8_arch.py: 73% of the output identical, 1 step; a Llama block's
first RMSNorm of its float input; a legacy-torch LayerNorm of a float input: 96%). On the host they
are exact and cheap (a pass or two over the input), and the region starts at the Q: its int8 layer
quantizes the host's fp32 result as the real runtime's ``quantize`` of a region input does.
"""
from __future__ import annotations

from typing import Set

from ..graph_index import GraphIndex

OPS = ("Add", "Sub", "Mul", "Div")                   # element-wise, data inputs all carried
NORM_OPS = ("ReduceMean", "Sqrt", "Reciprocal", "Pow", "LayerNormalization")
MOVES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")   # with constant shapes / axes: no arithmetic
# rows picked by constant indices: on the model input itself too (the region cannot quantize the input
# on the host through them, as it does through a Reshape: a GRU decoder's per-layer state hidden[:, k])
SELECTS = ("Gather", "Slice")
REASON = ("input preprocessing of a QDQ model (float ops on a model input before its first "
          "QuantizeLinear): runs on the host in fp32 as onnxruntime computes it (an fp16 layer would "
          "move codes near rounding ties of the QuantizeLinear)")


def _takes(n, data) -> bool:
    """``n`` (with its non-constant inputs ``data``, all carried) is one of the ops taken: an
    element-wise op of one or two carried values, or a norm op whose only data input is its first
    (Pow's exponent, ReduceMean's axes, LayerNormalization's scale / bias constant)."""
    if n.op_type in OPS:
        return len(data) in (1, 2)
    return len(data) == 1 and data[0] == n.input[0]


def _pair_q(g: GraphIndex, n) -> bool:
    """``n`` is the Q of a Q -> DQ pair of constant parameters (its only reader a DQ of the same)."""
    if n.op_type != "QuantizeLinear" or len(n.input) < 2 or not all(g.is_const(i) for i in n.input[1:] if i):
        return False
    readers = g.consumers.get(n.output[0], [])
    return len(readers) == 1 and readers[0].op_type == "DequantizeLinear" and \
        list(readers[0].input[1:]) == list(n.input[1:]) and n.output[0] not in g.output_set


def host_nodes(g: GraphIndex, order) -> Set[str]:
    """Names of the nodes that only carry a model input (with constants) to QuantizeLinear nodes:
    every reader of their output is such a node or a QuantizeLinear. The Q -> DQ pairs onnxruntime's
    quantizer put inside such a computation (a decomposed LayerNorm of a float graph input: its
    variance, ``+ eps``, the normalised value, ``* gamma``, ``+ beta``) and the DequantizeLinears of
    its constants go with it, and so does the pair after a QDQ group it ends with (onnxruntime runs
    ``DQ -> Add -> Q`` as one QLinearAdd: the host's onnxruntime does the same)."""
    carried = set(g.inputs)
    cand, pairs = [], set()
    for n in order:
        if n.domain not in ("", "ai.onnx") or len([o for o in n.output if o]) != 1:
            continue
        if n.op_type == "DequantizeLinear" and all(g.is_const(i) for i in n.input if i):
            cand.append(n)   # a constant's dequantized value (eps, gamma, beta of a QDQ norm)
            pairs.add(n.name)
            carried.add(n.output[0])
            continue
        if n.op_type == "DequantizeLinear" and g.producer.get(n.input[0]) is not None and \
                g.producer[n.input[0]].name in pairs:
            cand.append(n)
            pairs.add(n.name)
            carried.add(n.output[0])
            continue
        if _pair_q(g, n) and n.input[0] in carried and n.input[0] not in g.inputs:
            # (the model input's own pair is the region's: it quantizes the input on the host exactly)
            cand.append(n)
            pairs.add(n.name)
            continue
        if n.op_type not in OPS + NORM_OPS + MOVES + SELECTS:
            continue
        data = [i for i in n.input if i and not g.is_const(i)]
        if n.op_type in MOVES and data and (data[0] in g.inputs or data[0] in _dq_outputs(g, data[0])):
            continue   # a move of the model input or of codes computes nothing: the region takes it
        if data and all(d in carried for d in data) and _takes(n, data) and g.is_float(n.output[0]):
            cand.append(n)
            carried.add(n.output[0])
    keep: Set[str] = set()
    for n in reversed(cand):   # readers before writers
        readers = g.consumers.get(n.output[0], [])
        if not readers or n.output[0] in g.output_set:
            continue
        if n.name in pairs:   # a pair's Q / DQ, a constant's DQ: when everything reading it is the host's
            if all(r.name in keep for r in readers):
                keep.add(n.name)
            continue
        # a norm's statistics only within a whole norm on the host: one that onnxruntime's quantizer
        # quantized on its own (Pow -> ReduceMean -> Q) is a QDQ norm's interior point, which the
        # region imports with the rest of the norm (qdq_layernorm.py)
        inner = n.op_type in NORM_OPS[:-1]
        if all(r.name in keep or (r.op_type == "QuantizeLinear" and not inner) for r in readers):
            keep.add(n.name)
    for n in cand:   # the pair after a kept QDQ group (DQ -> op -> Q), as onnxruntime fuses it
        src = g.producer.get(n.input[0])
        if n.op_type == "QuantizeLinear" and n.name in pairs and src is not None and src.name in keep and \
                any(g.producer.get(i) is not None and g.producer[i].op_type == "DequantizeLinear"
                    for i in src.input if i):
            keep.update({n.name, g.consumers[n.output[0]][0].name})
    changed = True
    while changed:   # closed: a kept node reads model inputs, constants or kept nodes only
        changed = False
        for n in cand:
            if n.name in keep and any(i and not g.is_const(i) and i not in g.inputs and
                                      (g.producer.get(i) is None or g.producer[i].name not in keep)
                                      for i in n.input):
                keep.discard(n.name)
                changed = True
    return keep


def _dq_outputs(g: GraphIndex, t: str) -> Set[str]:
    p = g.producer.get(t)
    return {t} if p is not None and p.op_type == "DequantizeLinear" else set()
