"""Survey of real trained TensorFlow Lite models (the MediaPipe 0.10.14 wheel's ``modules/*/*.tflite``:
BlazeFace / palm / pose detectors, face / hand / pose / iris landmark CNNs, selfie segmentation)
converted to ONNX with tf2onnx (``python -m tf2onnx.convert --tflite``) the way users do, then
surveyed with the survey part of ``tools/survey_torch_exports.py`` (onnx_mrvl against onnxruntime's
run of the same model; ``--quant`` adds quantize_static S8 / U8 and quantize_dynamic).

The models come from the wheel, nothing downloads at run time (a learning tool for developers, never
run by the tests)::

    pip download --no-deps mediapipe==0.10.14 -d WHEELS && unzip WHEELS/mediapipe-*.whl 'mediapipe/modules/*'
    python tools/survey_tflite_exports.py export MODELS_DIR [NAME ...] --out OUT_DIR [--tf-python PY] [--opsets 13 17]
    python tools/survey_tflite_exports.py survey OUT_DIR [NAME ...] [--quant]

``export`` runs tf2onnx with ``--tf-python`` (a venv with tensorflow-cpu and tf2onnx; default
``/tmp/tfsurvey-venv/bin/python``) and writes ``<name>_op<opset>.onnx`` and one ``<name>_feeds.npz``
per model: an image-like input (a smooth random field, bright ellipses and dark strokes, as a camera
frame of a face or a hand is at the model's scale) in the range MediaPipe's preprocessing
(``ImageToTensorCalculator``'s ``output_tensor_float_range``) feeds the model: [-1, 1] for the
BlazeFace / pose detectors and the holistic hand re-crop model, [0, 1] for the others. ``<name>``
is the file name without MediaPipe's ``mediapipe__modules__<module>__`` prefix.
Measured with it: docs/surveys/tflite.md.
"""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import survey_torch_exports as base  # noqa: E402

TF_PYTHON = "/tmp/tfsurvey-venv/bin/python"
SIGNED = ("face_detection", "pose_detection", "hand_recrop")   # [-1, 1] inputs; the others [0, 1]


def _name(path: str) -> str:
    stem = os.path.basename(path)[: -len(".tflite")]
    return stem.split("__")[-1]


def image_like(shape, lo: float, hi: float, seed: int = 0) -> np.ndarray:
    """An NHWC (or NCHW, channels the smaller of dims 1 / 3) float image in [lo, hi]: a smooth colour
    field (bilinear upsampling of an 8x8 grid), two bright ellipses, dark strokes and a little noise."""
    n, a, b, c = shape
    nchw = a < c
    h, w, ch = (b, c, a) if nchw else (a, b, c)
    rng = np.random.default_rng(seed)
    grid = rng.uniform(0.2, 0.8, (8, 8, ch))
    yy, xx = np.linspace(0, 7, h), np.linspace(0, 7, w)
    y0, x0 = np.minimum(yy.astype(int), 6), np.minimum(xx.astype(int), 6)
    fy, fx = (yy - y0)[:, None, None], (xx - x0)[None, :, None]
    img = (grid[y0][:, x0] * (1 - fy) * (1 - fx) + grid[y0 + 1][:, x0] * fy * (1 - fx)
           + grid[y0][:, x0 + 1] * (1 - fy) * fx + grid[y0 + 1][:, x0 + 1] * fy * fx)
    Y, X = np.mgrid[0:h, 0:w] / np.array([h, w])[:, None, None]
    for cy, cx, ry, rx in ((0.45, 0.5, 0.3, 0.22), (0.7, 0.3, 0.12, 0.2)):
        m = ((Y - cy) / ry) ** 2 + ((X - cx) / rx) ** 2 < 1
        img[m] = 0.6 * img[m] + 0.4 * np.array([0.9, 0.75, 0.65][:ch] + [0.8] * (ch - 3))
    for k in range(6):   # strokes: lines of width ~h/60
        t = rng.uniform(0, 1, 4)
        d = np.abs((X - t[0]) * (t[3] - t[1]) - (Y - t[1]) * (t[2] - t[0])) / (np.hypot(t[2] - t[0], t[3] - t[1]) + 1e-6)
        img[d < 1.0 / 60] *= 0.3
    img = np.clip(img + rng.normal(0, 0.02, img.shape), 0, 1)
    out = lo + (hi - lo) * img
    out = np.repeat(out[None], n, 0)
    return (out.transpose(0, 3, 1, 2) if nchw else out).astype(np.float32)


def export(models: str, out: str, names, tf_python: str = TF_PYTHON, opsets=(13, 17)) -> int:
    """tf2onnx each ``MODELS/*.tflite`` at each opset (a failure is printed, the survey goes on) and
    write its image-like feeds."""
    import onnx
    os.makedirs(out, exist_ok=True)
    for tfl in sorted(glob.glob(os.path.join(models, "*.tflite"))):
        name = _name(tfl)
        if names and not any(n in name for n in names):
            continue
        done = None
        for opset in opsets:
            path = os.path.join(out, f"{name}_op{opset}.onnx")
            t0 = time.time()
            r = subprocess.run([tf_python, "-m", "tf2onnx.convert", "--tflite", tfl, "--output", path,
                                "--opset", str(opset)], capture_output=True, text=True)
            ok = r.returncode == 0 and os.path.exists(path)
            print("exported" if ok else "FAILED", path, f"{time.time() - t0:.0f}s",
                  "" if ok else r.stderr[-400:], flush=True)
            done = path if ok else done
        if done is None:
            continue
        lo, hi = (-1.0, 1.0) if any(s in name for s in SIGNED) else (0.0, 1.0)
        feeds = []
        for i in onnx.load(done, load_external_data=False).graph.input:
            shape = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
            feeds.append(image_like(shape, lo, hi) if len(shape) == 4 else
                         np.random.default_rng(0).uniform(lo, hi, shape).astype(np.float32))
        np.savez(os.path.join(out, f"{name}_feeds.npz"), *feeds)
    return 0


def main(argv=None) -> int:
    ap = base.parser(__doc__)
    ap.add_argument("--out", help="export: the folder written (the models' folder is only read)")
    ap.add_argument("--tf-python", default=TF_PYTHON, help="export: a python with tensorflow-cpu and tf2onnx")
    ap.add_argument("--opsets", type=int, nargs="+", default=[13, 17], help="export: tf2onnx --opset values")
    a = ap.parse_intermixed_args(argv)
    if a.command == "export":
        if not a.out:
            ap.error("export needs --out OUT_DIR")
        return export(a.folder, a.out, a.names, a.tf_python, a.opsets)
    return base.survey(a.folder, a.names, a.quant, a.clean)


if __name__ == "__main__":
    sys.exit(main())
