"""Survey of the dynamic / weight-only int8 forms users export (docs/surveys/dynamic-int8.md):
onnxruntime's ``quantize_dynamic`` variants (per channel, reduce_range, QInt8 / QUInt8, symmetric
activations, MatMulConstBOnly, Optimum's operator list, EnableSubgraph), the same models saved by
onnxruntime after its graph optimizations (``optimized_model_filepath`` at ORT_ENABLE_EXTENDED /
ORT_ENABLE_ALL: DynamicQuantizeMatMul, MatMulIntegerToFloat, DynamicQuantizeLSTM, NCHWc convs), and
weight-only block quantization (``matmul_nbits_quantizer``: MatMulNBits, GatherBlockQuantized,
DequantizeLinear with block_size). Each is converted with onnx_mrvl without and with ``calibration=``
(4 samples) and compared with onnxruntime's run of the same quantized model and with the fp32 model.

    python tools/survey_dynamic_int8.py survey OUT [MODEL ...] [--forms F,...] [--nbits-python PY]

MODEL: a seeded builder name (BUILDERS: transformer / speech encoders of testing.int8_exports, a
CNN, recurrent and control-flow models) or the path of an fp32 .onnx with a ``<name>_feeds.npz``
beside it (tools/survey_torch_exports.py's export layout). The weight-only forms need ``onnx_ir``
(not a project dependency): ``--nbits-python`` names a Python with onnxruntime + onnx_ir that runs
this file's ``nbits`` command. One line per (model, form, calibration): regions, offload share,
CPU ops, ours vs onnxruntime (q), onnxruntime (q) vs fp32, ours vs fp32 (``max|err| / max|ref|``
over 2 seeded inputs); a failure prints its error.
"""
from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys

import numpy as np

DYNAMIC = {   # form -> quantize_dynamic keywords (weight_type "s8" / "u8"; "ort": optimization level saved)
    "s8": dict(wt="s8"), "u8": dict(wt="u8"), "s8_pc": dict(wt="s8", per_channel=True),
    "u8_rr": dict(wt="u8", reduce_range=True), "s8_pc_rr": dict(wt="s8", per_channel=True, reduce_range=True),
    "sym": dict(wt="s8", extra_options={"ActivationSymmetric": True, "WeightSymmetric": True}),
    "cbonly": dict(wt="s8", extra_options={"MatMulConstBOnly": True}),
    "optimum": dict(wt="s8", op_types_to_quantize=["Attention", "Conv", "EmbedLayerNormalization", "Gather", "LSTM",
                                                   "MatMul", "Transpose"], extra_options={"WeightSymmetric": True}),
    "subgraph": dict(wt="s8", extra_options={"EnableSubgraph": True}),
    "ext_s8": dict(wt="s8", ort="extended"), "ext_s8_pc": dict(wt="s8", per_channel=True, ort="extended"),
    "all_s8": dict(wt="s8", ort="all"), "all_matmul": dict(wt="s8", op_types_to_quantize=["MatMul", "Gemm"], ort="all"),
}
NBITS = ("nb4", "nb4_sym", "nb8", "nb4_gather", "qdq4")   # weight-only (matmul_nbits_quantizer)


def _builders():
    from onnx_mrvl.testing import control_flow_models as CF
    from onnx_mrvl.testing import int8_exports as IE
    from onnx_mrvl.testing import models as M
    from onnx_mrvl.testing import recurrent_models as R
    b = dict(IE.MODELS)
    b.update(mobilenetv2=lambda: M.mobilenetv2_like(opset=13, input_size=64),
             stacked_bilstm=R.stacked_bilstm, keras_lstm=R.keras_lstm_tf2onnx, vad_branches=CF.vad_like)
    return b


def _feeds(model, src: str, seed: int):
    """The export's saved feeds (noised per seed) or testing.arch_speech's ids / masks / N(0, 1)."""
    npz = next((f for f in (src[:-5] + "_feeds.npz", src[:-5].rsplit("_", 1)[0] + "_feeds.npz")   # NAME_ts.onnx
                if os.path.exists(f)), None)
    if npz:
        rng = np.random.default_rng(seed)
        arrs = list(np.load(npz).values())
        return {i.name: (a + (0.1 * rng.standard_normal(a.shape)).astype(a.dtype) if a.dtype.kind == "f" and seed else a)
                for i, a in zip(model.graph.input, arrs)}
    from onnx_mrvl.testing import arch_speech
    feeds = arch_speech.feeds(model, seed)
    for i in model.graph.input:    # an If's sample-rate switch (vad_branches): 8 or 16
        if i.type.tensor_type.elem_type == 7 and not i.type.tensor_type.shape.dim:
            feeds[i.name] = np.array(8 if seed % 2 else 16, np.int64)
    return feeds


