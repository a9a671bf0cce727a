"""A conv-STFT log-mel front end as PyTorch exports it (openWakeWord's melspectrogram): int16-scale
audio -> Unsqueeze -> Conv1d real / imag (Hann-windowed cos / sin) -> Unsqueeze + Transpose ->
``re ** 2 + im ** 2`` -> mel MatMul -> Clip(1e-10, inf) -> Log -> * 10 / ln 10; and Silero VAD's
STFT magnitude (one Conv1d, its output sliced into real / imaginary halves)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

N_FFT, HOP, N_MEL = 64, 16, 8


def tones(samples: int, amplitude: float, seed: int = 0) -> np.ndarray:
    """[1, samples] float32: harmonic tones with vibrato plus noise, peak ``amplitude``."""
    t = np.arange(samples) / 16000.0
    x = sum(np.sin(2 * np.pi * f * t * (1 + 0.01 * np.sin(2 * np.pi * 5 * t))) / (i + 1)
            for i, f in enumerate((440.0, 1320.0, 2900.0)))
    x = x + np.random.default_rng(seed).normal(0, 0.05, samples)
    return (x / np.abs(x).max() * amplitude).astype(np.float32)[None]


def log_mel(samples: int = 400, *, declared: float = 32768.0, extra_linear_term: bool = False,
            int16_input: bool = False, add_eps: bool = False, magnitude: bool = False) -> onnx.ModelProto:
    """``declared``: metadata ``mrvl.input_range.input`` (0: none). ``extra_linear_term``: the
    power plus the real part (``re^2 + im^2 + re``: not homogeneous). ``int16_input``: the input
    is int16, cast to float (the range is its dtype's). ``add_eps``: ``log(mel + 1e-10)`` (basic-pitch's
    form) instead of the clamp. ``magnitude``: the mel of ``sqrt(re^2 + im^2)`` (librosa's power 1)."""
    n = np.arange(N_FFT)
    win = 0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)
    k = np.arange(N_FFT // 2 + 1)[:, None]
    real = (win * np.cos(2 * np.pi * k * n / N_FFT))[:, None, :].astype(np.float32)
    imag = (-win * np.sin(2 * np.pi * k * n / N_FFT))[:, None, :].astype(np.float32)
    mel = np.abs(np.random.default_rng(1).normal(0, 0.1, (N_FFT // 2 + 1, N_MEL))).astype(np.float32)
    inits = [numpy_helper.from_array(a, nm) for a, nm in (
        (real, "stft_real"), (imag, "stft_imag"), (mel, "melW"), (np.array([1], np.int64), "ax1"),
        (np.array(2.0, np.float32), "two"), (np.array(1e-10, np.float32), "eps"),
        (np.array(np.inf, np.float32), "inf"), (np.array(10.0 / np.log(10.0), np.float32), "db"))]
    nodes = []
    src = "input"
    if int16_input:
        nodes.append(helper.make_node("Cast", ["input"], ["audio"], "cast", to=TensorProto.FLOAT))
        src = "audio"
    nodes += [helper.make_node("Unsqueeze", [src, "ax1"], ["x3"], "unsqueeze")]
    for part in ("real", "imag"):
        nodes += [helper.make_node("Conv", ["x3", f"stft_{part}"], [f"{part}_c"], f"conv_{part}",
                                   kernel_shape=[N_FFT], strides=[HOP]),
                  helper.make_node("Unsqueeze", [f"{part}_c", "ax1"], [f"{part}_4"], f"unsq_{part}"),
                  helper.make_node("Transpose", [f"{part}_4"], [part], f"tr_{part}", perm=[0, 1, 3, 2]),
                  helper.make_node("Pow", [part, "two"], [f"{part}_sq"], f"pow_{part}")]
    nodes.append(helper.make_node("Add", ["real_sq", "imag_sq"], ["power_sq" if magnitude else "power"], "power"))
    if magnitude:
        nodes.append(helper.make_node("Sqrt", ["power_sq"], ["power"], "magnitude"))
    if extra_linear_term:
        nodes.append(helper.make_node("Add", ["power", "real"], ["power_re"], "plus_re"))
    nodes += [helper.make_node("MatMul", ["power_re" if extra_linear_term else "power", "melW"], ["mel"], "mel"),
              helper.make_node("Add", ["mel", "eps"], ["mel_c"], "plus_eps") if add_eps else
              helper.make_node("Clip", ["mel", "eps", "inf"], ["mel_c"], "clamp"),
              helper.make_node("Log", ["mel_c"], ["ln"], "log"),
              helper.make_node("Mul", ["ln", "db"], ["output"], "to_db")]
    frames = (samples - N_FFT) // HOP + 1
    g = helper.make_graph(nodes, "log_mel", [helper.make_tensor_value_info(
        "input", TensorProto.INT16 if int16_input else TensorProto.FLOAT, [1, samples])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1, frames, N_MEL])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    if declared:
        helper.set_model_props(m, {"mrvl.input_range.input": repr(float(declared))})
    return m


def stft_magnitude(bins: int = 6, samples: int = 28, seed: int = 0, unnamed: bool = False) -> onnx.ModelProto:
    """Silero VAD's STFT front end: ``x [1,1,L] -> Conv1d (2 * bins filters, window 8, hop 4) ->
    Slice`` real / imaginary halves ``-> re^2 + im^2 -> Conv1d`` (4 channels). The default's
    ``(L - 8) / 4 + 1 == bins`` frames make the sliced tensors square ([1, bins, bins]).
    ``unnamed``: the Slices have no names (as faster-whisper's Silero VAD v6)."""
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)   # noqa: E731
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)   # noqa: E731
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], name="stft", strides=[4]),
             helper.make_node("Slice", ["c", "s0", "e0", "ax"], ["re"], name="" if unnamed else "re"),
             helper.make_node("Slice", ["c", "s1", "e1", "ax"], ["im"], name="" if unnamed else "im"),
             helper.make_node("Mul", ["re", "re"], ["re2"], name="re2"),
             helper.make_node("Mul", ["im", "im"], ["im2"], name="im2"),
             helper.make_node("Add", ["re2", "im2"], ["mag"], name="mag"),
             helper.make_node("Conv", ["mag", "W2"], ["y"], name="enc", pads=[1, 1])]
    inits = [numpy_helper.from_array(w(2 * bins, 1, 8), "W"), numpy_helper.from_array(w(4, bins, 3), "W2"), i64("s0", [0]),
             i64("e0", [bins]), i64("s1", [bins]), i64("e1", [2 * bins]), i64("ax", [1])]
    frames = (samples - 8) // 4 + 1
    g = helper.make_graph(nodes, "stft_magnitude", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, samples])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, frames])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m
