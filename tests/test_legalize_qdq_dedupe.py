"""legalize's qdq_dedupe (identical Q / DQ of one activation merged) and the QDQ 1-D Conv without
an output QuantizeLinear (qdq_conv_1d): structure, exact against onnxruntime on the original, and
the converted layer int8-in within the fp16 bound."""
from __future__ import annotations

import numpy as np
from onnx import helper

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import compare, feeds_for, make_model, op_types, run

mk = helper.make_node
R = np.random.default_rng(3)


def _pair(x: str, tag: str, scale: str = "s", zp: str = "z"):
    return [mk("QuantizeLinear", [x, scale, zp], [f"{tag}_q"], name=f"{tag}_Q"),
            mk("DequantizeLinear", [f"{tag}_q", scale, zp], [f"{tag}_dq"], name=f"{tag}_DQ")]


def _dedicated(other_scale: bool = False):
    """x -> Relu -> a pair per reader (DedicatedQDQPair) -> two MatMuls on int8 weights (DQ of
    constants, one per layer); ``other_scale``: the second pair has another scale (not merged)."""
    w = {f"w{i}": R.integers(-127, 128, (8, 8)).astype(np.int8) for i in (1, 2)}
    nodes = [mk("Relu", ["x"], ["h"], name="relu")]
    nodes += _pair("h", "a") + _pair("h", "b", "s2" if other_scale else "s")
    for i, src in ((1, "a_dq"), (2, "b_dq")):
        nodes += [mk("DequantizeLinear", [f"w{i}", "ws"], [f"w{i}_dq"], name=f"w{i}_DQ"),
                  mk("MatMul", [src, f"w{i}_dq"], [f"y{i}"], name=f"mm{i}")]
    inits = dict(w, s=np.float32(0.02), s2=np.float32(0.03), z=np.int8(0), ws=np.float32(0.01))
    return make_model(nodes, [("x", [1, 4, 8])], ["y1", "y2"], inits)


def test_identical_pairs_of_one_activation_merge():
    m = _dedicated()
    res = legalize(m)
    qs = [n for n in res.model.graph.node if n.op_type == "QuantizeLinear"]
    assert len(qs) == 1 and [r for r, _, _ in res.report.applied].count("qdq_dedupe") == 2   # the Q, then its DQ
    weight_dqs = [n for n in res.model.graph.node if n.op_type == "DequantizeLinear" and n.input[0].startswith("w")]
    assert len(weight_dqs) == 2        # a DQ of a constant stays one per layer
    assert compare(m, res.model) == 0.0


def test_pairs_with_other_parameters_stay():
    res = legalize(_dedicated(other_scale=True))
    assert op_types(res.model).count("QuantizeLinear") == 2
    assert "qdq_dedupe" not in [r for r, _, _ in res.report.applied]


def test_qdq_conv1d_with_float_output_becomes_2d_int8_in(tmp_path):
    """DQ(x) -> Conv1d(DQ(W_q), fp32 bias) -> Erf GELU (no QuantizeLinear after the conv: ModelOpt's
    inputs-only placement, a calibrated dynamic ConvInteger): a 2-D conv on a unit H axis, taken as
    an int8-in / fp16-out layer (it stayed a 1-D conv on the CPU)."""
    w = R.integers(-127, 128, (16, 8, 3)).astype(np.int8)
    nodes = _pair("x", "in") + [
        mk("DequantizeLinear", ["w", "ws"], ["w_dq"], name="w_DQ", axis=0),
        mk("Conv", ["in_dq", "w_dq", "b"], ["c"], name="conv", kernel_shape=[3], pads=[1, 1], strides=[2]),
        mk("Div", ["c", "sqrt2"], ["d"], name="div"), mk("Erf", ["d"], ["e"], name="erf"),
        mk("Add", ["e", "one"], ["e1"], name="add"), mk("Mul", ["c", "e1"], ["m"], name="mul"),
        mk("Mul", ["m", "half"], ["y"], name="half")]
    inits = dict(w=w, ws=(R.uniform(0.5, 1.5, 16) * 0.01).astype(np.float32), s=np.float32(0.03), z=np.int8(0),
                 b=(R.standard_normal(16) * 0.1).astype(np.float32), sqrt2=np.float32(np.sqrt(2)),
                 one=np.float32(1), half=np.float32(0.5))
    m = make_model(nodes, [("x", [1, 8, 40])], ["y"], inits)
    res = legalize(m)
    conv = next(n for n in res.model.graph.node if n.op_type == "Conv")
    assert [a.ints for a in conv.attribute if a.name == "kernel_shape"] == [[1, 3]]
    assert ("conv_1d_to_2d", ["conv"], "QDQ 1-D Conv -> QDQ 2-D Conv on a unit H axis (float output)") in \
        [(r, list(n), d) for r, n, d in res.report.applied]
    assert compare(m, res.model) <= 1e-6
    out = onnx_mrvl.convert(m)
    assert out.report["conv"].precision == "int8 in, fp16 out", out.report["conv"].reason
    assert not [d for d in out.report.cpu_nodes() if d.op_type == "Conv"]
    feeds = feeds_for(m)
    ref = run(m, feeds)[0]
    got = onnx_mrvl.InferenceSession(out.save(str(tmp_path / "o"))).run(None, feeds)[0]
    assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()
