"""Recurrent layers whose ``sequence_lens`` come from a graph input (PyTorch ``pack_padded_sequence``,
ASR / OCR batches with per-utterance lengths; onnx_mrvl/testing/seq_lens_models.py): the accelerator
layer masks each row's state updates past its length and writes 0 there (ONNX's semantics), the
exporter's length sort cancels (legalize ``rnn_length_sort``). Structure, JSON, and numbers against
onnxruntime on the original within docs/simulator.md's 1e-2 * max|ref| for several length vectors."""
import numpy as np
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from onnx_mrvl.sim.recurrent import Recurrent, activation_fns
from onnx_mrvl.testing.seq_lens_models import lens_feeds, lens_model

LENS = ([10, 5, 1], [3, 10, 7], [10, 10, 10])


def _check(m, tmp_path, lens_sets=LENS, step=None):
    """Numbers against onnxruntime: within 1e-2 of max|ref|, or with ``step`` (a quantized output:
    its scale) >= 98% of the codes identical and the rest one step apart."""
    res = onnx_mrvl.convert(m)
    sess = onnx_mrvl.InferenceSession(res.save(str(tmp_path)))
    ref_s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for lens in lens_sets:
        feeds = lens_feeds(m, lens)
        for a, b in zip(ref_s.run(None, feeds), sess.run(None, feeds)):
            assert a.shape == b.shape, lens
            if step:
                codes = np.rint((np.asarray(b, np.float64) - a) / step)
                assert np.mean(codes == 0) >= 0.98 and np.abs(codes).max() <= 1, (lens, np.mean(codes == 0))
            else:
                assert float(np.max(np.abs(a - b))) <= 1e-2 * float(np.max(np.abs(a))), lens
    return res


@pytest.mark.parametrize("kw", [dict(cell="LSTM"), dict(cell="GRU", direction="forward"),
                                dict(cell="RNN", direction="reverse"),
                                dict(cell="LSTM", direction="reverse", state_outputs=True, initial=True)],
                         ids=["bilstm", "gru_forward", "rnn_reverse", "lstm_reverse_states"])
def test_lengths_from_an_input_run_in_the_region(kw, tmp_path):
    res = _check(lens_model(**kw), tmp_path)
    assert len(res.subgraphs) == 1
    assert [d.op_type for d in res.report.cpu_nodes()] == ["Cast"]        # int64 -> int32 of the lengths
    sg = res.subgraphs[0]
    layer = next(n for n in sg.nodes_json["nodes"] if n["attrs"].get("layer_name") == [kw["cell"]])
    assert layer["attrs"]["state_inputs"][-1] == "sequence_lens"
    assert len(layer["inputs"]) == 2                                       # X, lengths


@pytest.mark.parametrize("states", [False, True], ids=["y", "y_and_h_n"])
def test_pytorch_length_sort_cancels(states, tmp_path):
    """enforce_sorted=False: TopK / Gather / ScatterElements / Gather go (for h_n / c_n too), the
    layer reads the rows as they are with their own lengths."""
    m = lens_model(cell="LSTM", sorted_export=True, state_outputs=states)
    out = legalize(m).model
    ops = [n.op_type for n in out.graph.node]
    assert "TopK" not in ops and "Gather" not in ops and "ScatterElements" not in ops
    lstm = next(n for n in out.graph.node if n.op_type == "LSTM")
    assert lstm.input[0] == "x"
    res = _check(m, tmp_path)
    assert len(res.subgraphs) == 1 and [d.op_type for d in res.report.cpu_nodes()] == ["Cast"]
    assert "length sort and its inverse cancel" in res.report.decisions["sort"].reason


@pytest.mark.parametrize("kw", [dict(cell="LSTM", direction="bidirectional"), dict(cell="GRU", direction="forward"),
                                dict(cell="LSTM", direction="forward", initial=True)], ids=["bilstm", "gru", "lstm_h0"])
def test_final_states_with_lengths_are_rows_the_layer_writes(kw, tmp_path):
    """Y_h with per-row lengths is each row's state at its own last step (not a row of Y): the layer
    writes each direction's final state as row T (``final_state_rows``), an LSTM's Y_c after it."""
    m = lens_model(state_outputs=True, **kw)
    res = _check(m, tmp_path)
    assert len(res.subgraphs) == 1 and [d.op_type for d in res.report.cpu_nodes()] == ["Cast"]
    layer = next(n for n in res.subgraphs[0].nodes_json["nodes"] if n["attrs"].get("layer_name") == [kw["cell"]])
    assert layer["attrs"]["final_state_rows"] == ["1"]
    assert ("cell_state_row" in layer["attrs"]) == (kw["cell"] == "LSTM")


