"""``DQ(s, z) -> Transpose -> pool`` -> ``DQ(s, z) -> Transpose -> Q(s, z) -> DQ(s, z) -> pool``: an
identity copy of the DQ's pair after the Transpose, so the pool reads a DequantizeLinear and fuse
makes it an int8 layer.

tf2onnx keeps TFLite's NHWC layout around element-wise ops (MediaPipe's selfie segmenter: ``HardSwish``
on NHWC data between two Transposes) and the squeeze-excite ``AVERAGE_POOL_2D`` reads the NCHW
Transpose; onnxruntime's quantizer puts the pair before that Transpose, and onnxruntime itself moves
the DQ through the Transpose and runs ``QLinearAveragePool`` (int8 codes out). Without the pair here
fuse saw no DQ in front of the pool: an fp16 pool whose mean, rounded to fp16, the next int8 layer
quantized (1 of 96 codes off, amplified by the gates: 0.1% of the selfie mask off by up to 240
codes). Exact: the Transpose moves values of the DQ's grid, which ``Q(s, z)`` maps back to their own
codes.

Rules: a per-tensor DQ of an activation with constant scale / zero point (its other readers keep
reading it); the Transpose's output read by one pool alone (AveragePool, GlobalAveragePool, MaxPool,
GlobalMaxPool)."""
from __future__ import annotations

from typing import Optional

from .base import Match

NAME = "qdq_pool_transpose"
OPS = ("Transpose",)
POOLS = ("AveragePool", "GlobalAveragePool", "MaxPool", "GlobalMaxPool")


def match(node, g) -> Optional[Match]:
    if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx"):
        return None
    dq = g.producer.get(node.input[0])
    if dq is None or dq.op_type != "DequantizeLinear" or g.is_const(dq.input[0]):
        return None
    users = g.users(node.output[0])
    if len(users) != 1 or users[0].op_type not in POOLS or users[0].domain not in ("", "ai.onnx") \
            or node.output[0] in g.outputs:
        return None
    return Match([node], {"dq": dq, "pool": users[0]})


def check(m: Match, g, target) -> Optional[str]:
    dq = m.data["dq"]
    params = [g.const(i) for i in dq.input[1:] if i]
    if any(p is None or p.size != 1 for p in params):
        return "the DequantizeLinear is not per tensor with constant parameters"
    if g.shape(node_out := m.node.output[0]) is None:
        return f"shape of '{node_out}' unknown"
    return None


def rewrite(m: Match, g) -> str:
    node, dq, pool = m.node, m.data["dq"], m.data["pool"]
    t = node.output[0]
    qt, dqt = g.fresh(f"{t}/q"), g.fresh(f"{t}/dq")
    g.make("QuantizeLinear", [t] + list(dq.input[1:]), [qt], near=node, origin=m.origin, name=f"{node.name}/q")
    g.set_shape(qt, g.shape(t), g.dtype(dq.input[0]))
    g.make("DequantizeLinear", [qt] + list(dq.input[1:]), [dqt], near=node, origin=m.origin, name=f"{node.name}/dq")
    g.set_shape(dqt, g.shape(t), g.dtype(t))
    g.set_input(pool, 0, dqt)
    return f"an identity copy of DequantizeLinear {dq.name}'s pair after the Transpose: {pool.op_type} reads a DQ"
