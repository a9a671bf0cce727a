"""OCR / audio / transformer architectures as real exporters write them (onnx_mrvl/testing/arch_ocr_audio.py),
plus small edge models for the rules they needed: every model converts under "max" and "single",
runs through onnx_mrvl.InferenceSession and matches onnxruntime on the original within fp16 error."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_mrvl.testing import arch_ocr_audio
import onnx_mrvl
from onnx_mrvl.testing.randomize_weights import random_inputs

STRATEGIES = ("max", "single")


def _conv_model(x_shape, w_shape, opset=13, **attrs):
    """Input -> Conv (seeded weights + bias) -> Relu; 1-D or 2-D."""
    rng = np.random.default_rng(1)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    b = (rng.standard_normal(w_shape[0]) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", **attrs),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def _transpose_mean(keepdims):
    """tf2onnx: NCHW conv output -> Transpose to NHWC -> ReduceMean over axes 1,2."""
    m = _conv_model([1, 3, 12, 10], [8, 3, 3, 3], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    g = m.graph
    g.node.extend([helper.make_node("Transpose", ["y"], ["t"], name="to_nhwc", perm=[0, 2, 3, 1]),
                   helper.make_node("ReduceMean", ["t"], ["mean"], name="mean", axes=[1, 2],
                                    keepdims=keepdims)])
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("mean", TensorProto.FLOAT, None))
    return onnx.shape_inference.infer_shapes(m)


EDGE = {   # name -> (builder, expected convs offloaded)
    # wav2vec2 / SincNet-style front ends: stride above the accelerator's limit 8 (space-to-depth)
    "conv1d_k400_s160": lambda: _conv_model([1, 1, 3200], [8, 1, 400], kernel_shape=[400], strides=[160],
                                            pads=[200, 200]),
    "conv1d_k10_s9_cut": lambda: _conv_model([1, 2, 1000], [4, 2, 10], kernel_shape=[10], strides=[9],
                                             pads=[0, 0]),
    "patch_embed_16": lambda: _conv_model([1, 3, 64, 48], [16, 3, 16, 16], kernel_shape=[16, 16],
                                          strides=[16, 16], pads=[0, 0, 0, 0]),
    "conv2d_one_axis_s12": lambda: _conv_model([1, 4, 20, 48], [8, 4, 3, 12], kernel_shape=[3, 12],
                                               strides=[2, 12], pads=[1, 3, 1, 2], dilations=[2, 1]),
    "conv2d_one_axis_s12_cut": lambda: _conv_model([1, 4, 20, 50], [8, 4, 3, 12], kernel_shape=[3, 12],
                                                   strides=[2, 12], pads=[1, 3, 1, 2], dilations=[2, 1]),
    "mean_nhwc_keepdims0": lambda: _transpose_mean(0),
    "mean_nhwc_keepdims1": lambda: _transpose_mean(1),
}
# The first op legitimately stays on the CPU (a Slice cutting unread samples, the 6-D Transpose of a
# 2-D space-to-depth), so partition="single" (the region fed by the model inputs) offloads nothing.
FRONT_ON_CPU = {"conv1d_k10_s9_cut", "conv2d_one_axis_s12", "conv2d_one_axis_s12_cut", "patch_embed_16"}
MODELS = {**{n: f for n, f in arch_ocr_audio.all_models().items()}, **EDGE}


def _has_conv(model):
    return any(n.op_type in ("Conv", "ConvTranspose") for n in model.graph.node)


@pytest.fixture(scope="module")
def cases():
    out = {}
    for name, build in MODELS.items():
        model = build()
        feed = random_inputs(model, 0)
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        out[name] = (model, feed, sess.run(None, feed))
    return out


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", list(MODELS))
def test_converts_runs_and_matches(cases, name, strategy, tmp_path):
    model, feed, ref = cases[name]
    result = onnx_mrvl.convert(model, partition=strategy)
    assert not result.report.warnings, result.report.warnings
    sess = onnx_mrvl.InferenceSession(result.save(str(tmp_path)))
    got = sess.run([o.name for o in model.graph.output], feed)
    for g, r in zip(got, ref):
        assert g.shape == r.shape
        err = float(np.max(np.abs(g.astype(np.float64) - r)))
        assert err <= 2e-2 * max(1.0, float(np.max(np.abs(r)))), (name, strategy, err)
    if _has_conv(model) and not (strategy == "single" and name in FRONT_ON_CPU):
        assert any(n.domain == "mrvl" for n in result.model.graph.node), name
        assert result.report.macs_offloaded > 0, name
        cpu_convs = [n.name for n in result.model.graph.node if n.op_type == "Conv"]
        if strategy == "max":
            assert not cpu_convs, (name, cpu_convs)


def test_large_stride_becomes_space_to_depth():
    from onnx_mrvl.legalize import legalize
    from onnx_mrvl.target import get_target
    for name in ("conv1d_k400_s160", "patch_embed_16", "conv2d_one_axis_s12"):
        legal = legalize(EDGE[name](), get_target(None)).model
        strides = [list(a.ints) for n in legal.graph.node if n.op_type == "Conv"
                   for a in n.attribute if a.name == "strides"]
        assert strides and all(max(s) <= get_target(None).max_stride for s in strides), (name, strides)


def test_nhwc_reduce_mean_becomes_global_average_pool():
    from onnx_mrvl.legalize import legalize
    from onnx_mrvl.target import get_target
    for keep in (0, 1):
        ops = [n.op_type for n in legalize(_transpose_mean(keep), get_target(None)).model.graph.node]
        assert "GlobalAveragePool" in ops and "ReduceMean" not in ops, ops
