"""LSTM / GRU / RNN as one accelerator layer (mrvl::LSTM / GRU / RNN): structure (the recurrent
node is inside the region with the convs around it) and numbers (convert + onnx_mrvl.InferenceSession
against onnxruntime on the original, within docs/simulator.md's 1e-2 * max|ref|)."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnx_mrvl.testing import arch_ocr_audio
import onnx_mrvl
from onnx_mrvl.testing import recurrent_models as rm
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from onnx_mrvl.target import get_target
from onnx_mrvl.testing.randomize_weights import random_inputs

TOL = 1e-2   # docs/simulator.md: max|y_sim - y_ref| <= 1e-2 * max|y_ref|

CASES = {
    # name: (cell, kwargs of recurrent_models.cell_model)
    "lstm_forward": ("LSTM", {}),
    "lstm_reverse": ("LSTM", {"direction": "reverse"}),
    "lstm_bidirectional": ("LSTM", {"direction": "bidirectional"}),
    "lstm_initial_states": ("LSTM", {"direction": "bidirectional", "initial": True, "batch": 3}),
    "lstm_no_bias_seq_lens": ("LSTM", {"bias": False, "seq_lens": 12, "batch": 2}),
    "lstm_layout1": ("LSTM", {"layout": 1, "batch": 2, "direction": "bidirectional", "initial": True}),
    "lstm_clip_hardsigmoid": ("LSTM", {"activations": ["HardSigmoid", "Tanh", "Tanh"], "alpha": [0.25],
                                       "beta": [0.45], "clip": 2.5}),
    "lstm_head": ("LSTM", {"direction": "bidirectional", "head": True}),
    "gru_forward": ("GRU", {}),
    "gru_reverse_lbr": ("GRU", {"direction": "reverse", "linear_before_reset": 1}),
    "gru_bidirectional": ("GRU", {"direction": "bidirectional", "batch": 2}),
    "gru_initial_state": ("GRU", {"initial": True}),
    "gru_bidirectional_initial_lbr": ("GRU", {"direction": "bidirectional", "initial": True,
                                              "linear_before_reset": 1}),
    "gru_layout1": ("GRU", {"layout": 1, "batch": 3, "initial": True}),
    "rnn_forward": ("RNN", {}),
    "rnn_reverse_relu": ("RNN", {"direction": "reverse", "activations": ["Relu"]}),
    "rnn_bidirectional": ("RNN", {"direction": "bidirectional", "initial": True}),
    "rnn_leakyrelu_layout1": ("RNN", {"activations": ["LeakyRelu"], "alpha": [0.1], "layout": 1, "batch": 2}),
    # Y_h read: sliced from Y in the region (each direction's last timestep)
    "lstm_bidirectional_y_h": ("LSTM", {"direction": "bidirectional", "batch": 2, "outputs": ("y", "y_h")}),
    "gru_reverse_y_h": ("GRU", {"direction": "reverse", "outputs": ("y", "y_h")}),
    "rnn_bidirectional_layout1_y_h": ("RNN", {"direction": "bidirectional", "layout": 1, "batch": 3,
                                              "outputs": ("y", "y_h")}),
    # no Y output at all (the ONNX suite, tf2onnx's return_sequences=False): Y is internal
    "gru_bidirectional_y_h_only": ("GRU", {"direction": "bidirectional", "outputs": ("", "y_h")}),
    "lstm_layout1_y_h_only": ("LSTM", {"layout": 1, "batch": 2, "initial": True, "outputs": ("", "y_h")}),
    # Y_c read: the layer appends the last cell state as row T of its output
    "lstm_y_h_y_c": ("LSTM", {"direction": "bidirectional", "initial": True, "outputs": ("y", "y_h", "y_c")}),
    "lstm_reverse_y_c_only": ("LSTM", {"direction": "reverse", "outputs": ("", "", "y_c")}),
    "lstm_layout1_y_c": ("LSTM", {"layout": 1, "batch": 2, "outputs": ("y", "", "y_c")}),
    "lstm_peepholes": ("LSTM", {"direction": "bidirectional", "initial": True, "peepholes": True,
                                "outputs": ("y", "y_h", "y_c")}),
}


def _ref(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


def _check(model, tmp_path, partition="max", reference=None):
    """convert + InferenceSession against onnxruntime on ``reference`` (default: the model)."""
    feed = random_inputs(model, 0)
    ref = _ref(reference or model, feed)
    result = onnx_mrvl.convert(model, partition=partition)
    assert not result.report.warnings, result.report.warnings
    got = onnx_mrvl.InferenceSession(result.save(str(tmp_path))).run(
        [o.name for o in model.graph.output], feed)
    errs = []
    for g, r in zip(got, ref):
        assert g.shape == r.shape
        err = float(np.max(np.abs(g.astype(np.float64) - r)))
        scale = float(np.max(np.abs(r)))
        assert err <= TOL * scale, (err, scale)
        errs.append(err / scale)
    return result, max(errs)


def _mrvl_ops(model):
    return [n.op_type for n in model.graph.node if n.domain == "mrvl"]


def _region_ops(result):
    """Layer names of each region's Nodes-JSON."""
    return [[n["attrs"]["layer_name"][0] for n in sg.nodes_json["nodes"] if n["op"] != "input"]
            for sg in result.subgraphs]


