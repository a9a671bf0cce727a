"""The log activation (fuse/log_act.py: ``max(Log(x) + beta, alpha)`` on the vector unit), the Neg
layer (fuse/neg.py: ``Mul2D(x, -1)``) and legalize's log_eps_floor (``Log(v + eps)`` with an eps fp16
flushes -> ``max(Log(v), log eps)``): a conv-STFT dB spectrum as tf2onnx writes basic-pitch's
(testing/log_front_models.py). Structure, the simulator's specials, and numbers against onnxruntime
(fp16 bound: max|err| <= 1e-2 max|ref|)."""
import math

import numpy as np
from onnx import TensorProto, helper, numpy_helper
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import legalize_and_compare
from onnx_mrvl.sim.activations import apply_activation
from onnx_mrvl.errors import MrvlRuntimeError
from onnx_mrvl.testing.log_front_models import log_db_of_relu, log_power_db, tone_input


def _ref(m, x):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]


def _layers(res):
    return [layer for sg in res.subgraphs for layer in sg.nodes_json["nodes"]]


def _acts(res):
    return [(layer["attrs"].get("activation_type", ["none"])[0], layer["attrs"]) for layer in _layers(res)
            if "attrs" in layer and "activation_type" in layer["attrs"]]


@pytest.mark.parametrize("neg_imag", [True, False])
def test_db_spectrum_runs_in_one_region_with_the_log_activation(neg_imag, tmp_path):
    m = log_power_db(neg_imag=neg_imag)
    legal, _ = legalize_and_compare(m)
    floor = next(n for n in legal.graph.node if n.name == "plus_eps/log_floor")
    assert floor.op_type == "Max" and not any(n.name == "plus_eps" for n in legal.graph.node)
    res = onnx_mrvl.convert(m)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()
    logs = [a for kind, a in _acts(res) if kind == "log"]
    assert len(logs) == 1
    assert abs(float(logs[0]["activation_alpha"][0]) - math.log(1e-10)) < 1e-4   # the floor in the unit
    sess = onnx_mrvl.InferenceSession(res.save(str(tmp_path)))
    for amp in (0.5, 0.01):
        x = tone_input(m, amp)
        ref = _ref(m, x)
        got = sess.run(None, {"input": x})[0]
        assert float(np.abs(got - ref).max()) <= 1e-2 * float(np.abs(ref).max())
    silence = np.zeros_like(tone_input(m))          # log(0 + 1e-10): the floor, never -inf
    ref = _ref(m, silence)
    got = sess.run(None, {"input": silence})[0]
    assert np.isfinite(got).all()
    assert float(np.abs(got - ref).max()) <= 1e-2 * float(np.abs(ref).max())


def test_log_shift_and_floor_are_one_activation(tmp_path):
    m = log_power_db(shift_floor=True)
    res = onnx_mrvl.convert(m)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()
    logs = [a for kind, a in _acts(res) if kind == "log"]
    assert len(logs) == 1
    assert float(logs[0]["activation_alpha"][0]) == -20.0
    assert abs(float(logs[0]["activation_beta"][0]) - 3 * math.log(2.0)) < 1e-6
    sess = onnx_mrvl.InferenceSession(res.save(str(tmp_path)))
    for x in (tone_input(m, 0.5), np.zeros_like(tone_input(m))):
        ref = _ref(m, x)
        got = sess.run(None, {"input": x})[0]
        assert np.isfinite(got).all()
        assert float(np.abs(got - ref).max()) <= 1e-2 * float(np.abs(ref).max())


def test_log_of_a_power_leaving_the_accelerator_runs_on_the_host(tmp_path):
    """fuse/host_power_log.py: basic-pitch's dB spectrum read by a per-sample min-max normalisation (no
    accelerator layer): the squares, the Log and the dB Mul run on the host in fp32, the convs in the
    region. Quiet input (peak 0.002: |re|, |im| ~ 1e-4, their fp16 squares subnormal) was 0.38 of
    max|ref| with the power formed in fp16."""
    m = log_power_db(minmax=True)
    res = onnx_mrvl.convert(m)
    assert len(res.subgraphs) == 1
    cpu = {d.node: d.reason for d in res.report.cpu_nodes()}
    for name in ("re_sq", "im_sq", "power"):
        assert cpu.get(name, "").startswith("the power into a Log"), (name, cpu.get(name))
    for name in ("log", "to_db"):   # the Log's eps floor rewrite is restored on the CPU (split/restore.py)
        assert "a Log (with its constant affine tail)" in cpu.get(name, ""), (name, cpu.get(name))
    assert cpu["log"].startswith("restored: log_eps_floor on the CPU")
    assert "conv_re" not in cpu and "conv_im" not in cpu and "neg_im" not in cpu
    sess = onnx_mrvl.InferenceSession(res.save(str(tmp_path)))
    for amp in (0.5, 0.01, 0.002):
        x = tone_input(m, amp)
        ref = _ref(m, x)
        got = sess.run(None, {"input": x})[0]
        assert float(np.abs(got - ref).max()) <= 1e-2 * float(np.abs(ref).max()), amp


