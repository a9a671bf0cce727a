"""Pre-quantized transformer / speech encoders as real pipelines write them (issue #19): onnxruntime's
``quantize_dynamic`` (per-tensor / per-channel, reduce_range, QInt8 / QUInt8 weights; Hugging Face
Optimum's avx512_vnni and arm64 configurations), ``quantize_static`` QDQ (S8 / U8, with
``QDQKeepRemovableActivations``, ``DedicatedQDQPair``, ``QDQOpTypePerChannelSupportToAxis``, A16W8),
each with and without ``onnxruntime.transformers.optimizer`` first, of the seeded float builders
(arch_speech's BERT / Whisper encoders, arch_wav2vec's GroupNorm feature extractor), converted with
and without calibration and compared with onnxruntime's run of the same quantized model.

    python -m onnx_mrvl.testing.int8_exports [MODEL ...]        # one line per (model, variant, calibration)
"""
from __future__ import annotations

import collections
import os
import sys
import tempfile
from typing import Callable, Dict, List, Sequence

import numpy as np
import onnx

from . import arch_speech, arch_wav2vec

MODELS: Dict[str, Callable[[], onnx.ModelProto]] = {
    "bert_opset14": lambda: arch_speech.bert_encoder(T=16, D=32, H=4, ln="torch", mask_unsqueezes=2),
    "bert_opset17": lambda: arch_speech.bert_encoder(T=16, D=32, H=4, ln="op", mask_unsqueezes=2),
    # transformers' SDPA-era mask (Expand [1, 1, T, T], Where(bool, lowest, 1 - m)), opset 17
    "bert_sdpa_mask": lambda: arch_speech.bert_encoder(T=16, D=32, H=4, ln="op", mask_unsqueezes=0),
    # HF's dynamic-axes position_ids slice: onnxruntime's optimizer fuses EmbedLayerNormalization
    "bert_embed_slice": lambda: arch_speech.bert_encoder(T=16, D=32, H=4, ln="op", mask_unsqueezes=2,
                                                         positions="slice"),
    "whisper_encoder": lambda: arch_speech.whisper_encoder(mels=16, T=32, D=32, H=4),
    "wav2vec2_frontend": lambda: arch_wav2vec.frontend(),
    "wav2vec2_encoder": lambda: arch_wav2vec.wav2vec2_encoder(),
}
# Optimum's ORTQuantizer, dynamic: operators_to_quantize = onnxruntime's IntegerOpsRegistry (its
# ORT_DEFAULT_OPS_DYNAMIC_QUANTIZATION), QUInt8 activations, symmetric weights (QInt8 for avx512_vnni,
# QUInt8 for arm64: zero point 128)
OPTIMUM_OPS = ["Attention", "Conv", "EmbedLayerNormalization", "Gather", "LSTM", "MatMul", "Transpose"]
# name -> ("dynamic" | "static", keyword arguments)
VARIANTS: Dict[str, tuple] = {
    "dyn_s8": ("dynamic", dict(weight_type="s8")),
    "dyn_s8_per_channel": ("dynamic", dict(weight_type="s8", per_channel=True)),
    "dyn_u8": ("dynamic", dict(weight_type="u8")),    # asymmetric uint8 weights: W_q - z_w spans 9 bits
    "dyn_u8_reduce_range": ("dynamic", dict(weight_type="u8", reduce_range=True)),
    "dyn_s8_per_channel_reduce_range": ("dynamic", dict(weight_type="s8", per_channel=True, reduce_range=True)),
    "optimum_avx512_vnni": ("dynamic", dict(weight_type="s8", per_channel=False, op_types_to_quantize=OPTIMUM_OPS,
                                            extra_options={"WeightSymmetric": True, "ActivationSymmetric": False})),
    "optimum_avx512_vnni_per_channel": ("dynamic", dict(weight_type="s8", per_channel=True,
                                                        op_types_to_quantize=OPTIMUM_OPS,
                                                        extra_options={"WeightSymmetric": True})),
    "optimum_arm64": ("dynamic", dict(weight_type="u8", per_channel=True, op_types_to_quantize=OPTIMUM_OPS,
                                      extra_options={"WeightSymmetric": True})),
    "qdq_s8": ("static", dict(act="s8")),
    "qdq_u8_keep_removable": ("static", dict(act="u8", extra={"QDQKeepRemovableActivations": True})),
    "qdq_s8_dedicated_pair": ("static", dict(act="s8", extra={"DedicatedQDQPair": True})),
    "qdq_s8_per_channel_axis": ("static", dict(act="s8", extra={"QDQOpTypePerChannelSupportToAxis": {"MatMul": 1}})),
    "qdq_a16w8": ("static", dict(act="u16")),
}