@pytest.mark.parametrize("name", list(CASES))
def test_cell_on_accelerator_matches_onnxruntime(name, tmp_path):
    cell, kw = CASES[name]
    model = rm.cell_model(cell, **kw)
    reference = rm.cell_model(cell, layout0_reference=True, **kw) if kw.get("layout") else None
    result, rel = _check(model, tmp_path, reference=reference)
    assert len(result.subgraphs) == 1, result.report.regions
    assert cell in _region_ops(result)[0], _region_ops(result)
    assert not [n for n in result.model.graph.node if n.op_type == cell and n.domain != "mrvl"]
    assert result.report.macs_offloaded == result.report.macs_total > 0


def test_fused_reference_body_is_the_onnx_op():
    """The fused model (mrvl nodes with their reference bodies) runs in plain onnxruntime and
    matches the original to fp32 precision: the body is the ONNX op with the node's attributes."""
    for name in ("lstm_layout1", "gru_bidirectional_initial_lbr", "rnn_leakyrelu_layout1", "lstm_clip_hardsigmoid"):
        cell, kw = CASES[name]
        model = rm.cell_model(cell, **kw)
        fused = fuse(legalize(model, get_target(None))).model
        assert cell in _mrvl_ops(fused), name
        feed = random_inputs(model, 0)
        reference = rm.cell_model(cell, layout0_reference=True, **kw) if kw.get("layout") else model
        ref, got = _ref(reference, feed), _ref(fused, feed)
        assert np.allclose(got[0], ref[0], atol=1e-5, rtol=1e-5), name


def test_crnn_one_region(tmp_path):
    """CRNN (conv backbone -> Squeeze/Transpose -> BiLSTM -> Transpose/Reshape -> MatMul+Add ->
    LogSoftmax): before this change 2 regions with the LSTM on the CPU; now one region holding
    the convs, the LSTM, the FC and the LogSoftmax (a Mrvl Softmax with log = 1): no CPU node."""
    model = arch_ocr_audio.crnn_ocr()
    result, rel = _check(model, tmp_path)
    assert len(result.subgraphs) == 1
    ops = _region_ops(result)[0]
    assert "LSTM" in ops and "Conv2D" in ops and "FC" in ops
    assert ops.index("Conv2D") < ops.index("LSTM") < ops.index("FC")
    cpu = [n.op_type for n in result.model.graph.node if n.domain != "mrvl"]
    assert cpu == [], cpu
    assert ops.index("FC") < ops.index("Softmax")
    assert result.report.macs_offloaded == result.report.macs_total


def test_audio_gru_one_region(tmp_path):
    """Conv1d front end -> GRU -> last step (Gather) -> Gemm: one region, nothing on the CPU."""
    model = arch_ocr_audio.audio_gru()
    result, rel = _check(model, tmp_path)
    assert len(result.subgraphs) == 1
    ops = _region_ops(result)[0]
    assert "GRU" in ops and "Conv2D" in ops and "Slice2D" in ops and ops[-1] == "FC"
    assert not [n for n in result.model.graph.node if n.domain != "mrvl"]


def test_last_hidden_state_classifier_one_region(tmp_path):
    """``_, h_n = gru(x); fc(h_n[-1])``: Y_h is sliced from Y in the region, the Gather and the
    Gemm follow: one region, nothing on the CPU."""
    result, rel = _check(rm.conv_gru_hidden(), tmp_path)
    assert len(result.subgraphs) == 1
    assert not [n.op_type for n in result.model.graph.node if n.domain != "mrvl"]
    assert "GRU" in _region_ops(result)[0]


@pytest.mark.parametrize("build", [rm.crnn_batch2_layout1, rm.conv_gru_last])
def test_batch_first_models_one_region(build, tmp_path):
    """Batch-first (layout 1) recurrent layers between a conv front end and an FC head, at batch
    2 (real transposes, done in the region) and with y[:, -1]."""
    model = build()
    result, rel = _check(model, tmp_path, reference=build(reference=True))
    assert len(result.subgraphs) == 1, result.report.regions
    assert not [n.op_type for n in result.model.graph.node if n.domain != "mrvl"]


