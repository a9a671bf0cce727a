"""Survey of real PaddlePaddle exports: build PaddleOCR architectures from their published YAML configs
(random init: no weight download), export them the way PaddleOCR users do (``paddle.jit.save`` +
``paddle2onnx``, dynamic and fixed input shapes, opsets 11 / 14 / 17), then convert each with onnx_mrvl
and compare with onnxruntime's run of the same model (the ``survey`` of tools/survey_torch_exports.py).

Needs paddlepaddle, paddle2onnx and the PaddleOCR sources (``ppocr/modeling`` and ``configs/``, e.g. a
checkout of github.com/PaddlePaddle/PaddleOCR; not project dependencies: a learning tool, never run by
the tests). Export in a scratch venv, survey with the project's venv:

    python3 -m venv /tmp/pd && /tmp/pd/bin/pip install paddlepaddle paddle2onnx pyyaml packaging requests tqdm
    /tmp/pd/bin/python tools/survey_paddle_exports.py export OUT_DIR --ppocr PADDLEOCR_DIR [--ppdet PPDET_DIR] [NAME ...]
    python tools/survey_paddle_exports.py bnstats OUT_DIR [NAME ...]
    python tools/survey_paddle_exports.py survey OUT_DIR [NAME ...] [--quant]
    python tools/survey_paddle_exports.py baseline OUT_DIR [NAME ...]   # the fp16 numeric model's own error
    python tools/survey_paddle_exports.py identical OUT_DIR [NAME ...]  # QDQ: share of identical outputs

Each model NAME is written as ``NAME_<form>.onnx`` (form ``o11dyn``: opset 11, dynamic batch / size
axes as PaddleOCR's export_model.py declares them; ``o14fix`` / ``o17fix``: the input shape fixed, as
users do before deployment) with ``NAME_feeds.npz`` (one input). A dynamic model is converted with
``input_shapes`` taken from the feeds (what a user passes).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

# name: (config under configs/, input shape the feeds use, the dynamic axes of export_model.py,
#        number of classes of the CTC / cls head (the real dictionaries: ppocr_keys_v1 6623 + 2,
#        ppocrv5_dict 18383 + 2))
MODELS = {
    "ppocrv3_det": ("det/PP-OCRv3/PP-OCRv3_mobile_det.yml", [1, 3, 320, 320], [0, 2, 3], None),
    "ppocrv4_det": ("det/PP-OCRv4/PP-OCRv4_mobile_det.yml", [1, 3, 320, 320], [0, 2, 3], None),
    "ppocrv4_server_det": ("det/PP-OCRv4/PP-OCRv4_server_det.yml", [1, 3, 320, 320], [0, 2, 3], None),
    "ppocrv5_server_det": ("det/PP-OCRv5/PP-OCRv5_server_det.yml", [1, 3, 320, 320], [0, 2, 3], None),
    "ppocrv2_rec": ("rec/ch_ppocr_v2.0/rec_chinese_lite_train_v2.0.yml", [1, 3, 32, 320], [0, 3], 6625),
    "ppocrv3_rec": ("rec/PP-OCRv3/PP-OCRv3_mobile_rec.yml", [1, 3, 48, 320], [0, 3], 6625),
    "ppocrv4_rec": ("rec/PP-OCRv4/PP-OCRv4_mobile_rec.yml", [1, 3, 48, 320], [0, 3], 6625),
    "ppocrv4_server_rec": ("rec/PP-OCRv4/PP-OCRv4_server_rec.yml", [1, 3, 48, 320], [0, 3], 6625),
    "ppocrv5_rec": ("rec/PP-OCRv5/PP-OCRv5_mobile_rec.yml", [1, 3, 48, 320], [0, 3], 18385),
    "ppocrv5_server_rec": ("rec/PP-OCRv5/PP-OCRv5_server_rec.yml", [1, 3, 48, 320], [0, 3], 18385),
    "ppocr_cls": ("cls/cls_mv3.yml", [1, 3, 48, 192], [0], None),
    "ppyoloe_s": (None, [1, 3, 320, 320], [0, 2, 3], None),   # --ppdet: PaddleDetection / PaddleYOLO sources
}
FORMS = {"o11dyn": (11, True), "o14fix": (14, False), "o17fix": (17, False)}


def _arch(ppocr: str, cfg: str, classes):
    import yaml
    with open(os.path.join(ppocr, "configs", cfg)) as f:
        arch = yaml.safe_load(f)["Architecture"]
    head = arch["Head"]
    if head["name"] == "MultiHead":   # tools/export_model.py: out_channels_list from the dictionary
        head["out_channels_list"] = {"CTCLabelDecode": classes, "SARLabelDecode": classes + 2,
                                     "NRTRLabelDecode": classes + 3}
    elif classes:
        head["out_channels"] = classes
    return arch


def _pir_float_arrays(path: str) -> None:
    """paddle 3.3 writes array attributes of floats (nearest_interp's ``scale``) as f64 elements, which
    paddle2onnx 2.1's PIR parser refuses ("the 0th elementwise MUST be ir::FloatAttribute"): f32 again."""
    import json
    with open(path) as f:
        prog = json.load(f)

    def walk(v):
        if isinstance(v, dict):
            if v.get("#") == "0.a_array" and v.get("D") and all(isinstance(e, dict) and e.get("#") == "0.a_f64"
                                                                for e in v["D"]):
                for e in v["D"]:
                    e["#"] = "0.a_f32"
            for w in v.values():
                walk(w)
        elif isinstance(v, list):
            for w in v:
                walk(w)
    walk(prog)
    with open(path, "w") as f:
        json.dump(prog, f)


def _ppyoloe(ppdet: str):
    """PP-YOLOE+ s as PaddleDetection users export it for ONNX runtimes (``exclude_post_process``:
    ``[1, anchors, 4 + 80]`` boxes and scores, NMS on the host); the head's last convs, which start at
    zero, get random weights so that the output depends on the image."""
    import paddle
    sys.path.insert(0, ppdet)
    from ppdet.core.workspace import create, load_config
    cfg = load_config(os.path.join(ppdet, "configs/ppyoloe/ppyoloe_plus_crn_s_80e_coco.yml"))
    cfg["PPYOLOEHead"]["exclude_post_process"] = True
    cfg["PPYOLOEHead"]["eval_size"] = None   # a shared key: anchors made for the traced size, not 640
    if "eval_size" in cfg:
        cfg["eval_size"] = None
    det = create(cfg.architecture)
    for convs in (det.yolo_head.pred_cls, det.yolo_head.pred_reg):
        for c in convs:
            c.weight.set_value(paddle.normal(0.0, 0.05, c.weight.shape))

    class Head(paddle.nn.Layer):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            out, _ = self.m.yolo_head.post_process(self.m.yolo_head(self.m.neck(self.m.backbone({"image": x}))), None)
            return out
    return Head(det)


def export(out: str, names, ppocr: str, ppdet: str = "") -> int:
    import paddle
    import paddle2onnx
    if ppocr:
        sys.path.insert(0, ppocr)
    os.makedirs(out, exist_ok=True)
    for name, (cfg, shape, dyn, classes) in MODELS.items():
        if (names and name not in names) or (not ppdet and name == "ppyoloe_s") or (not ppocr and name != "ppyoloe_s"):
            continue
        paddle.seed(0)
        if name == "ppyoloe_s":
            model = _ppyoloe(ppdet)
        else:
            from ppocr.modeling.architectures import build_model
            model = build_model(_arch(ppocr, cfg, classes))
        model.eval()
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        np.savez(os.path.join(out, f"{name}_feeds.npz"), x)
        for form, (opset, dynamic) in FORMS.items():
            spec = [None if (dynamic and i in dyn) else d for i, d in enumerate(shape)]
            prefix = os.path.join(out, "paddle", f"{name}_{form}", "inference")
            path = os.path.join(out, f"{name}_{form}.onnx")
            try:
                static = paddle.jit.to_static(model, input_spec=[paddle.static.InputSpec(spec, "float32", "x")],
                                              full_graph=True)
                paddle.jit.save(static, prefix)
                graph = prefix + (".json" if os.path.exists(prefix + ".json") else ".pdmodel")
                if graph.endswith(".json"):
                    _pir_float_arrays(graph)
                paddle2onnx.export(graph, prefix + ".pdiparams", path, opset_version=opset, enable_onnx_checker=True)
                print("exported", path, flush=True)
            except Exception as exc:   # noqa: BLE001 - a survey: report and go on
                print("FAILED", path, type(exc).__name__, str(exc)[-1500:], flush=True)
    return 0


def _bn_constants_to_initializers(model) -> None:
    """paddle2onnx 1.x writes BatchNormalization parameters as Constant nodes: initializers (same values)."""
    bn_params = {i for n in model.graph.node if n.op_type == "BatchNormalization" for i in n.input[1:5]}
    keep = []
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output[0] in bn_params and n.attribute[0].name == "value":
            t = n.attribute[0].t
            t.name = n.output[0]
            model.graph.initializer.append(t)
        else:
            keep.append(n)
    del model.graph.node[:]
    model.graph.node.extend(keep)


def bn_stats(folder: str, names) -> int:
    """Random init drifts (fp16 overflows after ~100 layers of PP-LCNetV3 / PP-HGNet): every
    BatchNormalization gets the running statistics of what it reads on the survey's feeds, as a trained
    network has (onnx_mrvl.testing.bn_stats); in place, once per model file."""
    import glob
    import onnx
    from onnx_mrvl.testing.bn_stats import data_bn_stats
    from survey_torch_exports import _feeds
    for src in sorted(glob.glob(os.path.join(folder, "*.onnx"))):
        name = os.path.basename(src)[:-5]
        if (names and not any(n in name for n in names)) or os.path.exists(src + ".bnstats"):
            continue
        model = onnx.load(src)
        _bn_constants_to_initializers(model)
        onnx.save(data_bn_stats(model, _feeds(src, 1, 5)), src)
        open(src + ".bnstats", "w").close()
        print("bn statistics", src, flush=True)
    return 0


def baseline(folder: str, names) -> int:
    """The fp16 baseline of each model (docs/simulator.md's numeric model: the original run in
    onnxruntime with every float tensor stored in fp16): max|err| / max|ref| of its outputs against the
    fp32 run on the survey's feeds, the floor a converted model's error is judged against (random
    weights make deep OCR nets fp16-sensitive)."""
    import glob
    import onnx
    import onnxruntime as ort
    from onnx_mrvl.inspection.fp16_baseline import run_fp16_baseline
    from survey_torch_exports import _feeds, _input_shapes
    for src in sorted(glob.glob(os.path.join(folder, "*.onnx"))):
        name = os.path.basename(src)[:-5]
        if names and not any(n in name for n in names):
            continue
        model = onnx.load(src)
        if _input_shapes(src, src):
            continue
        ref = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
        outs = [o.name for o in model.graph.output]
        err = 0.0
        for f in _feeds(src, 3, 2):
            got = run_fp16_baseline(model, f)
            for o, b in zip(outs, ref.run(outs, f)):
                err = max(err, float(np.abs(got[o] - b).max() / (np.abs(b).max() or 1)))
        print(f"{name} fp16 baseline: err vs onnxruntime {err:.2e}", flush=True)
    return 0


def identical(folder: str, names) -> int:
    """For each QDQ model ``survey --quant`` wrote (``survey/NAME_s8.onnx`` / ``_u8``) and converted
    (``survey/NAME_s8``): the share of output elements identical to onnxruntime's run of that QDQ
    model, per survey feed (the QDQ criterion; max|err| / max|ref| says little when the output holds
    a few codes, e.g. a 6625-class softmax)."""
    import glob
    import onnxruntime as ort
    import onnx_mrvl
    from survey_torch_exports import _feeds
    for qdq in sorted(glob.glob(os.path.join(folder, "survey", "*_[su]8.onnx"))):
        name = os.path.basename(qdq)[:-5]
        base = name.rsplit("_", 1)[0]
        if (names and not any(n in name for n in names)) or not os.path.isdir(qdq[:-5]):
            continue
        sess = onnx_mrvl.InferenceSession(os.path.join(qdq[:-5], "model.onnx"))
        ref = ort.InferenceSession(qdq, providers=["CPUExecutionProvider"])
        same = [float(np.mean([np.mean(a == b) for a, b in zip(sess.run(None, f), ref.run(None, f))]))
                for f in _feeds(os.path.join(folder, base + ".onnx"), 3, 2)]
        print(f"{name}: identical to onnxruntime {' / '.join(f'{100 * v:.3f}%' for v in same)}", flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["export", "bnstats", "baseline", "survey", "identical"])
    ap.add_argument("folder")
    ap.add_argument("names", nargs="*")
    ap.add_argument("--ppocr", help="export: a PaddleOCR source folder (ppocr/modeling, configs)")
    ap.add_argument("--ppdet", default="", help="export: a PaddleDetection / PaddleYOLO source folder (ppdet, configs)")
    ap.add_argument("--quant", action="store_true", help="survey: also QDQ S8 / U8 and dynamic int8 (+ calibration)")
    a = ap.parse_intermixed_args(argv)
    if a.command == "export":
        if not a.ppocr and not a.ppdet:
            ap.error("export needs --ppocr PADDLEOCR_DIR and / or --ppdet PADDLEDETECTION_DIR")
        return export(a.folder, a.names, a.ppocr, a.ppdet)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from survey_torch_exports import survey
    if a.command == "bnstats":
        return bn_stats(a.folder, a.names)
    if a.command == "baseline":
        return baseline(a.folder, a.names)
    if a.command == "identical":
        return identical(a.folder, a.names)
    return survey(a.folder, a.names, a.quant)


if __name__ == "__main__":
    sys.exit(main())