def feeds(model: onnx.ModelProto, seed: int = 0) -> Dict[str, np.ndarray]:
    """ids / masks as arch_speech.feeds, float inputs N(0, 1)."""
    return arch_speech.feeds(model, seed)


def quantize(model: onnx.ModelProto, path: str, variant: str, calibration: int = 4) -> str:
    """``model`` quantized as ``variant`` (VARIANTS) into ``path``; returns ``path``."""
    from onnxruntime import quantization as q
    from onnxruntime.quantization.shape_inference import quant_pre_process
    kind, kw = VARIANTS[variant]
    src = path + ".float.onnx"
    onnx.save(model, src)
    types = {"s8": q.QuantType.QInt8, "u8": q.QuantType.QUInt8, "s16": q.QuantType.QInt16,
             "u16": q.QuantType.QUInt16}
    if kind == "dynamic":
        kw = dict(kw)
        q.quantize_dynamic(src, path, weight_type=types[kw.pop("weight_type")], **kw)
        return path

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter([feeds(model, 100 + i) for i in range(calibration)])

        def get_next(self):
            return next(self.it, None)

    pre = path + ".pre.onnx"
    quant_pre_process(src, pre, skip_symbolic_shape=True)
    q.quantize_static(pre, path, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                      weight_type=q.QuantType.QInt8, activation_type=types[kw["act"]],
                      extra_options=dict(kw.get("extra") or {}))
    return path


