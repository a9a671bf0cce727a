"""Dynamic-int8 models (onnxruntime's ``quantize_dynamic``) converted with and without calibration
data, run on the simulator against onnxruntime (docs/quantize.md "Dynamic int8 models").

    python benchmarks/bench_dynamic_calibrated.py [MODEL ...] [--calibration N] [--held-out N] [--json OUT]
                                                  [--layer-outputs int8|fp16]

Models (``onnx_mrvl/testing``, seeded random weights): encoder_block (BERT-style encoder layer),
vit_like, mha_block("legacy", "hf") (HF BERT attention with its attention_mask), resnet18_like,
mobilenetv2_like and yolo_like at 64x64 (BatchNormalization folded by ``quant_pre_process`` first),
crnn_unrolled (convs + an LSTM unrolled into MatMuls), quantized by
``quantize_dynamic`` (QInt8 weights, per tensor). Inputs standard normal, seeded (calibration seed
1, held-out seed 2).

Per model: int8 layers / MatMulInteger+ConvInteger layers; fully offloaded (no MatMul/Conv/Q/DQ or
dynamic op on the CPU); against onnxruntime's run of the same calibrated static QDQ model
(``result.stages["quantize"]``): % of output elements identical, worst difference in output steps
(quantized outputs) and ``max|err| / max|ref|``, and how many outputs of the first 3 inputs are within
the fp16 bound (``max|err| <= 1e-2 max|ref|``, or the fp16 baseline's verdict "within fp16 rounding":
2x its error, or for outputs behind a QuantizeLinear at most 2x its flips, docs/simulator.md); the worst ``max|y - ref| / max|fp32|`` over the
held-out inputs of ours (calibrated int8) and of onnxruntime's static run against the fp32 model,
of onnxruntime's dynamic run against it, and of ours without calibration (fp16 layers with
dequantized weights); last, ours against onnxruntime's dynamic run (``max|y - dyn| / max|dyn|``). ``--layer-outputs``: ``fp16`` (the default: int8-in / fp16-out layers) or ``int8``
(``quantize_options={"layer_outputs": "int8"}``: int8 layers), docs/quantize.md "Dynamic int8 models".
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

DEFAULT = ("encoder_block", "vit_like", "bert_attention", "resnet18_like", "mobilenetv2_like", "yolo_like",
           "crnn_unrolled")
BOUND_INPUTS = 3   # held-out inputs also judged against the fp16 bound (compare with the fp16 baseline)


def build(name: str):
    from onnx_mrvl.testing.arch_attention import mha_block
    from onnx_mrvl.testing.arch_transformer import encoder_block, vit_like
    from onnx_mrvl.testing.models import mobilenetv2_like, resnet18_like, yolo_like
    from onnx_mrvl.testing.recurrent_models import crnn_unrolled
    return {"encoder_block": lambda: encoder_block(seed=0),
            "vit_like": lambda: vit_like(seed=0),
            "bert_attention": lambda: mha_block("legacy", "hf"),
            "resnet18_like": lambda: resnet18_like(seed=0, input_size=64),
            "mobilenetv2_like": lambda: mobilenetv2_like(seed=0, input_size=64, num_classes=10),
            "yolo_like": lambda: yolo_like(seed=0, input_size=64),
            "crnn_unrolled": lambda: crnn_unrolled(seed=0)}[name]()


def quantize_dynamic(model, folder: str):
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic as qd
    from onnxruntime.quantization.shape_inference import quant_pre_process
    src, dst = os.path.join(folder, "float.onnx"), os.path.join(folder, "dynamic.onnx")
    onnx.save(model, src)
    if any(n.op_type == "BatchNormalization" for n in model.graph.node):
        quant_pre_process(src, src, skip_symbolic_shape=True)
    qd(src, dst, weight_type=QuantType.QInt8)
    return src, dst


def run(name: str, n_calib: int, n_held: int, layer_outputs: str = "fp16") -> dict:
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper as nh

    import onnx_mrvl
    from onnx_mrvl.inspection.compare import compare_models
    from onnx_mrvl.testing.arch_attention import feeds
    with tempfile.TemporaryDirectory(prefix="bench_dyncal_") as tmp:
        src, dyn = quantize_dynamic(build(name), tmp)
        qm = onnx.load(dyn)
        inits = {t.name for t in qm.graph.initializer}

        def sample(seed):
            return {k: v for k, v in feeds(qm, seed=seed).items() if k not in inits}
        calib = [sample(1000 + i) for i in range(n_calib)]
        res = onnx_mrvl.convert(dyn, calibration=calib, quantize_options={"layer_outputs": layer_outputs})
        plain = onnx_mrvl.convert(dyn)
        res.save(os.path.join(tmp, "cal"))
        plain.save(os.path.join(tmp, "plain"))
        static = res.stages["quantize"]
        layers = [n.name for n in qm.graph.node if n.op_type in ("MatMulInteger", "ConvInteger")]
        int8 = [n for n in layers if res.report[n].precision in ("int8", "int8 in, fp16 out")]
        cpu_ops = sorted({n.op_type for n in res.model.graph.node if n.op_type in (
            "MatMul", "Conv", "Gemm", "QuantizeLinear", "DequantizeLinear", "MatMulInteger", "ConvInteger",
            "DynamicQuantizeLinear")})
        dq = {n.output[0]: n for n in static.graph.node if n.op_type == "DequantizeLinear"}
        sinit = {t.name: nh.to_array(t) for t in static.graph.initializer}
        sess = {k: ort.InferenceSession(m if isinstance(m, str) else m.SerializeToString())
                for k, m in (("fp32", src), ("dynamic", dyn), ("static", static))}
        ours = onnx_mrvl.InferenceSession(os.path.join(tmp, "cal", "model.onnx"))
        fp16 = onnx_mrvl.InferenceSession(os.path.join(tmp, "plain", "model.onnx"))
        same = total = 0
        steps, rel_static = None, 0.0   # steps: of the quantized outputs (None: only float outputs)
        worst = {"ours": 0.0, "static": 0.0, "dynamic": 0.0, "fp16": 0.0}
        ours_vs_dynamic = 0.0     # max|ours - dynamic| / max|dynamic|: against onnxruntime's dynamic run
        verdicts = []   # per (input, output) of the first BOUND_INPUTS: within the fp16 bound (docs/simulator.md)
        for i in range(n_held):
            f = sample(2000 + i)
            r = {k: s.run(None, f) for k, s in sess.items()}
            mine, plain_out = ours.run(None, f), fp16.run(None, f)
            if i < BOUND_INPUTS:
                cmp = compare_models(static, os.path.join(tmp, "cal", "model.onnx"), f, fp16_baseline=True)
                within = {x.tensor: x.within for x in cmp.baseline.rows if x.is_output}
                for k, o in enumerate(static.graph.output):
                    e = float(np.abs(mine[k] - r["static"][k]).max())
                    verdicts.append(e <= 1e-2 * float(np.abs(r["static"][k]).max()) or within.get(o.name, False))
            for k, o in enumerate(static.graph.output):
                a, s, c = r["fp32"][k], r["static"][k], mine[k]
                same += int(np.sum(c == s))
                total += c.size
                if o.name in dq:
                    steps = max(steps or 0.0, float(np.abs(c - s).max() / sinit[dq[o.name].input[1]]))
                rel_static = max(rel_static, float(np.abs(c - s).max() / np.abs(s).max()))
                d_out = r["dynamic"][k]
                ours_vs_dynamic = max(ours_vs_dynamic, float(np.abs(c - d_out).max() / np.abs(d_out).max()))
                ref = float(np.abs(a).max())
                for key, y in (("ours", c), ("static", s), ("dynamic", r["dynamic"][k]), ("fp16", plain_out[k])):
                    worst[key] = max(worst[key], float(np.abs(y - a).max()) / ref)
        return {"model": name, "int8_layers": len(int8), "layers": len(layers), "cpu_ops": cpu_ops,
                "identical_pct": round(100.0 * same / total, 2), "max_steps": None if steps is None else round(steps, 3),
                "vs_static_rel": rel_static, "vs_static_within_fp16": f"{sum(verdicts)} / {len(verdicts)}", "calibration": n_calib,
                "held_out": n_held, "ours_vs_dynamic": ours_vs_dynamic, "layer_outputs": layer_outputs,
                **{f"{k}_vs_fp32": v for k, v in worst.items()}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("models", nargs="*", default=list(DEFAULT))
    p.add_argument("--calibration", type=int, default=32)
    p.add_argument("--held-out", type=int, default=10)
    p.add_argument("--json")
    p.add_argument("--layer-outputs", choices=("fp16", "int8"), default="fp16")
    a = p.parse_args(argv)
    rows = []
    print("| model | int8 layers | fully offloaded | identical to onnxruntime static | max output steps | "
          "ours vs static (max|ref|) | within fp16 bound | ours vs fp32 | onnxruntime static vs fp32 | onnxruntime dynamic vs fp32 | "
          "no calibration (fp16) vs fp32 | ours vs onnxruntime dynamic |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in a.models:
        r = run(name, a.calibration, a.held_out, a.layer_outputs)
        rows.append(r)
        print(f"| {name} | {r['int8_layers']} / {r['layers']} | {'yes' if not r['cpu_ops'] else r['cpu_ops']} | "
              f"{r['identical_pct']}% | {'-' if r['max_steps'] is None else format(r['max_steps'], 'g')} | {r['vs_static_rel']:.1e} | {r['vs_static_within_fp16']} | {r['ours_vs_fp32']:.1e} | "
              f"{r['static_vs_fp32']:.1e} | {r['dynamic_vs_fp32']:.1e} | {r['fp16_vs_fp32']:.1e} | "
              f"{r['ours_vs_dynamic']:.1e} |", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
