"""Keras 3 recurrent layers through tf2onnx (an ONNX ``Loop`` per layer, onnx_mrvl/testing/keras3_loops.py)
-> ONNX LSTM / GRU / RNN (legalize ``loop_to_rnn``, ``reverse_sequence_gather``) -> one accelerator region.
Structure, legalize's numbers against onnxruntime on the original (1e-5) and convert + simulator
within docs/simulator.md's 1e-2 * max|ref|; bodies that are not one cell step stay a Loop with the
reason."""
import numpy as np
import onnx
import pytest

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.rules import loop_body
from onnx_mrvl.legalize.testing import legalize_and_compare
from onnx_mrvl.testing.keras3_loops import keras3_rnn
from test_fuse_exports import feeds_for, run_ort

CASES = {
    "lstm_seq": dict(cell="lstm"),
    "lstm_last_batch2": dict(cell="lstm", batch=2, return_sequences=False),
    "gru_reset_after": dict(cell="gru"),
    "gru_reset_before": dict(cell="gru_v1", batch=2),
    "simple_rnn": dict(cell="simple"),
    "bilstm_batch3": dict(cell="lstm", batch=3, direction="bidirectional"),
    "gru_backward_last": dict(cell="gru", direction="backward", return_sequences=False),
    "stacked_lstm": dict(cell="lstm", stacked=True, batch=2),
    "lstm_initial_state_input": dict(cell="lstm", state_input=True),
}
OP = {"lstm": "LSTM", "gru": "GRU", "gru_v1": "GRU", "simple": "RNN"}


def _ops(m):
    return [n.op_type for n in m.graph.node]


def _skipped(m):
    return [r for r in legalize(m).report.skipped if r[0] == "loop_to_rnn"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_keras3_loop_becomes_recurrent_layer(name, tmp_path):
    kw = CASES[name]
    m = keras3_rnn(**kw)
    loops = _ops(m).count("Loop")
    out, _ = legalize_and_compare(m)
    ops = _ops(out)
    assert "Loop" not in ops and "ReverseSequence" not in ops
    assert ops.count(OP[kw["cell"]]) == loops
    rnn = next(n for n in out.graph.node if n.op_type == OP[kw["cell"]])
    lbr = [a.i for a in rnn.attribute if a.name == "linear_before_reset"]
    assert lbr == ({"gru": [1], "gru_v1": [0]}.get(kw["cell"], []))
    feeds = feeds_for(m)
    ref = run_ort(m, feeds)
    res = onnx_mrvl.convert(m)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)
    for a, b in zip(ref, got):
        assert a.shape == b.shape and float(np.max(np.abs(a - b))) <= 1e-2 * float(np.max(np.abs(a)))


def test_dynamic_time_axis_with_pinned_shapes(tmp_path):
    """A time axis exported as dynamic (trip count and the body's bound from ``Shape(x)``, read by the
    body from the outer scope): with ``input_shapes`` pinned the Loop is re-rolled, one region."""
    m = keras3_rnn(cell="gru", direction="bidirectional", batch=2, dynamic=True)
    shapes = {"x": [2, 10, 8]}
    x = np.random.default_rng(3).uniform(-1, 1, shapes["x"]).astype(np.float32)
    ref = run_ort(m, {"x": x})
    res = onnx_mrvl.convert(m, input_shapes=shapes)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, {"x": x})
    assert float(np.max(np.abs(ref[0] - got[0]))) <= 1e-2 * float(np.max(np.abs(ref[0])))


def test_initial_state_from_a_graph_input_is_read():
    """``initial_state`` from a graph input becomes the LSTM's initial_h (Reshape to [1, B, H])."""
    m = keras3_rnn(cell="lstm", state_input=True)
    out, _ = legalize_and_compare(m)
    lstm = next(n for n in out.graph.node if n.op_type == "LSTM")
    producer = {o: n for n in out.graph.node for o in n.output}
    assert producer[lstm.input[5]].input[0] == "h0"