def test_log_whose_result_leaves_the_accelerator_runs_on_the_host(tmp_path):
    """host_power_log without squares: a dB spectrum read only by openWakeWord's per-call floor
    ``Clip(db, max(db) - 80)`` (its bound a statistic the host computes): the Log and the dB Mul run
    on the host in fp32 (the region's output is the Relu'd conv, rounded to 2^-11 of itself: 2.1e-3
    dB), not as an fp16 region output rounded to 2^-11 of |dB| (0.0156 dB steps at 16-32 dB). No
    region added: the floor was on the host already."""
    m = log_db_of_relu(top_db=True)
    res = onnx_mrvl.convert(m)
    cpu = {d.node: d.reason for d in res.report.cpu_nodes()}
    assert len(res.subgraphs) == 1 and "conv" not in cpu
    for name in ("log", "to_db"):
        assert cpu.get(name, "").startswith("a Log (with its constant affine tail)"), (name, cpu.get(name))
    x = np.sin(0.3 * np.arange(64)).reshape(1, 1, 1, 64).astype(np.float32) * 40.0
    ref = _ref(m, x)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, {"input": x})[0]
    assert float(np.abs(got - ref).max()) <= 1e-2 * float(np.abs(ref).max())


def test_log_of_exact_zero_flows_on_as_onnxruntime_minus_inf(tmp_path, caplog):
    """Digital silence into a Log without a floor of its own (sim/activations_smooth.only_log_of_zero):
    the log layer's -inf is ONNX Log's value of 0, not an fp16 overflow. A floor after it (``max(dB,
    -100)``) makes it finite as in onnxruntime, with no overflow warning; without one, the -inf (and
    the head conv's -inf / NaN of it) is returned where onnxruntime has it, no error. A NaN (Log of a
    negative value) still fails closed."""
    silence = np.zeros((1, 1, 1, 64), np.float32)
    half = silence.copy()
    half[..., 32:] = np.sin(np.arange(32)).astype(np.float32)
    for floor in (True, False):
        m = log_db_of_relu(floor=floor)
        res = onnx_mrvl.convert(m)
        assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()
        assert [kind for kind, _ in _acts(res)].count("log") == 1
        sess = onnx_mrvl.InferenceSession(res.save(str(tmp_path / f"floor{floor}")))
        for x in (silence, half):
            ref = _ref(m, x)
            caplog.clear()
            got = sess.run(None, {"input": x})[0]
            assert not any("overflow" in r.getMessage() for r in caplog.records)
            assert np.array_equal(np.isfinite(got), np.isfinite(ref)) and np.isfinite(ref).all() == floor
            fin = np.isfinite(ref)
            assert np.array_equal(got[~fin], ref[~fin], equal_nan=True)
            if fin.any():
                assert float(np.abs(got[fin] - ref[fin]).max()) <= 1e-2 * float(np.abs(ref[fin]).max())
    m = log_db_of_relu(floor=False, relu=False)
    sess = onnx_mrvl.InferenceSession(onnx_mrvl.convert(m).save(str(tmp_path / "nan")))
    assert np.isnan(_ref(m, half)).any()
    with pytest.raises(MrvlRuntimeError):
        sess.run(None, {"input": half})


def test_log_eps_floor_leaves_an_eps_fp16_keeps_alone():
    for eps, rewritten in ((1e-10, True), (2.0 ** -31, True), (1e-6, False), (1e-3, False)):
        legal = legalize(log_power_db(eps=eps)).model
        assert any(n.name == "plus_eps/log_floor" for n in legal.graph.node) == rewritten, eps
        assert any(n.name == "plus_eps" for n in legal.graph.node) != rewritten, eps


def test_log_without_floor_and_neg_on_the_accelerator_numbers(tmp_path):
    """eps 1e-3 (kept: fp16 holds it): Add + Log, the Log a plain log activation (floor -FLT_MAX)."""
    m = log_power_db(eps=1e-3)
    res = onnx_mrvl.convert(m)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()
    logs = [a for kind, a in _acts(res) if kind == "log"]
    assert len(logs) == 1 and float(logs[0]["activation_alpha"][0]) < -1e38
    x = tone_input(m, 0.3)
    ref = _ref(m, x)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, {"input": x})[0]
    assert float(np.abs(got - ref).max()) <= 1e-2 * float(np.abs(ref).max())