def test_simulator_masks_state_updates_past_each_length():
    """Row b of Y is the full-length run of that row cut at len[b] (forward) and the full-length
    run of the row's first len[b] steps (reverse), zero past it; the state is held."""
    rng = np.random.default_rng(0)
    T, B, I, H = 6, 3, 4, 5
    w = rng.uniform(-0.5, 0.5, (1, 4 * H, I)).astype(np.float32)
    r = rng.uniform(-0.5, 0.5, (1, 4 * H, H)).astype(np.float32)
    x = rng.uniform(-1, 1, (T, B, I)).astype(np.float32)
    acts = activation_fns(["sigmoid", "tanh", "tanh"], None, None)
    lens = np.array([6, 2, 0], np.float32)
    for direction in ("forward", "reverse"):
        layer = Recurrent("LSTM", w, r, direction=direction, activations=acts, cell_state_row=1)
        y, ok = layer.apply(x, sequence_lens=lens)
        assert ok
        for b, n in enumerate(lens.astype(int)):
            if n:
                alone, _ = layer.apply(np.ascontiguousarray(x[:n, b:b + 1]))
                np.testing.assert_array_equal(y[:n, 0, b], alone[:n, 0, 0])
                np.testing.assert_array_equal(y[T, 0, b], alone[n, 0, 0])   # the held cell state
            else:
                assert not np.any(y[T, 0, b])                                   # the initial (zero) state
            assert not np.any(y[n:T, 0, b])
        rows = Recurrent("LSTM", w, r, direction=direction, activations=acts, cell_state_row=1, final_state_rows=1)
        y2, _ = rows.apply(x, sequence_lens=lens)
        np.testing.assert_array_equal(y2[:T], y[:T])
        np.testing.assert_array_equal(y2[T + 1], y[T])                           # c after the h row
        for b, n in enumerate(lens.astype(int)):                                # h: the row's own last step
            last = (n - 1 if direction == "forward" else 0) if n else None
            np.testing.assert_array_equal(y2[T, 0, b], y[last, 0, b] if n else 0)
    with pytest.raises(ValueError, match="sequence_lens"):
        layer.apply(x, sequence_lens=np.array([7, 1, 1], np.float32))


def test_perf_model_charges_the_length_selects():
    """Per step, direction, row and unit: selects of h, c (LSTM) and Y's row (costmodel.length_mask_ops)."""
    import math

    from onnx_mrvl.artifact import load
    from onnx_mrvl.costmodel import perf_report

    def row(m):
        meta = load(onnx_mrvl.convert(m).subgraphs[0].binary).meta
        return meta, next(r for r in perf_report(meta).layers if r.layer_name == "LSTM")

    meta, masked = row(lens_model(cell="LSTM", direction="bidirectional"))
    full_meta, full = row(lens_model(cell="LSTM", direction="bidirectional", no_lens=True))
    # per-row lengths are a program_version 2 feature (an older reader would run without them)
    assert (meta["program_version"], full_meta["program_version"]) == (2, 1)
    arch = meta["arch"]
    ops = 10 * 2 * 3 * 12 * 3                                  # T * D * B * H * (h, c, Y)
    assert masked.macs == full.macs
    assert masked.compute_cycles - full.compute_cycles == math.ceil(
        ops / (arch["vector_ops_per_cycle_per_tile"] * arch["num_tiles"]))


@pytest.mark.parametrize("out_pair", [False, True], ids=["int8_in", "int8_out"])
def test_int8_recurrent_layer_with_lengths(out_pair, tmp_path):
    """A QDQ LSTM (DQ on X, W, R; Y's Q -> DQ absorbed with ``out_pair``) with lengths from an input:
    the int8 recurrent layer masks the same way (Y's code of 0 past each length)."""
    from onnx import TensorProto, helper

    from onnx_mrvl.testing.qdq_recurrent_models import layer
    m = layer("LSTM", "bidirectional", steps=10, batch=3, out_pair=out_pair)
    m.graph.input.append(helper.make_tensor_value_info("lens", TensorProto.INT64, [3]))
    m.graph.node.insert(0, helper.make_node("Cast", ["lens"], ["lens32"], name="cast_lens", to=TensorProto.INT32))
    rnn = next(n for n in m.graph.node if n.op_type == "LSTM")
    while len(rnn.input) < 5:
        rnn.input.append("")
    rnn.input[4] = "lens32"
    res = _check(m, tmp_path, step=1 / 127 if out_pair else None)
    assert len(res.subgraphs) == 1 and [d.op_type for d in res.report.cpu_nodes()] == ["Cast"]
    assert res.report.decisions["rnn"].reason.startswith("int8")


@pytest.mark.parametrize("kw", [dict(cell="LSTM", state_outputs=True), dict(cell="GRU", direction="reverse")],
                         ids=["bilstm_states", "gru_reverse"])
def test_fused_reference_body_with_lengths(kw):
    """The fused model (mrvl nodes with their reference bodies: Cast of the float lengths to int32,
    the ONNX op, the final-state rows concatenated) runs in plain onnxruntime to fp32 precision."""
    m = lens_model(**kw)
    fused = fuse(legalize(m).model).model
    assert kw["cell"] in [n.op_type for n in fused.graph.node if n.domain == "mrvl"]
    ref_s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    got_s = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"])
    for lens in LENS:
        feeds = lens_feeds(m, lens)
        for a, b in zip(ref_s.run(None, feeds), got_s.run(None, feeds)):
            np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-5)


def test_length_sort_kept_when_the_rows_are_not_put_back_by_the_inverse(tmp_path):
    """Rows gathered back by the sorting permutation itself (not its inverse): the sort does not
    cancel, rnn_length_sort says why, and the numbers still hold (the layer has its lengths)."""
    m = lens_model(cell="GRU", direction="forward", sorted_export=True)
    back = next(n for n in m.graph.node if n.name == "gather_back")
    back.input[1] = "perm"
    skipped = [r for r in legalize(m).report.skipped if r[0] == "rnn_length_sort"]
    assert skipped and "not the inverse permutation" in skipped[0][2], skipped
    _check(m, tmp_path)


def test_length_beyond_the_steps_raises_our_error(tmp_path):
    """A length outside [0, T] (onnxruntime refuses it too) fails the run with the region's
    MrvlRuntimeError naming the layer, never a silently masked or zero output."""
    from onnx_mrvl.errors import MrvlRuntimeError
    m = lens_model(cell="LSTM")
    sess = onnx_mrvl.InferenceSession(onnx_mrvl.convert(m).save(str(tmp_path)))
    feeds = lens_feeds(m, [11, 5, 1])                                        # T = 10
    with pytest.raises(MrvlRuntimeError, match="sequence_lens"):
        sess.run(None, feeds)
    with pytest.raises(Exception):                                           # onnxruntime's own refusal
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
