"""QDQ models of PyTorch dynamo-style exports (onnxruntime's quantize_static of seeded graphs shaped
as torch.onnx writes them), against onnxruntime's run of the same QDQ model:
- a constant the exporter shares between layers (one ``sqrt(1/sqrt(d))`` for q and k, a bias of a
  cloned layer) gets one DequantizeLinear read by several QDQ layers: legalize's ``qdq_unique_dq``
  gives each its own (onnxruntime's EnsureUniqueDQForNodeUnit); it stayed on the CPU and its float
  values became region inputs;
- nn.MultiheadAttention's sequence-first packed projection: its 4-D [T, 1, 3, E] tensors between
  Q/DQ pairs are rows, not T images, in a model of batch 1 (a cut per attention layer: 'batch T
  exceeds the accelerator's limit of 8')."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing import int8_zoo, qdq_variants

pytest.importorskip("onnxruntime.quantization")
F = TensorProto.FLOAT
T, E = 12, 16


def _init(rng, name, shape, scale=0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def shared_constant_model() -> onnx.ModelProto:
    """x [1, T, E] -> two MatMuls, each times the same constant c, added; the sum times c again."""
    rng = np.random.default_rng(7)
    inits = [_init(rng, "w1", (E, E)), _init(rng, "w2", (E, E)),
             numpy_helper.from_array(np.full([E], 0.42, np.float32), "c")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"], name="fc1"), helper.make_node("Mul", ["a", "c"], ["ac"], name="mul1"),
             helper.make_node("MatMul", ["x", "w2"], ["b"], name="fc2"), helper.make_node("Mul", ["b", "c"], ["bc"], name="mul2"),
             helper.make_node("Add", ["ac", "bc"], ["s"], name="add"), helper.make_node("Mul", ["s", "c"], ["y"], name="mul3")]
    return helper.make_model(helper.make_graph(nodes, "shared_constant", [helper.make_tensor_value_info("x", F, [1, T, E])],
                                               [helper.make_tensor_value_info("y", F, [1, T, E])], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def packed_projection_model() -> onnx.ModelProto:
    """x [1, T, E] -> Transpose [T, 1, E] -> in_proj -> Reshape [T, 1, 3, E] -> Unsqueeze(0) ->
    Transpose(3, 1, 2, 0, 4) -> Squeeze(3) -> Gather q / k / v -> q * k + v -> out_proj."""
    rng = np.random.default_rng(8)
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)   # noqa: E731
    inits = [_init(rng, "w_in", (E, 3 * E)), _init(rng, "b_in", (3 * E,), 0.1), _init(rng, "w_out", (E, E)),
             i64("s4", [T, 1, 3, E]), i64("ax0", [0]), i64("ax3", [3]), i64("i0", 0), i64("i1", 1), i64("i2", 2)]
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
             helper.make_node("MatMul", ["xt", "w_in"], ["p0"]), helper.make_node("Add", ["p0", "b_in"], ["p"]),
             helper.make_node("Reshape", ["p", "s4"], ["p4"]), helper.make_node("Unsqueeze", ["p4", "ax0"], ["p5"]),
             helper.make_node("Transpose", ["p5"], ["pt"], perm=[3, 1, 2, 0, 4]),
             helper.make_node("Squeeze", ["pt", "ax3"], ["qkv"])]
    nodes += [helper.make_node("Gather", ["qkv", f"i{k}"], [t], axis=0) for k, t in enumerate("qkv")]
    nodes += [helper.make_node("Mul", ["q", "k"], ["qk"]), helper.make_node("Add", ["qk", "v"], ["h"]),
              helper.make_node("MatMul", ["h", "w_out"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "packed_projection", [helper.make_tensor_value_info("x", F, [1, T, E])],
                                               [helper.make_tensor_value_info("y", F, [T, 1, E])], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def sequence_first_rotary_model() -> onnx.ModelProto:
    """wav2vec2-Conformer's rotary embedding on sequence-first heads: x [1, T, E] -> MatMul ->
    Reshape [1, T, H, d] -> Transpose [T, 1, H, d] -> t * cos + rotate_half(t) * sin, rotate_half =
    Concat(-t[..., d/2:], t[..., :d/2]) (two Slices on the last axis of a 4-D tensor leading with T)."""
    rng = np.random.default_rng(9)
    H, d = 2, E // 2
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)   # noqa: E731
    ang = np.arange(T, dtype=np.float32)[:, None] * (0.1 + np.arange(d, dtype=np.float32)[None] / d)
    inits = [_init(rng, "w", (E, E)), i64("s4", [1, T, H, d]), i64("a3", [3]), i64("z", [0]), i64("h", [d // 2]),
             i64("e", [d]), numpy_helper.from_array(np.cos(ang).reshape(T, 1, 1, d), "cos"),
             numpy_helper.from_array(np.sin(ang).reshape(T, 1, 1, d), "sin")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Reshape", ["p", "s4"], ["p4"]),
             helper.make_node("Transpose", ["p4"], ["t"], perm=[1, 0, 2, 3]),
             helper.make_node("Slice", ["t", "z", "h", "a3"], ["t1"]), helper.make_node("Slice", ["t", "h", "e", "a3"], ["t2"]),
             helper.make_node("Neg", ["t2"], ["n2"]), helper.make_node("Concat", ["n2", "t1"], ["rot"], axis=3),
             helper.make_node("Mul", ["t", "cos"], ["tc"]), helper.make_node("Mul", ["rot", "sin"], ["rs"]),
             helper.make_node("Add", ["tc", "rs"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "rotary", [helper.make_tensor_value_info("x", F, [1, T, E])],
                                               [helper.make_tensor_value_info("y", F, [T, 1, H, d])], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def _quantized(model, tmp_path, act):
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / f"q_{act}.onnx")
    onnx.save(model, src)
    int8_zoo.quantize_static_qdq(src, dst, [qdq_variants.feeds_for(model, k) for k in range(4)], act=act)
    return onnx.load(dst)


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_shared_constant_dequantize_is_unique_per_layer(tmp_path, act):
    q = _quantized(shared_constant_model(), tmp_path, act)
    c_dq = [n for n in q.graph.node if n.op_type == "DequantizeLinear" and
            sum(n.output[0] in m.input for m in q.graph.node) > 1 and all(i in {t.name for t in q.graph.initializer} for i in n.input)]
    assert c_dq, "the quantizer no longer shares the constant's DequantizeLinear: the test lost its point"
    log = legalize(q).log
    assert any(rule == "qdq_unique_dq" for rule, _, _ in log)
    r = qdq_variants.convert_and_compare(f"shared_{act}", str(tmp_path), model=q)
    assert r["regions"] == 1 and r["cpu"] == {}, r["cpu"]
    assert r["identical"] == 1.0 and r["steps"] == 0, r


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_sequence_first_tensors_of_a_one_image_model(tmp_path, act):
    q = _quantized(packed_projection_model(), tmp_path, act)
    r = qdq_variants.convert_and_compare(f"packed_{act}", str(tmp_path), model=q)
    assert r["regions"] == 1 and r["cpu"] == {}, r["cpu"]
    assert r["steps"] <= 1.001, r
    cpu = [d for d in r["result"].report.cpu_nodes()]
    assert not cpu, [(d.node, d.reason) for d in cpu]


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_slices_of_sequence_first_heads_are_rows(tmp_path, act):
    """rotate_half's Slices on the last axis of [T, 1, H, d] (T > the image batch limit) between Q/DQ
    pairs: rows of a one-image model, sliced on the accelerator (fuse/slices_nd.py); they stayed on
    the CPU ('batch T exceeds the accelerator's limit of 8', 3 regions in wav2vec2-Conformer)."""
    q = _quantized(sequence_first_rotary_model(), tmp_path, act)
    assert sum(n.op_type == "Slice" for n in q.graph.node) == 2
    r = qdq_variants.convert_and_compare(f"rotary_{act}", str(tmp_path), model=q)
    assert r["regions"] == 1 and r["cpu"] == {}, r["cpu"]
    assert r["identical"] >= 0.99 and r["steps"] <= 1.001, r


def _quantize_file(model, tmp_path, name, act="s8"):
    src, dst = str(tmp_path / f"{name}.onnx"), str(tmp_path / f"{name}_{act}.onnx")
    onnx.save(model, src)
    int8_zoo.quantize_static_qdq(src, dst, [qdq_variants.feeds_for(model, k) for k in range(4)], act=act)
    return onnx.load(dst)


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_safe_softmax_guard_on_dequantized_codes(tmp_path, act):
    """torch's _safe_softmax guard in a QDQ model reads the Softmax's Q -> DQ: Where(IsNaN(DQ(q)), 0,
    DQ(q)) passes the codes through (DQ of an int8 code is never NaN): legalize's nan_guard_dq removes
    it (IsNaN / Where on the CPU cut the block after every Softmax)."""
    from onnx_mrvl.testing import arch_attention as A
    q = _quantize_file(A.mha_block("legacy", "const", "safe"), tmp_path, "safe", act)
    assert any(n.op_type == "IsNaN" for n in q.graph.node)
    assert any(rule == "nan_guard_dq" for rule, _, _ in legalize(q).log)
    r = qdq_variants.convert_and_compare(f"safe_{act}", str(tmp_path), model=q)
    assert r["regions"] == 1 and not {"IsNaN", "Where", "Softmax"} & set(r["cpu"]), r["cpu"]
    assert r["steps"] <= 1.001, r


def long_kernel_conv1d() -> onnx.ModelProto:
    """wav2vec2's positional conv: Conv1d(16, 16, k 16, pad 8, groups 4) whose bias the exporter
    shares with an Add elsewhere (zero-initialised biases deduplicated) -> Slice (drop the last
    frame) -> Relu, + that Add."""
    rng = np.random.default_rng(9)
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)   # noqa: E731
    inits = [_init(rng, "w", (16, 4, 16), 0.2), numpy_helper.from_array(np.full(16, 0.05, np.float32), "b"),
             i64("s0", [0]), i64("s1", [40]), i64("ax", [2])]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="pos_conv", kernel_shape=[16], pads=[8, 8], group=4),
             helper.make_node("Slice", ["c", "s0", "s1", "ax"], ["cs"]), helper.make_node("Relu", ["cs"], ["r"]),
             helper.make_node("Transpose", ["r"], ["rt"], perm=[0, 2, 1]), helper.make_node("Add", ["rt", "b"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "posconv", [helper.make_tensor_value_info("x", F, [1, 16, 40])],
                                               [helper.make_tensor_value_info("y", F, [1, 40, 16])], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_long_grouped_conv1d_with_a_shared_bias(tmp_path, act):
    """The bias onnxruntime's quantizer wrote as int8 codes (it is an Add's operand too) makes the
    Conv a float Conv between DQ and Q in onnxruntime: the int8 layer follows that float path with the
    bias dequantized as stored; its kernel tiles address shifted windows, no per-pass padding (pad 8
    was refused: 'padding exceeds the limit 7'). One region, within one output step of onnxruntime."""
    q = _quantize_file(long_kernel_conv1d(), tmp_path, "posconv", act)
    conv_node = next(n for n in q.graph.node if n.name == "pos_conv")
    bias_dq = next(n for n in q.graph.node if n.output[0] == conv_node.input[2])
    codes = next(t for t in q.graph.initializer if t.name == bias_dq.input[0])
    assert codes.data_type != TensorProto.INT32, "the bias is int32 now: the test lost its point"
    r = qdq_variants.convert_and_compare(f"posconv_{act}", str(tmp_path), model=q)
    conv = r["result"].report.decisions["pos_conv"]
    assert conv.placement == "accelerator" and conv.precision == "int8", conv.reason
    assert r["regions"] == 1, r["cpu"]
    assert r["steps"] <= 1.001, r


def pooled_head_model() -> onnx.ModelProto:
    """Conv -> Relu -> ReduceMean(axes 2, 3, keepdims) -> Reshape [1, C] -> Gemm: the dynamo
    exporter's AdaptiveAvgPool2d(1) + flatten + Linear on a 24 x 24 map (a pool above the per-layer
    window: gap_split would chain AveragePools)."""
    rng = np.random.default_rng(12)
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)   # noqa: E731
    inits = [_init(rng, "w", (16, 3, 3, 3), 0.4), _init(rng, "fc", (10, 16), 0.3), _init(rng, "fcb", (10,), 0.1),
             i64("axes", [2, 3]), i64("flat", [1, 16])]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("ReduceMean", ["r", "axes"], ["m"], name="mean", keepdims=1),
             helper.make_node("Reshape", ["m", "flat"], ["v"], name="view"),
             helper.make_node("Gemm", ["v", "fc", "fcb"], ["y"], name="head", transB=1)]
    return helper.make_model(helper.make_graph(nodes, "pooled_head", [helper.make_tensor_value_info("x", F, [1, 3, 24, 24])],
                                               [helper.make_tensor_value_info("y", F, [1, 10])], inits),
                             opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_pool_read_through_a_flatten_is_int8(tmp_path, act):
    """onnxruntime's quantizer quantizes the flatten's output, not the pool's: legalize's qdq_pool_move
    puts that Q -> DQ in front of the flatten (Q commutes with a reshape), so the pool is one int8
    layer as onnxruntime's fp32 ReduceMean + Q computes it (it was an fp16 chain of AveragePools:
    83% of a dynamo MobileNetV3's outputs identical)."""
    q = _quantize_file(pooled_head_model(), tmp_path, "pooled", act)
    assert not any(n.op_type == "QuantizeLinear" and n.input[0] == "m" for n in q.graph.node)
    assert any(rule == "qdq_pool_move" for rule, _, _ in legalize(q).log)
    r = qdq_variants.convert_and_compare(f"pooled_{act}", str(tmp_path), model=q)
    assert r["regions"] == 1 and r["cpu"] == {}, r["cpu"]
    assert r["identical"] == 1.0 and r["steps"] == 0, r
    assert r["result"].report.decisions["mean"].precision == "int8", r["result"].report.decisions["mean"].reason
