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
import shutil
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


def _walk_to_output_shape(model, t: str):
    """The static shape of graph output reached from ``t`` through one-input shape-keeping ops."""
    outs = {o.name: [d.dim_value for d in o.type.tensor_type.shape.dim] for o in model.graph.output}
    while t not in outs:
        users = [n for n in model.graph.node if t in n.input]
        if len(users) != 1 or users[0].op_type not in ("Sigmoid", "Relu", "Tanh", "Identity", "Softmax"):
            return None
        t = users[0].output[0]
    return outs[t]


def replace_transpose_conv_bias(src: str, dst: str) -> bool:
    """MediaPipe's TFLite custom op ``Convolution2DTransposeBias`` (tf2onnx passes it through as
    ``TFL_Convolution2DTransposeBias``, its stride / padding options dropped: NHWC x, OHWI weights,
    bias) -> ``Transpose -> ConvTranspose -> Transpose``, stride and SAME / VALID padding read from
    the input and output shapes (the output's from the graph output it reaches). What a user does
    before converting (onnx_mrvl refuses the custom op as onnxruntime does); False: nothing to do."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.shape_inference.infer_shapes(onnx.load(src), strict_mode=False)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in m.graph.value_info}
    init = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    nodes, done = [], False
    for n in m.graph.node:
        if n.op_type != "TFL_Convolution2DTransposeBias":
            nodes.append(n)
            continue
        w, b = init[n.input[1]], init[n.input[2]]             # [O, kh, kw, I], [O]
        sx, sy = shapes.get(n.input[0]), _walk_to_output_shape(m, n.output[0])
        if sx is None or sy is None:
            raise ValueError(f"{n.name}: input / output shape unknown")
        strides, begin, end = [], [], []
        for i, o, k in zip(sx[1:3], sy[1:3], w.shape[1:3]):
            s = o // i if o % i == 0 else (o - k) // (i - 1)   # SAME: o = i s; VALID: o = (i - 1) s + k
            total = (i - 1) * s + k - o
            if s < 1 or total < 0:
                raise ValueError(f"{n.name}: no stride maps {i} to {o} with a {k}-tap kernel")
            strides.append(s)
            begin.append(total // 2)
            end.append(total - total // 2)
        wn, bn = f"{n.name}/W_iohw", f"{n.name}/B"
        m.graph.initializer.extend([numpy_helper.from_array(np.ascontiguousarray(w.transpose(3, 0, 1, 2)), wn),
                                    numpy_helper.from_array(b.astype(np.float32), bn)])
        nodes += [helper.make_node("Transpose", [n.input[0]], [f"{n.name}/nchw"], perm=[0, 3, 1, 2]),
                  helper.make_node("ConvTranspose", [f"{n.name}/nchw", wn, bn], [f"{n.name}/y"], name=n.name,
                                   kernel_shape=list(w.shape[1:3]), strides=strides, pads=begin + end),
                  helper.make_node("Transpose", [f"{n.name}/y"], [n.output[0]], perm=[0, 2, 3, 1])]
        done = True
    if done:
        del m.graph.node[:]
        m.graph.node.extend(nodes)
        del m.graph.value_info[:]
        onnx.save(m, dst)
    return done


_TFLITE_RUN = """
import sys, numpy as np, tensorflow as tf
i = tf.lite.Interpreter(model_path=sys.argv[1]); i.allocate_tensors()
x = list(np.load(sys.argv[2]).values())
for d, a in zip(i.get_input_details(), x):
    i.set_tensor(d["index"], a)
i.invoke()
np.savez(sys.argv[3], **{d["name"]: i.get_tensor(d["index"]) for d in i.get_output_details()})
"""


# tf2onnx 1.17 reads a sparse constant (TFLite DENSIFY: MediaPipe's full-range face detector and
# pose detector) as a dense buffer and fails ("cannot reshape array of size 96 into shape (16,1,1,24)").
# Run on failure: the dense values of each DENSIFY input come from the TFLite interpreter, tf2onnx
# reads them in place of the sparse buffer, DENSIFY becomes Identity. Arguments: tf2onnx.convert's.
_DENSIFY_CONVERT = """
import sys

import numpy as np
import tensorflow as tf
from tf2onnx import tflite_utils
from tf2onnx.handler import tfl_op
from tf2onnx.tflite.Model import Model


@tfl_op("TFL_DENSIFY", tf_op="Identity")
class TflDensify:
    @classmethod
    def to_tf(cls, ctx, node, **kwargs):
        pass


