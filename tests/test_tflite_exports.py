"""Full-integer TFLite models through tf2onnx (onnx_mrvl/testing/tflite_models.py): the int8 graph
input Transposed on its codes, UpSampling2D as TFLite's Reshape / Tile chain on codes, Concat of
codes. One region, the data moves offloaded, the int8 output identical to onnxruntime's run of the
same model on >= 99% of its codes; the float form within the fp16 bound."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing import keras_models, tflite_models


def _ref(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _run(model, tmp_path, feeds):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    r = onnx_mrvl.convert(str(path))
    r.save(str(tmp_path / "out"), overwrite=True)
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    return r, sess.run(None, feeds)


def test_int8_unet_legalizes_moves_on_codes():
    m = tflite_models.unet(0, quantized=True)
    out = legalize(m).model
    ops = [n.op_type for n in out.graph.node]
    assert "Tile" not in ops, "the repeat chain is a nearest Resize"
    assert ops.count("Resize") == 2
    types = {v.name: v.type.tensor_type.elem_type for v in onnx.shape_inference.infer_shapes(out).graph.value_info}
    for n in out.graph.node:
        if n.op_type in ("Concat", "Transpose", "Resize"):   # all in float between Q -> DQ pairs now
            assert types.get(n.input[0]) == TensorProto.FLOAT, (n.op_type, n.name)
    f = tflite_models.feeds(m, 3)
    a, b = _ref(m, f)[0], _ref(out, f)[0]
    assert np.array_equal(a, b), "legalize is exact on a QDQ model"


def test_int8_unet_one_region_identical(tmp_path):
    m = tflite_models.unet(0, quantized=True)
    r, got = None, []
    total = same = 0
    for seed in (1, 2):
        f = tflite_models.feeds(m, seed)
        ref = _ref(m, f)[0]
        assert len(np.unique(ref)) > 20, "the test model's output spreads over the codes"
        if r is None:
            r, got = _run(m, tmp_path, f)
        else:
            got = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx")).run(None, f)
        assert got[0].dtype == np.int8
        same += int((got[0] == ref).sum())
        total += ref.size
        assert int(np.abs(got[0].astype(np.int32) - ref.astype(np.int32)).max()) <= 1
    assert len(r.report.regions) == 1
    cpu = {d.op_type for d in r.report.cpu_nodes()}
    assert cpu <= {"QuantizeLinear", "DequantizeLinear"}, cpu   # the host's (de)quantization at most
    assert same / total >= 0.99, same / total


def test_float_unet_one_region_fp16_bound(tmp_path):
    m = tflite_models.unet(0, quantized=False)
    f = tflite_models.feeds(m, 1)
    r, got = _run(m, tmp_path, f)
    ref = _ref(m, f)[0]
    assert len(r.report.regions) == 1 and not r.report.cpu_nodes()
    assert np.abs(got[0] - ref).max() <= 1e-2 * np.abs(ref).max()


def _input_transpose(scales):
    """int8 graph input -> Transpose on the codes -> DQ readers with the given scales."""
    inits, nodes, outs = [], [helper.make_node("Transpose", ["x"], ["t"], name="t", perm=[0, 3, 1, 2])], []
    for i, s in enumerate(scales):
        inits += [numpy_helper.from_array(np.float32(s), f"s{i}"), numpy_helper.from_array(np.int8(0), f"z{i}")]
        nodes.append(helper.make_node("DequantizeLinear", ["t", f"s{i}", f"z{i}"], [f"y{i}"], name=f"dq{i}"))
        outs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, 3, 4, 4]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 4, 4, 3])], outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_int8_input_transpose_takes_its_readers_scale():
    x = {"x": np.random.default_rng(0).integers(-128, 128, (1, 4, 4, 3)).astype(np.int8)}
    one = _input_transpose([0.5, 0.5])
    out = legalize(one).model
    t = next(n for n in out.graph.node if n.op_type == "Transpose")
    assert next(n for n in out.graph.node if n.output[0] == t.input[0]).op_type == "DequantizeLinear"
    for a, b in zip(_ref(one, x), _ref(out, x)):
        assert np.array_equal(a, b)
    two = legalize(_input_transpose([0.5, 0.25])).model   # readers disagree: no one scale, left as it was
    t = next(n for n in two.graph.node if n.op_type == "Transpose")
    assert t.input[0] == "x"


def test_keras_nhwc_squeeze_excite_mean_is_a_pool(tmp_path):
    """MobileNetV3 / EfficientNet via tf2onnx: ReduceMean(axes 1,2) of NHWC data no Transpose writes
    (keepdims 1: the SE mean; 0: the classifier head) -> GlobalAveragePool; one region."""
    m = keras_models.se_nhwc(0)
    out = legalize(m).model
    ops = [n.op_type for n in out.graph.node]
    assert "ReduceMean" not in ops and ops.count("GlobalAveragePool") == 2
    x = {"input": np.random.default_rng(1).standard_normal((1, 16, 16, 3)).astype(np.float32)}
    ref = _ref(m, x)[0]
    assert np.allclose(_ref(out, x)[0], ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    r, got = _run(m, tmp_path, x)
    assert len(r.report.regions) == 1 and not r.report.cpu_nodes()
    assert np.abs(got[0] - ref).max() <= 1e-2 * np.abs(ref).max()


def test_keras2_lstm_last_step_head_one_region(tmp_path):
    """Keras 2 LSTM(return_sequences=False) head: Y's last step taken by Gather(-1, axis 0) -> Dense;
    one region, within the fp16 bound (the Slice form of the GRU: main's unbind_to_gather)."""
    m = keras_models.rnn_last_step(0, "LSTM", take="gather")
    x = {"input": np.random.default_rng(1).standard_normal((1, 12, 8)).astype(np.float32)}
    ref = _ref(m, x)[0]
    r, got = _run(m, tmp_path, x)
    assert len(r.report.regions) == 1 and not r.report.cpu_nodes()
    assert np.abs(got[0] - ref).max() <= 1e-2 * np.abs(ref).max()


def test_keras3_layernorm_with_gap_means_and_token_mean(tmp_path):
    """tf2onnx writes Keras 3 LayerNormalization's means over [N, T, D]'s last axis as
    GlobalAveragePool and GlobalAveragePooling1D as ReduceMean(axes [1], keepdims=0): one
    LayerNormalization, no ReduceMean, one region (before: 2 regions, the LN's ops on the CPU)."""
    m = keras_models.keras3_ln_head(0)
    out = legalize(m).model
    ops = [n.op_type for n in out.graph.node]
    assert ops.count("LayerNormalization") == 1 and "ReduceMean" not in ops and "Sqrt" not in ops
    x = {"input": np.random.default_rng(1).standard_normal((1, 16, 32)).astype(np.float32)}
    ref = _ref(m, x)[0]
    assert np.allclose(_ref(out, x)[0], ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    r, got = _run(m, tmp_path, x)
    assert len(r.report.regions) == 1 and not r.report.cpu_nodes()
    assert np.abs(got[0] - ref).max() <= 1e-2 * np.abs(ref).max()


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_qdq_zero_pad_before_maxpool_folds(tmp_path, act):
    """Keras ResNet50 quantized (quantize_static): Relu -> Q -> DQ -> Pad(1) -> Q -> DQ -> MaxPool.
    The zero point is the lowest code, so the pad's zeros never win: the Pad folds into the
    MaxPool (before: a Pad on the CPU between 2 regions); identical to onnxruntime."""
    from onnx_mrvl.testing import int8_zoo
    q = onnx.load(int8_zoo.quantize(keras_models.resnet_stem(0), str(tmp_path / "q"), act))
    res = legalize(q)
    assert "Pad" not in [n.op_type for n in res.model.graph.node]
    assert any(w == "qdq_pad_fold" and "MaxPool" in str(d) for w, _, d in res.log)
    total = same = 0
    r = None
    for seed in (1, 2):
        x = {"input": np.random.default_rng(seed).standard_normal((1, 3, 32, 32)).astype(np.float32)}
        ref = _ref(q, x)[0]
        if r is None:
            r, got = _run(q, tmp_path, x)
        else:
            got = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx")).run(None, x)
        same, total = same + int((got[0] == ref).sum()), total + ref.size
    assert len(r.report.regions) == 1 and not r.report.cpu_nodes()
    assert same / total >= 0.99


def test_qdq_zero_pad_before_maxpool_of_signed_values_stays():
    """Without the Relu the values go below the pad's 0: the Pad stays, with the reason."""
    from onnx_mrvl.testing import int8_zoo
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        q = onnx.load(int8_zoo.quantize(keras_models.resnet_stem(0, relu=False), d, "s8"))
    res = legalize(q)
    assert "Pad" in [n.op_type for n in res.model.graph.node]
    x = {"input": np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    assert np.array_equal(_ref(q, x)[0], _ref(res.model, x)[0])


def test_qdq_nhwc_pad_through_transpose_folds_into_depthwise(tmp_path):
    """Keras MobileNet's correct_pad on NHWC data, quantized: DQ -> Pad -> Q -> DQ -> Transpose ->
    Q -> DQ -> Conv. The pads move through the Transpose into the conv (before: the Pad on the
    CPU); one region, identical to onnxruntime."""
    from onnx_mrvl.testing import int8_zoo
    src = tmp_path / "float.onnx"
    onnx.save(keras_models.correct_pad_dw(0), src)   # no quant_pre_process: its optimizer folds the Pad
    feeds = [{"input": np.random.default_rng(k).standard_normal((1, 16, 16, 3)).astype(np.float32)} for k in range(4)]
    q = onnx.load(int8_zoo.quantize_static_qdq(str(src), str(tmp_path / "q.onnx"), feeds, "s8"))
    assert "Pad" in [n.op_type for n in q.graph.node]
    res = legalize(q)
    assert "Pad" not in [n.op_type for n in res.model.graph.node]
    assert any(w == "qdq_pad_fold" and "Transpose" in str(d) for w, _, d in res.log)
    x = {"input": np.random.default_rng(1).standard_normal((1, 16, 16, 3)).astype(np.float32)}
    ref = _ref(q, x)[0]
    assert np.array_equal(_ref(res.model, x)[0], ref)
    r, got = _run(q, tmp_path, x)
    assert len(r.report.regions) == 1 and not r.report.cpu_nodes()
    assert (got[0] == ref).mean() >= 0.99


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_qdq_causal_pad_through_unsqueeze_folds_into_conv1d(tmp_path, act):
    """Keras Conv1D(padding="causal") as tf2onnx writes it, quantized: DQ -> Pad(T on the left) ->
    Q -> DQ -> Unsqueeze(2) -> Q -> DQ -> Conv [1, k]. The pads move through the Unsqueeze (its new
    axis unpadded) into the conv (before: the Pad on the CPU, 2 regions: Keras 3 audio QDQ); one
    region, identical to onnxruntime."""
    from onnx_mrvl.testing import int8_zoo
    src = tmp_path / "float.onnx"
    onnx.save(keras_models.causal_conv1d(0), src)
    feeds = [{"input": np.random.default_rng(k).standard_normal((1, 8, 20)).astype(np.float32)} for k in range(4)]
    q = onnx.load(int8_zoo.quantize_static_qdq(str(src), str(tmp_path / "q.onnx"), feeds, act))
    assert "Pad" in [n.op_type for n in q.graph.node]
    res = legalize(q)
    assert "Pad" not in [n.op_type for n in res.model.graph.node]
    assert any(w == "qdq_pad_fold" and "Unsqueeze" in str(d) for w, _, d in res.log)
    x = {"input": np.random.default_rng(9).standard_normal((1, 8, 20)).astype(np.float32)}
    ref = _ref(q, x)[0]
    assert np.array_equal(_ref(res.model, x)[0], ref)
    r, got = _run(q, tmp_path, x)
    cpu = [d.op_type for d in r.report.cpu_nodes() if d.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    assert len(r.report.regions) == 1 and not cpu, cpu      # the model output's Q -> DQ stays around the region
    assert (got[0] == ref).mean() >= 0.99


def test_float_pad_before_qdq_conv_folds_and_keeps_the_pair(tmp_path):
    """A float Pad before a QDQ conv's input pair (only the Convs quantized, as a calibrated
    quantize_dynamic model has them): Pad -> Transpose -> Q -> DQ -> Conv. pad_sink moves it below
    the Transpose, qdq_pad_fold folds it into the conv and keeps the pair (before: the Pad on the
    CPU, or with pad_to_conv a depthwise 1x1 Conv layer of its own); identical to onnxruntime."""
    from onnxruntime import quantization as oq
    src, dst = tmp_path / "float.onnx", tmp_path / "q.onnx"
    onnx.save(keras_models.correct_pad_dw(0), src)
    data = iter([{"input": np.random.default_rng(k).standard_normal((1, 16, 16, 3)).astype(np.float32)}
                 for k in range(4)])

    class Reader(oq.CalibrationDataReader):
        def get_next(self):
            return next(data, None)

    oq.quantize_static(str(src), str(dst), Reader(), quant_format=oq.QuantFormat.QDQ, per_channel=True,
                       op_types_to_quantize=["Conv"])
    q = onnx.load(dst)
    pad = next(n for n in q.graph.node if n.op_type == "Pad")
    assert not any(n.output[0] == pad.input[0] and n.op_type == "DequantizeLinear" for n in q.graph.node)
    res = legalize(q)
    ops = [n.op_type for n in res.model.graph.node]
    assert "Pad" not in ops and ops.count("Conv") == 3, ops   # folded, not a pad-as-conv layer
    assert any(w == "qdq_pad_fold" and "float Pad folded" in str(d) for w, _, d in res.log)
    x = {"input": np.random.default_rng(7).standard_normal((1, 16, 16, 3)).astype(np.float32)}
    ref = _ref(q, x)[0]
    assert np.array_equal(_ref(res.model, x)[0], ref)
    r, got = _run(q, tmp_path, x)
    assert len(r.report.regions) == 1 and not r.report.cpu_nodes()
    assert (got[0] == ref).mean() >= 0.99


@pytest.mark.parametrize("act", ["s8", "u8"])
@pytest.mark.parametrize("block", ["relu", "hard_swish"])
def test_qdq_se_gate_behind_a_transpose_is_int8_and_identical(tmp_path, block, act):
    """tf2onnx's NHWC squeeze-excite, quantized: ``ReduceMean -> Transpose -> Q`` and ``HardSigmoid
    -> Transpose -> Q`` (the Q after the move): legalize's qdq_pair_before_move gives the op its own
    pair, so the gate is an int8 group, not an fp16 layer whose rounding moved codes (before: 86-96%
    identical); every output element equal to onnxruntime's on 12 inputs."""
    from onnx_mrvl.testing import int8_zoo
    src = tmp_path / "float.onnx"
    onnx.save(keras_models.se_nhwc(0, block=block), src)
    feeds = [{"input": np.random.default_rng(k).standard_normal((1, 16, 16, 3)).astype(np.float32)} for k in range(4)]
    q = onnx.load(int8_zoo.quantize_static_qdq(str(src), str(tmp_path / "q.onnx"), feeds, act))
    res = legalize(q)
    assert any(w == "qdq_pair_before_move" and "HardSigmoid" in str(d) for w, _, d in res.log)
    x0 = {"input": np.random.default_rng(10).standard_normal((1, 16, 16, 3)).astype(np.float32)}
    r, _ = _run(q, tmp_path, x0)
    assert len(r.report.regions) == 1
    assert not [d for d in r.report if d.op_type == "HardSigmoid" and d.precision != "int8"]
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    for k in range(10, 22):
        x = {"input": np.random.default_rng(k).standard_normal((1, 16, 16, 3)).astype(np.float32)}
        assert np.array_equal(sess.run(None, x)[0], _ref(q, x)[0]), k


@pytest.mark.parametrize("block", ["relu", "hard_swish"])
def test_int8_lookup_output_keeps_its_json_storage_label(tmp_path, block):
    """An int8 Lookup (BN's per-channel Mul, quantized) on NHWC-written data writes the storage its
    Nodes-JSON out_layout names; the compiled program labels its output so (it was always NHWC, and
    a LayoutTransform NCHW -> NHWC after it failed to compile: quantized Keras MobileNetV3, "reads a
    tensor stored NHWC")."""
    from onnx_mrvl.artifact import load
    from onnx_mrvl.testing import int8_zoo
    src = tmp_path / "float.onnx"
    onnx.save(keras_models.se_nhwc(0, block=block), src)
    feeds = [{"input": np.random.default_rng(k).standard_normal((1, 16, 16, 3)).astype(np.float32)} for k in range(4)]
    q = int8_zoo.quantize_static_qdq(str(src), str(tmp_path / "q.onnx"), feeds, "s8")
    r = onnx_mrvl.convert(q)
    checked = 0
    for sg in r.subgraphs:
        by_name = {n["name"]: n for n in sg.nodes_json["nodes"]}
        meta = load(sg.binary).meta
        tensors = {int(t["id"]): t for t in meta["tensors"]}
        for layer in meta["layers"]:
            if layer["layer_name"] != "Lookup" or len(tensors[int(layer["outputs"][0])]["shape"]) != 4:
                continue
            want = by_name[layer["name"]]["attrs"]["out_layout"][0]
            assert tensors[int(layer["outputs"][0])]["layout"] == want, layer["name"]
            checked += 1
    assert checked
