"""log_range_scale: a conv-STFT log-mel front end on int16-scale audio (power spectrum far above
fp16's 65504) runs in one region within the fp16 bound once its input range is declared; a chain
that is not homogeneous, or an undeclared range, is left alone and fails closed as before."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import onnx_mrvl
from onnx_mrvl.errors import MrvlRuntimeError
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing.log_mel_models import log_mel, tones


def _ref(m, x):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]


def _run(m, tmp_path, x):
    res = onnx_mrvl.convert(m)
    return res, onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, {"input": x})[0]


@pytest.mark.parametrize("int16_input", [False, True])
def test_log_mel_on_int16_scale_audio_runs_in_one_region_within_fp16_bound(int16_input, tmp_path):
    m = log_mel(declared=0.0 if int16_input else 32768.0, int16_input=int16_input)
    legal = legalize(m).model
    assert any(n.name == "log/unscale" for n in legal.graph.node)
    add = next(n for n in legal.graph.node if n.name == "log/unscale")
    shift = float(next(numpy_helper.to_array(i) for i in legal.graph.initializer if i.name == add.input[1]))
    e = shift / np.log(2.0)                 # 2^-k on the STFT: 2^-2k on the power, less the mel's lift
    assert abs(e - round(e)) < 1e-4 and e >= 16
    # the clamp max(mel, 1e-10) is taken in the log domain (1e-10 scaled is 0 in fp16: log(0) = -inf)
    floor = next(n for n in legal.graph.node if n.name == "clamp/log_floor")
    assert floor.op_type == "Max" and floor.input[0] == add.output[0]
    for amp in (32000.0, 3000.0):
        x = tones(400, amp)
        if int16_input:
            x = np.round(x).astype(np.int16)
        ref = _ref(m, x)
        assert np.abs(ref).max() > 60       # dB: a mel power above 10^6, fp16 tops at 65504 (48 dB)
        res, got = _run(m, tmp_path / f"{amp:g}", x)
        assert len(res.report.regions) == 1
        assert float(np.abs(got - ref).max()) <= 1e-2 * float(np.abs(ref).max())
    silence = np.zeros((1, 400), np.int16 if int16_input else np.float32)   # digital silence: -100 dB
    _, got = _run(m, tmp_path / "silence", silence)
    # the log, its floor and the dB scaling (the graph output: on the host, fuse/host_power_log.py): -100 dB
    np.testing.assert_allclose(got, _ref(m, silence), rtol=2.0 ** -10)


def test_log_mel_of_the_magnitude_scales_by_half_the_power(tmp_path):
    """sqrt(re^2 + im^2) -> mel -> log: the Sqrt halves the degree (the shift is k ln 2 less the lift)."""
    m = log_mel(magnitude=True)
    assert any(n.name == "log/unscale" for n in legalize(m).model.graph.node)
    x = tones(400, 32000.0)
    ref = _ref(m, x)
    res, got = _run(m, tmp_path, x)
    assert len(res.report.regions) == 1
    assert float(np.abs(got - ref).max()) <= 1e-2 * float(np.abs(ref).max())


def test_undeclared_range_is_left_alone_and_fails_closed(tmp_path):
    m = log_mel(declared=0.0)
    assert not any(n.name == "log/unscale" for n in legalize(m).model.graph.node)
    with pytest.raises(MrvlRuntimeError, match="fp16 overflow"):
        _run(m, tmp_path, tones(400, 32000.0))


@pytest.mark.parametrize("form", ["extra_linear_term"])
def test_chain_that_is_not_homogeneous_is_refused_and_fails_closed(form, tmp_path):
    # re^2 + im^2 + re: degrees 2 and 1 (log(mel + 1e-10) was refused here too until log_eps_floor
    # took its eps into the log domain: test_log_of_mel_plus_tiny_eps_is_floored_then_scaled)
    m = log_mel(**{form: True})
    assert not any(n.name == "log/unscale" for n in legalize(m).model.graph.node)
    with pytest.raises(MrvlRuntimeError, match="fp16 overflow"):
        _run(m, tmp_path, tones(400, 32000.0))


def test_log_floor_below_fp16_is_taken_in_the_log_domain(tmp_path):
    """log(max(mel, 1e-10)) on [-1, 1] audio (no overflow, no range needed): 1e-10 is 0 in fp16, so
    digital silence gave log(0) = -inf; the floor after the log gives onnxruntime's -100 dB."""
    m = log_mel(declared=0.0)
    legal = legalize(m).model
    floor = next(n for n in legal.graph.node if n.name == "clamp/log_floor")
    assert floor.op_type == "Max" and not any(n.op_type == "Clip" for n in legal.graph.node)
    for name, x in (("tones", tones(400, 0.5)), ("silence", np.zeros((1, 400), np.float32))):
        ref = _ref(m, x)
        res, got = _run(m, tmp_path / name, x)
        assert len(res.report.regions) == 1 and np.isfinite(got).all()
        assert float(np.abs(got - ref).max()) <= 1e-2 * float(np.abs(ref).max())


def test_log_of_mel_plus_tiny_eps_is_floored_then_scaled(tmp_path):
    """log(mel + 1e-10) (basic-pitch's form) on int16-scale audio: log_eps_floor makes it
    max(Log(mel), log 1e-10), whose chain log_range_scale then computes at a power of two."""
    m = log_mel(add_eps=True)
    legal = legalize(m).model
    assert any(n.name == "log/unscale" for n in legal.graph.node)
    assert any(n.name == "plus_eps/log_floor" for n in legal.graph.node)
    for x in (tones(400, 32000.0), np.zeros((1, 400), np.float32)):
        ref = _ref(m, x)
        res, got = _run(m, tmp_path / str(float(np.abs(x).max())), x)
        assert len(res.report.regions) == 1 and np.isfinite(got).all()
        assert float(np.abs(got - ref).max()) <= 1e-2 * float(np.abs(ref).max())
