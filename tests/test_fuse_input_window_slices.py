"""A conv kernel larger than max_kernel on both axes reading the model input (DeepSpeech2's 41x11
stride-2 first conv on a spectrogram): legalize's conv_kernel_split slices the input window of its
inner tiles; those Slices of the model input, read only by the tiles' Convs, are fuse slices_nd's
Slice2D on the accelerator (before: 8 Slices on the CPU between 2 regions). A lone slice of a model
input keeps its reason."""
from __future__ import annotations

import collections

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

import onnx_mrvl
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize


def _deepspeech2_front(f=41, t=64, seed=0):
    """spectrogram [1, 1, F, T] -> Conv 41x11 /2x2 (pads 20, 5) -> Hardtanh -> Conv 21x11 /2x1 -> Hardtanh."""
    r = np.random.default_rng(seed)
    inits = [nh.from_array((r.standard_normal((8, 1, 41, 11)) * 0.05).astype(np.float32), "w1"),
             nh.from_array((r.standard_normal(8) * 0.1).astype(np.float32), "b1"),
             nh.from_array((r.standard_normal((8, 8, 21, 11)) * 0.02).astype(np.float32), "w2"),
             nh.from_array(np.array(0, np.float32), "lo"), nh.from_array(np.array(20, np.float32), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[41, 11],
                              pads=[20, 5, 20, 5], strides=[2, 2]),
             helper.make_node("Clip", ["c1", "lo", "hi"], ["a1"]),
             helper.make_node("Conv", ["a1", "w2"], ["c2"], name="conv2", kernel_shape=[21, 11],
                              pads=[10, 5, 10, 5], strides=[2, 1]),
             helper.make_node("Clip", ["c2", "lo", "hi"], ["y"])]
    g = helper.make_graph(nodes, "ds2", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, f, t])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_input_window_slices_of_large_kernel_tiles_on_the_accelerator(tmp_path):
    m = _deepspeech2_front()
    x = np.random.default_rng(1).standard_normal((1, 1, 41, 64)).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    leg = legalize(m)
    slices = [n for n in leg.model.graph.node if n.op_type == "Slice" and n.input[0] == "x"]
    assert slices                                           # the kernel tiles' input windows
    fused = fuse(leg)
    assert all(fused.decisions[n.name].placement == "accelerator" for n in slices)
    res = onnx_mrvl.convert(m)
    kinds = collections.Counter(n.op_type for n in res.model.graph.node)
    assert len(res.report.regions) == 1 and set(kinds) == {next(iter(kinds))} and kinds.most_common(1)[0][1] == 1, kinds
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path / "out"))).run(None, {"x": x})[0]
    assert got.shape == ref.shape and np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()


def test_lone_slice_of_a_model_input_keeps_its_reason():
    """A model input's Slice read by something other than a Conv (here a Relu) stays a CPU slice."""
    inits = [nh.from_array(np.array([3], np.int64), n) for n in ("s",)] + \
        [nh.from_array(np.array([30], np.int64), "e"), nh.from_array(np.array([2], np.int64), "a")]
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a"], ["h"], name="cut"),
             helper.make_node("Relu", ["h"], ["y"])]
    g = helper.make_graph(nodes, "lone", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 41, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    d = fuse(legalize(m)).decisions["cut"]
    assert d.placement == "cpu" and "of a model input or into model outputs only" in d.reason
