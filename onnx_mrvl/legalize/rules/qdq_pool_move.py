"""``DQ -> pool -> Reshape / Flatten / Squeeze -> Q`` -> ``DQ -> pool -> Q -> DQ -> Reshape -> Q``
(the Q's scale and zero point, a copy in front of the move); also through a chain of up to four
layout ops (Reshape / Flatten / Squeeze / Unsqueeze / Transpose: dynamo's ConvNeXt head writes
``ReduceMean -> Reshape -> Gather (as_strided, a Reshape after legalize) -> Transpose -> Q``) when
the Q is per tensor.

A classifier head exported by PyTorch's dynamo exporter reads its global pool through a flatten:
``ReduceMean(keepdims) -> Reshape [N, C] -> Gemm``; onnxruntime's quantizer quantizes the Reshape's
output, not the pool's, and runs ``DQ -> ReduceMean -> Reshape -> Q`` in fp32. The move commutes with
the element-wise Q (``Q(reshape(p)) = reshape(Q(p))``), so the pair in front quantizes the pool's
fp32 result exactly as the Q after the move did, and the Q after the move re-quantizes values on its
own grid (a no-op). The pool then is an int8 layer instead of an fp16 one (or a chain of fp16
AveragePools from ``gap_split``) whose rounding moved codes near ties: its int32 sum and one
requantization where onnxruntime fuses the group (QLinearGlobalAveragePool), else (a ReduceMean,
which onnxruntime runs in float) the fp32 mean and QuantizeLinear (fuse's ``requant`` float).

One element-wise activation may sit between the DQ and the pool (dynamo's MobileNetV3 head:
``DQ -> HardSwish -> ReduceMean -> Reshape -> Q``, the HardSwish output not quantized): onnxruntime
runs it in float too, and fuse folds it into the float pool (``in_activation``)."""
from __future__ import annotations

from typing import Optional

from .base import Match

NAME = "qdq_pool_move"
OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")
POOLS = ("GlobalAveragePool", "GlobalMaxPool", "AveragePool", "MaxPool", "ReduceMean", "ReduceMax")
PRE_ACTIVATIONS = ("Relu", "HardSigmoid", "HardSwish")   # fuse: the float pool's in_activation


def pool_input_dq(g, pool):
    """The DequantizeLinear (of an activation) in front of ``pool``, directly or (a mean: a ReduceMean,
    or the GlobalAveragePool reducemean_to_gap made of it) through one element-wise activation read
    by the pool alone; None otherwise."""
    dq = g.producer.get(pool.input[0])
    act = dq is not None and dq.op_type in PRE_ACTIVATIONS and dq.domain in ("", "ai.onnx")
    if act and pool.op_type in ("ReduceMean", "GlobalAveragePool") and len(g.users(dq.output[0])) == 1 \
            and dq.output[0] not in g.outputs:
        dq = g.producer.get(dq.input[0])
    if dq is None or dq.op_type != "DequantizeLinear" or g.is_const(dq.input[0]):
        return None
    return dq


def match(node, g) -> Optional[Match]:
    if node.op_type not in OPS + ("Transpose",) or node.domain not in ("", "ai.onnx") or not node.input:
        return None
    pool = g.producer.get(node.input[0])
    if pool is None or pool.op_type not in POOLS or pool.domain not in ("", "ai.onnx") or len(pool.output) != 1:
        return None
    if pool_input_dq(g, pool) is None:
        return None
    if len(g.users(pool.output[0])) != 1 or pool.output[0] in g.outputs:
        return None
    chain, cur = [node], node
    while True:   # layout ops between the pool and its Q (dynamo: Reshape, Gather -> Reshape, Transpose)
        readers = g.users(cur.output[0])
        if len(readers) != 1 or cur.output[0] in g.outputs:
            return None
        r = readers[0]
        if r.op_type == "QuantizeLinear":
            return Match([node], {"pool": pool, "q": r, "chain": chain})
        if r.op_type not in OPS + ("Transpose",) or r.domain not in ("", "ai.onnx") or len(chain) >= 4:
            return None
        chain.append(r)
        cur = r


def check(m: Match, g, target) -> Optional[str]:
    q = m.data["q"]
    if any(i and not g.is_const(i) for i in q.input[1:]):
        return "the QuantizeLinear's scale / zero point are not constants"
    if g.shape(m.data["pool"].output[0]) is None:
        return "the pool's output shape is not static"
    sc = g.const(q.input[1])
    if (len(m.data["chain"]) > 1 or m.data["chain"][0].op_type == "Transpose") and (sc is None or sc.size != 1):
        return "a per-channel QuantizeLinear after a chain of layout ops (its axis would move)"
    return None


def rewrite(m: Match, g) -> str:
    node, pool, q = m.node, m.data["pool"], m.data["q"]
    t = pool.output[0]
    qt, dqt = g.fresh(f"{t}/q"), g.fresh(f"{t}/dq")
    attrs = {a.name: a for a in q.attribute}
    new_q = g.make("QuantizeLinear", [t] + list(q.input[1:]), [qt], near=node, origin=m.origin,
                   name=f"{q.name}/before_{node.op_type.lower()}")
    new_q.attribute.extend(attrs.values())
    g.set_shape(qt, g.shape(t), g.dtype(q.output[0]))
    new_dq = g.make("DequantizeLinear", [qt] + list(q.input[1:]), [dqt], near=node, origin=m.origin,
                    name=f"{q.name}/before_{node.op_type.lower()}_dq")
    new_dq.attribute.extend(a for a in attrs.values() if a.name == "axis")
    g.set_shape(dqt, g.shape(t), g.dtype(t))
    g.set_input(node, 0, dqt)
    return f"the Q after {node.op_type} also in front of it: {pool.op_type} between DQ and Q"