def test_simulator_log_specials_match_onnx_log():
    x = np.array([0.0, -0.0, -1.0, np.inf, np.nan, 1e-7, 1.0, 65504.0], np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        ref = np.log(x)
    got = apply_activation(x.copy(), "log")              # no floor: ONNX Log
    np.testing.assert_array_equal(got, ref)
    floored = apply_activation(x.copy(), "log", {"alpha": -10.0, "beta": 1.0})
    with np.errstate(invalid="ignore"):
        want = np.maximum(ref + np.float32(1.0), np.float32(-10.0))
    np.testing.assert_array_equal(floored, want)        # 0 -> the floor, x < 0 and NaN -> NaN, inf -> inf
    assert floored[0] == -10.0 and np.isnan(floored[2]) and np.isnan(floored[4]) and floored[3] == np.inf
    v = np.geomspace(1e-6, 6e4, 2001).astype(np.float32)
    assert np.max(np.abs(apply_activation(v.copy(), "log") - np.log(v.astype(np.float64)))) < 1e-6


def test_perf_model_charges_the_log_lowering():
    from onnx_mrvl.costmodel import vector_ops
    from onnx_mrvl.target import VECTOR_LOWERINGS
    layer = {"layer_name": "Mul2D", "outputs": [1], "params": {"activation": "log"}}
    assert VECTOR_LOWERINGS["log"][1] == 5
    assert vector_ops(layer, {1: [1, 8, 1, 32]}) == 5 * 8 * 32


def test_reference_body_matches_the_simulator():
    """opset's reference body of the log activation (``Max(Add(Log(x), beta), alpha)``) against the
    simulator's activation, on positive values, zeros and with / without a floor."""
    import onnx
    from onnx import TensorProto, helper
    from onnx_mrvl.opset_transformer import smooth_activation_nodes
    x = np.concatenate([np.geomspace(1e-6, 6e4, 64), [0.0, 1.0]]).astype(np.float32).reshape(1, -1)
    for attrs, params in (({"activation_alpha": -3.4028234663852886e38, "activation_beta": 0.0}, {}),
                          ({"activation_alpha": -10.0, "activation_beta": 2.0}, {"alpha": -10.0, "beta": 2.0})):
        g = helper.make_graph(smooth_activation_nodes("log", "x", "y", attrs), "log_body",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        got = apply_activation(x.copy(), "log", params)
        with np.errstate(over="ignore"):      # as stored (fp16): the body's -FLT_MAX floor is -inf too
            ref16, got16 = ref.astype(np.float16), got.astype(np.float16)
        finite = np.isfinite(ref16)
        assert np.array_equal(np.isfinite(got16), finite) and np.array_equal(got16[~finite], ref16[~finite])
        np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-6, atol=1e-6)


def test_log_of_a_value_scaled_beyond_fp16_runs_on_the_host(tmp_path):
    """Silero VAD v4's ``Log(magnitude * 2^20 + 1)`` read by a conv: the Mul by 2^20 stays on the host
    (its weight would be inf in fp16), and a region starting at the Add took the scaled value as an
    input (inf in fp16 for values above 2^-4: the run failed closed). The Add and the Log run on the
    host with the Mul in fp32; the region reads the log (a few units)."""
    rng = np.random.default_rng(7)
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 8, 8])
    inits = [numpy_helper.from_array(np.array(2.0 ** 20, np.float32), "k"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array((0.2 * rng.standard_normal((8, 4, 3, 3))).astype(np.float32), "w"),
             numpy_helper.from_array((0.1 * rng.standard_normal(8)).astype(np.float32), "b")]
    nodes = [helper.make_node("Mul", ["input", "k"], ["scaled"], name="scale"),
             helper.make_node("Add", ["scaled", "one"], ["plus1"], name="plus1"),
             helper.make_node("Log", ["plus1"], ["spect"], name="log"),
             helper.make_node("Conv", ["spect", "w", "b"], ["out"], name="conv", pads=[1, 1, 1, 1])]
    m = helper.make_model(helper.make_graph(nodes, "log_scaled", [x], [y], inits),
                          opset_imports=[helper.make_opsetid("", 17)])
    res = onnx_mrvl.convert(m)
    cpu = {d.node: d.reason for d in res.report.cpu_nodes()}
    assert len(res.subgraphs) == 1 and "conv" not in cpu
    for name in ("plus1", "log"):
        assert cpu.get(name, "").startswith("a Log of a value the host scaled beyond fp16"), (name, cpu.get(name))
    sess = onnx_mrvl.InferenceSession(res.save(str(tmp_path)))
    for seed in range(3):
        xi = np.random.default_rng(seed).uniform(0.0, 1.0, (1, 4, 8, 8)).astype(np.float32)
        ref = _ref(m, xi)
        got = sess.run(None, {"input": xi})[0]
        assert float(np.abs(got - ref).max()) <= 1e-2 * float(np.abs(ref).max())