def optimized(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxruntime.transformers.optimizer (model_type bert, 4 heads, hidden 32) of ``model``."""
    from .contrib_blocks import optimize
    return optimize(model, "bert")


def measure(model: onnx.ModelProto, qpath: str, folder: str, calibration: int = 0, runs: int = 2) -> dict:
    """Convert ``qpath`` (with ``calibration`` samples of seeds 1000.., none: 0), save, run 2 inputs.
    Returns regions, CPU ops by type, CPU reasons, precisions, ``rel`` (max|ours - onnxruntime on
    qpath| / max|ref| over outputs and inputs), ``rel_plain`` (the same against onnxruntime with graph
    optimizations off: the model's ONNX semantics; its fusions of int16 QDQ differ from that by up to
    2.6e-2, measured on A16W8 BERT) and, calibrated, ``rel_static`` (against onnxruntime's
    run of the rewritten static model, ``result.stages["quantize"]``), the fp16-baseline verdict
    against it (docs/simulator.md; compare_models' whole-model baseline) and ``rel_fp16_before_q``:
    onnxruntime's static run with only the float layers' outputs rounded to fp16 before each
    quantization (``fp16_before_quantize``) against the static run."""
    import onnxruntime as ort
    import onnx_mrvl
    from onnx_mrvl.inspection.compare import compare_models
    kw = {"calibration": [feeds(model, 1000 + i) for i in range(calibration)]} if calibration else {}
    result = onnx_mrvl.convert(qpath, **kw)
    result.save(folder, overwrite=True)
    path = os.path.join(folder, "model.onnx")
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL   # the model's ONNX semantics
    plain = ort.InferenceSession(qpath, so, providers=["CPUExecutionProvider"])
    # the rewritten static model; none when calibration made no layer int8 (the dynamic model as it was)
    static = result.stages.get("quantize") if calibration and result.report.quantization.get("int8_layers") else None
    st = ort.InferenceSession(static.SerializeToString(), providers=["CPUExecutionProvider"]) if static else None
    st16 = ort.InferenceSession(fp16_before_quantize(static).SerializeToString(),
                                providers=["CPUExecutionProvider"]) if static else None
    sess = onnx_mrvl.InferenceSession(path)
    names = [o.name for o in ref.get_outputs()]
    rel = rel_plain = rel_static = rel_fp16 = 0.0
    within = True
    for r in range(runs):
        x = feeds(model, r)
        ya, yb = ref.run(names, x), sess.run(names, x)
        for a, b in zip(ya, yb):
            if not np.isfinite(b).all():
                raise AssertionError(f"{qpath}: output is not finite")
            rel = max(rel, float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-30)))
        for a, b in zip(plain.run(names, x), yb):
            rel_plain = max(rel_plain, float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-30)))
        if st is not None:
            ys = st.run(names, x)
            for a, b, c in zip(ys, yb, st16.run(names, x)):
                rel_static = max(rel_static, float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-30)))
                rel_fp16 = max(rel_fp16, float(np.abs(a - c).max() / max(np.abs(a).max(), 1e-30)))
            cmp = compare_models(static, path, x, fp16_baseline=True)
            within = within and all(row.within for row in cmp.baseline.rows if row.is_output)
    cpu = collections.Counter(n.op_type for n in result.model.graph.node if not n.op_type.startswith("Subgraph"))
    reasons = collections.Counter(f"{d.op_type}: {d.reason}" for d in result.report.cpu_nodes())
    precisions = collections.Counter(d.precision for d in result.report if d.precision)
    return {"regions": len(result.subgraphs), "cpu": dict(cpu), "reasons": dict(reasons),
            "precisions": dict(precisions), "rel": rel, "rel_plain": rel_plain, "rel_static": rel_static if st is not None else None,
            "within_fp16": within if st is not None else None,
            "rel_fp16_before_q": rel_fp16 if st is not None else None, "result": result}


def fp16_before_quantize(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every float tensor a QuantizeLinear reads from a computing op (not a Q / DQ, not
    a graph input) rounded to fp16 first (Cast to float16 and back): onnxruntime's run of it shows
    what storing the float layers' outputs in fp16 alone does to the codes of the next quantization
    (docs/quantize.md, yolo_like). Constants are left as they are (HF's finfo.min mask would
    overflow: the whole-model fp16 baseline of compare_models turns it into inf)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    producer = {o: n for n in m.graph.node for o in n.output}
    nodes, done = [], {}
    for n in m.graph.node:
        if n.op_type == "QuantizeLinear":
            p = producer.get(n.input[0])
            if p is not None and p.op_type not in ("QuantizeLinear", "DequantizeLinear", "Constant"):
                if n.input[0] not in done:
                    h, f = f"{n.input[0]}/fp16", f"{n.input[0]}/fp16_back"
                    nodes += [onnx.helper.make_node("Cast", [n.input[0]], [h], to=onnx.TensorProto.FLOAT16),
                              onnx.helper.make_node("Cast", [h], [f], to=onnx.TensorProto.FLOAT)]
                    done[n.input[0]] = f
                n.input[0] = done[n.input[0]]
        nodes.append(n)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return m


def run(name: str, variant: str, folder: str, optimize: bool = False, calibration: int = 0) -> dict:
    """Build ``name`` (optimized first when asked), quantize as ``variant``, measure."""
    model = MODELS[name]()
    if optimize:
        model = optimized(model)
    tag = f"{name}{'_opt' if optimize else ''}_{variant}"
    qpath = quantize(model, os.path.join(folder, f"{tag}.onnx"), variant)
    out = measure(model, qpath, os.path.join(folder, f"{tag}_{calibration}"), calibration)
    out.update(model=name, variant=variant, optimized=optimize, calibration=calibration, qpath=qpath)
    return out


def main(argv: Sequence[str] = None) -> int:
    names: List[str] = list(argv if argv is not None else sys.argv[1:]) or list(MODELS)
    with tempfile.TemporaryDirectory(prefix="int8_exports-") as d:
        for name in names:
            for variant, (kind, _) in VARIANTS.items():
                for calib in ((0, 8) if kind == "dynamic" else (0,)):
                    m = run(name, variant, d, calibration=calib)
                    print(name, variant, calib, m["regions"], m["cpu"], f"{m['rel']:.2e}", m["rel_static"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