@pytest.mark.parametrize("kw, reason", [
    (dict(cell="lstm", mask=True), "reads 2 sequences per step"),
    (dict(cell="lstm", variant="no_output_tanh"), "not an LSTM / GRU step (3 Sigmoid, 1 Tanh"),
])
def test_other_bodies_stay_a_loop_with_the_reason(kw, reason, tmp_path):
    m = keras3_rnn(**kw)
    out = legalize(m).model
    assert "Loop" in _ops(out)
    (skip,) = _skipped(m)
    assert reason in skip[2], skip
    feeds = feeds_for(m)
    res = onnx_mrvl.convert(m)
    d = res.report.decisions[skip[1]]
    assert d.placement == "cpu" and d.reason.startswith("not re-rolled into an LSTM / GRU (loop_to_rnn): ") \
        and reason in d.reason and "control flow (Loop)" in d.reason, d.reason
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)
    ref = run_ort(m, feeds)
    assert all(float(np.max(np.abs(a - b))) <= 1e-2 * float(np.max(np.abs(a))) for a, b in zip(ref, got))


def test_gate_assignment_is_verified_against_the_body():
    """A body with an LSTM's ops whose cell update is not an LSTM's (c' = f c + i g + 0.5) is refused
    by the numeric check, not taken by counting activations."""
    m = keras3_rnn(cell="lstm")
    body = next(a.g for n in m.graph.node if n.op_type == "Loop" for a in n.attribute if a.name == "body")
    tanh_c = [n for n in body.node if n.op_type == "Tanh"][1]
    shifted = tanh_c.input[0] + "_shifted"
    half = onnx.numpy_helper.from_array(np.array(0.5, np.float32), "half")
    body.initializer.append(half)
    add = onnx.helper.make_node("Add", [tanh_c.input[0], "half"], [shifted], name="shift")
    idx = list(body.node).index(tanh_c)
    tanh_c.input[0] = shifted
    body.node.insert(idx, add)
    (skip,) = _skipped(m)
    assert "no LSTM gate assignment reproduces" in skip[2], skip


def test_trip_count_must_read_every_row_once():
    """A loop stopping one row early (its condition compares with T - 1) is not a full sequence."""
    m = keras3_rnn(cell="gru", steps=6)
    body = next(a.g for n in m.graph.node if n.op_type == "Loop" for a in n.attribute if a.name == "body")
    less = next(n for n in body.node if n.op_type == "Less")
    limit = next(i for i in body.initializer if i.name == less.input[1])
    limit.CopyFrom(onnx.numpy_helper.from_array(np.array(5.0, np.float32), limit.name))
    (skip,) = _skipped(m)
    assert "reads rows [0, 1, 2, 3, 4] of" in skip[2] and "(6 rows)" in skip[2], skip


def test_const_value_evaluates_the_initial_condition():
    m = keras3_rnn(cell="lstm")
    from onnx_mrvl.legalize.graph import Graph
    g = Graph(m)
    (loop,) = g.nodes_of(("Loop",))
    assert bool(loop_body.const_value(g, loop.input[1])) is True


@pytest.mark.parametrize("mask", [False, True], ids=["rerolled", "kept_loop"])
def test_loop_listed_before_the_tensor_its_body_reads(mask, tmp_path):
    """onnxruntime's quantizer writes the Loops first, before the node producing the sequence their
    bodies read (an outer-scope read): the checker refuses that order, onnxruntime sorts and runs it;
    so do we (model_checks accepts it when sorting fixes it, legalize sorts by the bodies' reads too)."""
    m = keras3_rnn(cell="gru", mask=mask)
    nodes = list(m.graph.node)
    loops = [n for n in nodes if n.op_type == "Loop"]
    del m.graph.node[:]
    m.graph.node.extend(loops + [n for n in nodes if n.op_type != "Loop"])
    with pytest.raises(onnx.checker.ValidationError, match="topologically sorted"):
        onnx.checker.check_model(m)
    feeds = feeds_for(m)
    ref = run_ort(m, feeds)
    res = onnx_mrvl.convert(m)
    assert ("Loop" in [d.op_type for d in res.report.cpu_nodes()]) == mask
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)
    assert all(float(np.max(np.abs(a - b))) <= 1e-2 * float(np.max(np.abs(a))) for a, b in zip(ref, got))
