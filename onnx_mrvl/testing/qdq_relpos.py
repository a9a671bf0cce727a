"""A float block with DeBERTa-v2's / SEW-D's content-to-position product: the per-head queries
[H, T, d] times a per-head constant [H, d, 2S] (the projected relative-position embeddings, which
the dynamo export computes from constants through a ``Tile``), for onnxruntime's quantize_static to
quantize the constant as an activation (int8 codes, one scale, a zero point) as it does in the real
exports (tests/test_qdq_batched_const_matmul.py)."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

T, D, H, S2 = 8, 16, 4, 12


def relpos_block(seed: int = 0) -> onnx.ModelProto:
    """x [1, T, D] -> q = x Wq split into H heads [H, T, D / H]; c2p = q x Tile(P, [1, 1, 1]) with P
    a constant [H, D / H, 2S]; Softmax over the last axis; y = that x W2 [2S, D] + x."""
    rng = np.random.default_rng(seed)
    d = D // H
    inits = [nh.from_array((rng.standard_normal((D, D)) / 4).astype(np.float32), "wq"),
             nh.from_array(rng.standard_normal((H, d, S2)).astype(np.float32), "pos"),
             nh.from_array(np.array([1, 1, 1], np.int64), "reps"),
             nh.from_array(np.array([T, H, d], np.int64), "heads"),
             nh.from_array(np.array([1, T, H * S2], np.int64), "merged"),
             nh.from_array((rng.standard_normal((H * S2, D)) / 8).astype(np.float32), "w2")]
    n = helper.make_node
    nodes = [n("MatMul", ["x", "wq"], ["q"], name="q_proj"),
             n("Reshape", ["q", "heads"], ["q_h"], name="q_split"),
             n("Transpose", ["q_h"], ["q_t"], perm=[1, 0, 2], name="q_perm"),
             n("Tile", ["pos", "reps"], ["pos_t"], name="pos_tile"),
             n("MatMul", ["q_t", "pos_t"], ["c2p"], name="c2p"),
             n("Softmax", ["c2p"], ["p"], axis=-1, name="softmax"),
             n("Transpose", ["p"], ["p_t"], perm=[1, 0, 2], name="p_perm"),
             n("Reshape", ["p_t", "merged"], ["p_m"], name="p_merge"),
             n("MatMul", ["p_m", "w2"], ["o"], name="out_proj"), n("Add", ["o", "x"], ["y"], name="residual")]
    g = helper.make_graph(nodes, "relpos_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, D])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, T, D])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def feeds(n: int, seed: int = 1) -> List[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, T, D)).astype(np.float32)} for _ in range(n)]


def shared_projection_block(seed: int = 0) -> onnx.ModelProto:
    """x [1, T, D] -> q = x Wq; pos = R Wq with R a constant [2S, D] (SEW-D / DeBERTa share a
    projection's weights between the hidden states and the relative-position embeddings); scores =
    q pos^T [1, T, 2S], Softmax, that x W2 [2S, D] + x."""
    rng = np.random.default_rng(seed)
    inits = [nh.from_array((rng.standard_normal((D, D)) / 4).astype(np.float32), "wq"),
             nh.from_array(rng.standard_normal((S2, D)).astype(np.float32), "rel"),
             nh.from_array((rng.standard_normal((S2, D)) / 8).astype(np.float32), "w2")]
    n = helper.make_node
    nodes = [n("MatMul", ["x", "wq"], ["q"], name="q_proj"),
             n("MatMul", ["rel", "wq"], ["pos"], name="pos_proj"),
             n("Transpose", ["pos"], ["pos_t"], perm=[1, 0], name="pos_perm"),
             n("MatMul", ["q", "pos_t"], ["c2p"], name="c2p"),
             n("Softmax", ["c2p"], ["p"], axis=-1, name="softmax"),
             n("MatMul", ["p", "w2"], ["o"], name="out_proj"), n("Add", ["o", "x"], ["y"], name="residual")]
    g = helper.make_graph(nodes, "shared_projection",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, D])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, T, D])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m
