"""com.microsoft ``EmbedLayerNormalization`` (BERT's embeddings fused by onnxruntime's optimizer) ->

    s = Gather(word_embedding, input_ids) + Gather(position_embedding, position_ids or arange(S))
        [+ Gather(segment_embedding, segment_ids)]
    output = LayerNormalization(s, gamma, beta, epsilon)        (embedding_sum: s)
    mask_index = ReduceSum(Cast(mask == 1)) per sequence, int32  (zeros without a mask)

as the CPU kernel computes it. The Gathers of integer ids stay on the CPU; the Adds and the layer
norm are accelerator ops.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import TensorProto

from .base import Match, inp
from .contrib_ops import Writer, float32_check, float_attr, opset_reason, shape_of, used
from .contrib_ops import REPORT_SKIPS, match  # noqa: F401  (the contrib rules' own)

NAME = "contrib_embed"
OPS = ("EmbedLayerNormalization",)


@float32_check
def check(m: Match, g, n) -> Optional[str]:
    ids = shape_of(g, n.input[0])
    if ids is None or len(ids) != 2:
        return f"EmbedLayerNormalization '{n.name}': input_ids '{n.input[0]}' has no static [B, S] shape"
    for idx in (2, 3, 5):
        s = shape_of(g, inp(n, idx))
        if s is None:
            return f"EmbedLayerNormalization '{n.name}': input {idx} '{inp(n, idx)}' has no static shape"
    D = shape_of(g, n.input[2])[1]
    if shape_of(g, n.input[3])[0] < ids[1] and not inp(n, 8):
        return f"EmbedLayerNormalization '{n.name}': {ids[1]} positions but a position table of " \
               f"{shape_of(g, n.input[3])[0]} rows"
    if inp(n, 4) and not inp(n, 1):
        return f"EmbedLayerNormalization '{n.name}': a segment table without segment_ids"
    why = opset_reason(g)
    if why:
        return f"EmbedLayerNormalization '{n.name}' needs LayerNormalization (opset 17): {why}"
    m.data.update(B=ids[0], S=ids[1], D=D)
    return None


def rewrite(m: Match, g) -> str:
    n, d = m.node, m.data
    w = Writer(g, n, m.origin)
    B, S, D = d["B"], d["S"], d["D"]
    eps = float_attr(n, "epsilon", 1e-12)
    outs = list(n.output) + ["", "", ""]
    want_index, want_sum = used(g, n, 1), used(g, n, 2)
    g.remove(n)
    shape = [B, S, D]
    s = w.op("Gather", [n.input[2], n.input[0]], shape, tag="word", axis=0)
    if inp(n, 8):
        pshape = list(shape_of(g, inp(n, 8))) + [D]
        pos = w.op("Gather", [n.input[3], inp(n, 8)], pshape, tag="position", axis=0)
    else:
        pos = w.const("position_rows", g.const(n.input[3])[:S][None]) if g.const(n.input[3]) is not None else \
            w.op("Gather", [n.input[3], w.const("positions", np.arange(S).reshape(1, S), np.int64)], [1, S, D],
                 tag="position", axis=0)
    s = w.op("Add", [s, pos], shape, tag="add_position",
             out=outs[2] if want_sum and not inp(n, 1) else None)
    if inp(n, 1):
        seg = w.op("Gather", [n.input[4], n.input[1]], shape, tag="segment", axis=0)
        s = w.op("Add", [s, seg], shape, tag="add_segment", out=outs[2] if want_sum else None)
    w.layer_norm(s, shape, n.input[5], n.input[6], eps, out=outs[0])
    if want_index:
        if inp(n, 7):
            one = w.op("Equal", [inp(n, 7), w.const("one", 1, np.int32)], [B, S], tag="mask_is_one",
                       dtype=TensorProto.BOOL)
            cnt = w.op("Cast", [one], [B, S], tag="mask_int", dtype=TensorProto.INT32, to=TensorProto.INT32)
            w.op("ReduceSum", [cnt, w.const("axes", [1], np.int64)], [B], tag="mask_index", keepdims=0,
                 dtype=TensorProto.INT32, out=outs[1])
        else:
            w.op("Identity", [w.const("zeros", np.zeros(B, np.int32), np.int32)], [B], tag="mask_index",
                 dtype=TensorProto.INT32, out=outs[1])
    return "EmbedLayerNormalization -> Gathers + Adds + LayerNormalization" + (" + mask count" if want_index else "")