tfl = sys.argv[sys.argv.index("--tflite") + 1]
interp = tf.lite.Interpreter(   # without XNNPACK: it takes the weights and leaves DENSIFY's output unset
    model_path=tfl, experimental_preserve_all_tensors=True,
    experimental_op_resolver_type=tf.lite.experimental.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
interp.allocate_tensors()
for d in interp.get_input_details():
    interp.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
interp.invoke()
dense_of = {op["inputs"][0]: interp.get_tensor(op["outputs"][0])
            for op in interp._get_ops_details() if op["op_name"] == "DENSIFY"}
with open(tfl, "rb") as f:
    buf = f.read()
model = Model.GetRootAsModel(buf, 0)
g = model.Subgraphs(0)
by_bytes = {}
for i, dense in dense_of.items():
    b = model.Buffers(g.Tensors(i).Buffer())
    by_bytes[b.DataAsNumpy().tobytes()] = dense

make = tflite_utils.tensor_util.MakeNdarray


class _Util:
    @staticmethod
    def MakeNdarray(t):   # noqa: N802 - tensorflow's name
        hit = by_bytes.get(t.tensor_content)
        return np.array(hit) if hit is not None else make(t)


tflite_utils.tensor_util = _Util
from tf2onnx import convert  # noqa: E402

sys.argv = ["tf2onnx.convert"] + sys.argv[1:]
convert.main()
"""


def check_against_tflite(tfl: str, model: str, feeds: str, tf_python: str) -> str:
    """max|onnxruntime - TFLite| / max|TFLite| of ``model`` on ``feeds`` (per output, the worst)."""
    import tempfile

    import onnxruntime as ort
    with tempfile.TemporaryDirectory() as tmp:
        ref = os.path.join(tmp, "ref.npz")
        subprocess.run([tf_python, "-c", _TFLITE_RUN, tfl, feeds, ref], check=True, capture_output=True)
        want = dict(np.load(ref))
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    got = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], np.load(feeds).values())))
    errs = [float(np.abs(g - want[o.name]).max() / (np.abs(want[o.name]).max() or 1))
            for g, o in zip(got, sess.get_outputs()) if o.name in want]
    return f"max|onnxruntime - TFLite| / max|TFLite| {max(errs):.2e}" if errs else "no output names in common"


def export(models: str, out: str, names, tf_python: str = TF_PYTHON, opsets=(13, 17)) -> int:
    """tf2onnx each ``.tflite`` under ``models`` (subfolders too) at each opset (a failure is printed, the survey goes on) and
    write its image-like feeds."""
    import onnx
    os.makedirs(out, exist_ok=True)
    for tfl in sorted(glob.glob(os.path.join(models, "**", "*.tflite"), recursive=True)):
        name = _name(tfl)
        if names and not any(n in name for n in names):
            continue
        done = None
        for opset in opsets:
            path = os.path.join(out, f"{name}_op{opset}.onnx")
            t0 = time.time()
            args = ["--tflite", tfl, "--output", path, "--opset", str(opset)]
            r = subprocess.run([tf_python, "-m", "tf2onnx.convert"] + args, capture_output=True, text=True)
            note = ""
            if r.returncode != 0 and "cannot reshape array" in r.stderr:
                r = subprocess.run([tf_python, "-c", _DENSIFY_CONVERT] + args, capture_output=True, text=True)
                note = "(sparse constants densified by the TFLite interpreter) "
            ok = r.returncode == 0 and os.path.exists(path)
            print("exported" if ok else "FAILED", path, f"{time.time() - t0:.0f}s", note,
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
        for opset in opsets:
            path = os.path.join(out, f"{name}_op{opset}.onnx")
            try:
                if os.path.exists(path):
                    print(path, check_against_tflite(tfl, path, os.path.join(out, f"{name}_feeds.npz"), tf_python),
                          flush=True)
            except Exception as exc:   # noqa: BLE001 - onnxruntime refuses custom ops: said by the survey
                print(path, "not run by onnxruntime:", type(exc).__name__, str(exc)[:150], flush=True)
        for opset in opsets:   # the custom op replaced as a user would: "<name>-ct" files
            src = os.path.join(out, f"{name}_op{opset}.onnx")
            dst = os.path.join(out, f"{name}-ct_op{opset}.onnx")
            try:
                if os.path.exists(src) and replace_transpose_conv_bias(src, dst):
                    shutil.copy(os.path.join(out, f"{name}_feeds.npz"), os.path.join(out, f"{name}-ct_feeds.npz"))
                    print("exported", dst, "(TFL_Convolution2DTransposeBias -> ConvTranspose):",
                          check_against_tflite(tfl, dst, os.path.join(out, f"{name}_feeds.npz"), tf_python), flush=True)
            except Exception as exc:   # noqa: BLE001 - a survey: report and go on
                print("FAILED", dst, type(exc).__name__, str(exc)[:300], flush=True)
    return 0


def main(argv=None) -> int:
    ap = base.parser(__doc__)
    ap.add_argument("--out", help="export: the folder written (the models' folder is only read)")
    ap.add_argument("--tf-python", default=TF_PYTHON, help="export: a python with tensorflow-cpu and tf2onnx")
    ap.add_argument("--opsets", type=int, nargs="+", default=[13, 17], help="export: tf2onnx --opset values")

    def export_cmd(a):
        if not a.out:
            ap.error("export needs --out OUT_DIR")
        return export(a.folder, a.out, a.names, a.tf_python, a.opsets)
    return base.run(ap, argv, {"export": export_cmd})


if __name__ == "__main__":
    sys.exit(main())