def test_cpu_reasons():
    """Recurrent nodes the layer does not take stay on the CPU with a reason naming why."""
    def reason(model, op):
        res = fuse(legalize(model, get_target(None)))
        recs = [d for d in res.decisions.values() if d.op_type == op]
        assert recs and recs[0].placement == "cpu", recs
        return recs[0].reason

    assert "sequence_lens" in reason(rm.cell_model("GRU", seq_lens=5), "GRU")
    assert "softsign" in reason(rm.cell_model("RNN", activations=["Softsign"]), "RNN").lower()


def test_perf_model_counts_recurrent_macs_and_serial_steps():
    from onnx_mrvl.artifact import load
    from onnx_mrvl.costmodel import perf_report

    model = rm.cell_model("LSTM", direction="bidirectional", steps=10, feat=16, hid=20)
    result = onnx_mrvl.convert(model)
    meta = load(result.subgraphs[0].binary).meta
    rep = perf_report(meta)
    row = next(r for r in rep.layers if r.layer_name == "LSTM")
    macs = 10 * 2 * 4 * 20 * (16 + 20)            # T * D * G*H*(I+H), batch 1
    assert row.macs == macs
    arch = meta["arch"]
    peak = arch["macs_per_cycle_per_tile"] * arch["num_tiles"]
    # serial timesteps: per step the step's MACs at peak plus the step latency
    assert row.compute_cycles == 10 * (-(-macs // 10 // peak) + arch["recurrent_step_cycles"])
    assert result.report.macs_total == macs
    from onnx_mrvl.inspection.offload import cpu_macs
    assert cpu_macs(model, list(model.graph.node)) == macs    # the offload report of a CPU LSTM


@pytest.mark.parametrize("batch_first", [False, True], ids=["pytorch_traced_loop", "keras_tf2onnx"])
def test_unrolled_lstm_one_region(batch_first, tmp_path):
    """An LSTM unrolled per timestep (Gemm/MatMul + Add + Split/Slice + Sigmoid/Tanh + Mul, stacked
    by Unsqueeze + Concat) after a conv backbone: a fused sequence of FC layers in one region with
    the convs (before: 12 / 11 regions for 10 steps, the gate Split/Slice of every step, x[t] and
    the time-major stack on the CPU)."""
    steps = 10
    model = rm.crnn_unrolled(batch_first=batch_first, steps=steps)
    result, rel = _check(model, tmp_path)
    assert len(result.subgraphs) == 1
    assert not [n.op_type for n in result.model.graph.node if n.domain != "mrvl"]
    ops = _region_ops(result)[0]
    # x_t W per step, h W_hh per step but the first (h0 = 0: folded by legalize), the head
    assert ops.count("FC") == 2 * steps and ops.count("Conv2D") == 2
    assert ops.count("Slice2D") >= 4 * steps


def test_long_sequence_error_does_not_grow(tmp_path):
    """h and c are stored in fp16 between timesteps: over 300 steps the error stays at the
    single-step level (the forget gate damps old rounding errors)."""
    model = rm.cell_model("LSTM", steps=300, feat=16, hid=32, direction="bidirectional")
    result, rel = _check(model, tmp_path)
    assert rel < 3e-3, rel


def test_gather_and_ranges_keep_reasons_at_the_boundary():
    """A lone 3-D split of a model input into model outputs stays on the CPU (no accelerator
    work): the reason is slices.py's."""
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Split", ["x"], ["a", "b"], name="node", axis=1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, 2, 3]) for o in "ab"])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    res = fuse(m)    # (legalize would make it a 4-D channel split)
    assert res.decisions["node"].placement == "cpu" and "3-D split" in res.decisions["node"].reason


def test_saved_json_compiles_to_the_saved_binary_and_bad_json_fails(tmp_path):
    """The Nodes-JSON / Constants-JSON pair of a recurrent region, read back from disk, compiles to
    the same binary; a recurrent layer whose JSON disagrees with its constants is refused with a
    CompileError naming the layer and its original node."""
    import copy
    import json
    from onnx_mrvl.emit import CompileOptions, compile_json
    from onnx_mrvl.errors import CompileError

    model = rm.cell_model("GRU", direction="bidirectional", initial=True, linear_before_reset=1,
                          outputs=("y", "y_h"))
    result = onnx_mrvl.convert(model)
    result.save(str(tmp_path))
    sg = result.subgraphs[0]
    nodes = json.loads((tmp_path / f"{sg.name}-nodes.json").read_text())
    consts = json.loads((tmp_path / f"{sg.name}-consts.json").read_text())
    assert compile_json(nodes, consts, CompileOptions()) == (tmp_path / sg.artifact).read_bytes()
    layer = next(n for n in nodes["nodes"] if n["attrs"].get("layer_name") == ["GRU"])
    assert layer["attrs"]["direction"] == ["bidirectional"] and layer["attrs"]["linear_before_reset"] == ["1"]
    for key, value in (("hidden_size", ["7"]), ("activations", ["sigmoid", "softsign", "sigmoid", "tanh"]),
                       ("direction", ["sideways"])):
        bad = copy.deepcopy(nodes)
        next(n for n in bad["nodes"] if n["attrs"].get("layer_name") == ["GRU"])["attrs"][key] = value
        with pytest.raises(CompileError) as err:
            compile_json(bad, consts, CompileOptions())
        assert "rnn" in str(err.value), str(err.value)     # the original ONNX node
    with pytest.raises(CompileError):                      # time-major: no batch recompile
        compile_json(nodes, consts, CompileOptions(batch=4))


@pytest.mark.parametrize("batch", [1, 2])
def test_stacked_bilstm_one_region(batch, tmp_path):
    """nn.LSTM(num_layers=2, bidirectional=True) as PyTorch exports it (LSTM -> Transpose(0,2,1,3)
    -> Reshape [T, B, 2H] -> LSTM, unread Y_h / Y_c): one region; at batch 1 the transposes are
    relabellings, at batch 2 block rotations in the region."""
    result, rel = _check(rm.stacked_bilstm(batch=batch), tmp_path)
    assert len(result.subgraphs) == 1
    assert _region_ops(result)[0].count("LSTM") == 2
    assert not [n.op_type for n in result.model.graph.node if n.domain != "mrvl"]


@pytest.mark.parametrize("kw", [dict(cell="GRU"), dict(cell="LSTM", direction="bidirectional", batch=2),
                                dict(cell="RNN", layout=1, batch=2), dict(cell="LSTM", layout=1, batch=2)],
                         ids=["gru", "bilstm_b2", "rnn_layout1_b2", "lstm_layout1_b2"])
def test_streaming_state_inputs(kw, tmp_path):
    """A streaming chunk: the previous state is a model input (a data input of the layer, listed
    in the JSON's ``state_inputs``), the new state Y_h (and an LSTM's Y_c) a model output; all in
    one region."""
    model = rm.streaming_cell(**kw)
    reference = rm.streaming_cell(layout0_reference=True, **kw) if kw.get("layout") else None
    result, rel = _check(model, tmp_path, reference=reference)
    assert len(result.subgraphs) == 1
    sg = result.subgraphs[0]
    assert len(sg.inputs) == (3 if kw["cell"] == "LSTM" else 2)
    layer = next(n for n in sg.nodes_json["nodes"] if n["attrs"].get("layer_name") == [kw["cell"]])
    assert layer["attrs"]["state_inputs"] == ["initial_h"] + (["initial_c"] if kw["cell"] == "LSTM" else [])
    assert len(layer["inputs"]) == len(sg.inputs)


def test_gather_reasons():
    """Gathers the accelerator does not take: several or computed indices, a constant table."""
    from onnx import TensorProto, helper, numpy_helper

    def reason(data_const, idx):
        ins = [helper.make_tensor_value_info("i", TensorProto.INT64, [2])] if idx is None else []
        inits = [numpy_helper.from_array(np.ones((4, 3), np.float32), "t")] if data_const else []
        if idx is not None:
            inits.append(numpy_helper.from_array(np.array(idx, np.int64), "i"))
        x = "t" if data_const else "x"
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                               helper.make_node("Gather", [x, "i"], ["y"], name="node", axis=0),
                               helper.make_node("Softplus", ["y"], ["out"], name="softplus")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])] + ins,
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT,
                                                             [3] if np.ndim(idx) == 0 and idx is not None else [2, 3])],
                              inits)
        m = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
        d = fuse(m).decisions["node"]
        assert d.placement == "cpu"
        return d.reason

    assert "one constant index" in reason(False, [0, 2])
    assert "not constant" in reason(False, None)
    assert "Gather of a constant" in reason(True, 1)


def test_keras_lstm_via_tf2onnx_one_region(tmp_path):
    """Keras Conv1D -> LSTM -> Dense as tf2onnx writes it (NWC transposes, zero initial states
    built from Shape/Gather/Concat/Expand, Squeeze of the direction axis): legalize folds the
    states, one region, nothing on the CPU."""
    result, rel = _check(rm.keras_lstm_tf2onnx(), tmp_path)
    assert len(result.subgraphs) == 1
    assert "LSTM" in _region_ops(result)[0]
    assert not [n.op_type for n in result.model.graph.node if n.domain != "mrvl"]


def test_unrolled_gru_one_region(tmp_path):
    """A traced GRUCell loop: ``1 - z`` (Sub of a constant) becomes Mul by -1 + Add in legalize,
    the stack into the model output a first-axis concat: one region, nothing on the CPU (before:
    11 regions and 51 CPU nodes)."""
    result, rel = _check(rm.unrolled_gru(), tmp_path)
    assert len(result.subgraphs) == 1
    assert not [n.op_type for n in result.model.graph.node if n.domain != "mrvl"]