def quantize(src: str, dst: str, form: str, nbits_python: str = "") -> None:
    import onnxruntime as ort
    from onnxruntime import quantization as q
    if form in NBITS:
        subprocess.run([nbits_python or sys.executable, os.path.abspath(__file__), "nbits", src, dst, form], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return
    kw = dict(DYNAMIC[form])
    wt, level = kw.pop("wt"), kw.pop("ort", None)
    tmp = dst + ".dyn.onnx" if level else dst
    q.quantize_dynamic(src, tmp, weight_type=q.QuantType.QInt8 if wt == "s8" else q.QuantType.QUInt8, **kw)
    if level:
        so = ort.SessionOptions()
        so.graph_optimization_level = {"extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                                       "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
        so.optimized_model_filepath = dst
        so.log_severity_level = 3
        ort.InferenceSession(tmp, so, providers=["CPUExecutionProvider"])


def nbits(src: str, dst: str, form: str) -> None:
    """Weight-only: MatMulNBits (4 / 8 bits, block 32; ``_gather``: embeddings GatherBlockQuantized) or
    ``qdq4``: DequantizeLinear with block_size (opset 21). Needs onnx_ir."""
    import onnx
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization import matmul_nbits_quantizer as mnq
    ops = ("MatMul", "Gather") if form.endswith("_gather") else ("MatMul",)
    cfg = mnq.DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=form.endswith("_sym"),
                                           quant_format=QuantFormat.QDQ if form.startswith("qdq") else QuantFormat.QOperator,
                                           op_types_to_quantize=ops, quant_axes=(("MatMul", 0), ("Gather", 1)),
                                           bits=8 if form == "nb8" else 4)
    quantizer = mnq.MatMulNBitsQuantizer(onnx.load(src), algo_config=cfg)
    quantizer.process()
    quantizer.model.save_model_to_file(dst, False)


def _rel(ref, got) -> float:
    return max(float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-30)) for a, b in zip(ref, got))


def line(name: str, src: str, qpath: str, form: str, calibration: int, work: str) -> str:
    import onnx
    import onnxruntime as ort
    import onnx_mrvl
    tag = f"{name} {form}{' +calibration' if calibration else ''}"
    try:
        model = onnx.load(src)
        cal = [_feeds(model, src, 1000 + i) for i in range(calibration)] or None
        r = onnx_mrvl.convert(qpath, calibration=cal)
        folder = os.path.join(work, f"{name}_{form}_{calibration}")
        r.save(folder, overwrite=True)
        ours = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
        so = ort.SessionOptions()
        so.log_severity_level = 3
        ref = ort.InferenceSession(qpath, so, providers=["CPUExecutionProvider"])
        fp = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
        e_q = e_qf = e_f = 0.0
        for seed in range(2):
            x = _feeds(model, src, seed)
            y, yq, yf = ours.run(None, x), ref.run(None, x), fp.run(None, x)
            if not all(np.isfinite(a).all() for a in y):
                raise ValueError("non-finite values in the converted model's output")
            e_q, e_qf, e_f = max(e_q, _rel(yq, y)), max(e_qf, _rel(yf, yq)), max(e_f, _rel(yf, y))
    except Exception as exc:   # noqa: BLE001 - a survey: report and go on
        return f"{tag}: {type(exc).__name__}: {str(exc)[:240]}"
    cpu = collections.Counter(d.op_type for d in r.report.cpu_nodes())
    return (f"{tag}: regions {len(r.report.regions)} offload {r.report.offload_fraction:.3f} cpu {dict(cpu) or '-'} "
            f"ours vs q {e_q:.2e} q vs fp32 {e_qf:.2e} ours vs fp32 {e_f:.2e}")


def survey(out: str, names, forms, nbits_python: str = "") -> int:
    import logging
    import onnx
    logging.disable(logging.WARNING)
    os.makedirs(out, exist_ok=True)
    builders = _builders()
    for name in names or list(builders):
        if name in builders:
            src = os.path.join(out, f"{name}.onnx")
            onnx.save(builders[name](), src)
        else:
            src, name = name, os.path.basename(name)[:-5]
        for form in forms:
            qpath = os.path.join(out, f"{name}_{form}.onnx")
            try:
                quantize(src, qpath, form, nbits_python)
            except Exception as exc:   # noqa: BLE001
                print(f"{name} {form}: quantizer failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                continue
            for calibration in (0, 4):
                print(line(name, src, qpath, form, calibration, out), flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("survey")
    s.add_argument("out")
    s.add_argument("models", nargs="*")
    s.add_argument("--forms", default=",".join(list(DYNAMIC) + list(NBITS)))
    s.add_argument("--nbits-python", default="")
    n = sub.add_parser("nbits")
    n.add_argument("src")
    n.add_argument("dst")
    n.add_argument("form", choices=NBITS)
    a = ap.parse_args(argv)
    if a.cmd == "nbits":
        nbits(a.src, a.dst, a.form)
        return 0
    return survey(a.out, a.models, a.forms.split(","), a.nbits_python)


if __name__ == "__main__":
    sys.exit(main())
