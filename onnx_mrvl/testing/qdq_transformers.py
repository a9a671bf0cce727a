"""QDQ transformer and recurrent models as onnxruntime's quantizer writes them: the seeded float
builders (arch_speech, arch_transformer, arch_attention, recurrent_models) through
``quant_pre_process`` + ``quantize_static`` (QDQ, per-channel int8 weights, S8S8 or U8S8, default
op types), and their agreement with onnxruntime's own execution of the same QDQ model.

    python -m onnx_mrvl.testing.qdq_transformers [MODEL ...]     # regions, CPU ops, error
"""
from __future__ import annotations

import collections
import os
import sys
import tempfile
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import onnx

from . import arch_attention, arch_decoder, arch_speech, arch_transformer, recurrent_models

def bias_first(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every Linear's bias Add written as PyTorch's TorchScript exporter writes it,
    ``Add(bias, MatMul(x, W))`` (the builders write ``Add(MatMul, bias)``; onnxruntime's quantizer
    keeps the order, so the QDQ model's Add reads the bias's DequantizeLinear first)."""
    inits = {t.name for t in model.graph.initializer}
    matmuls = {o for n in model.graph.node if n.op_type == "MatMul" for o in n.output}
    for n in model.graph.node:
        if n.op_type == "Add" and len(n.input) == 2 and n.input[0] in matmuls and n.input[1] in inits:
            n.input[0], n.input[1] = n.input[1], n.input[0]
    return model


MODELS: Dict[str, Callable[[], onnx.ModelProto]] = {
    "bert_encoder": lambda: arch_speech.bert_encoder(T=16, D=32, H=4),
    "bert_encoder_torch": lambda: bias_first(arch_speech.bert_encoder(T=16, D=32, H=4)),
    "encoder_block_ln_op_torch": lambda: bias_first(arch_transformer.encoder_block(ln="op", T=16, D=32, H=4)),
    "bert_encoder_ln_op": lambda: arch_speech.bert_encoder(T=16, D=32, H=4, ln="op"),
    "whisper_encoder": lambda: arch_speech.whisper_encoder(mels=16, T=32, D=32, H=4),
    "vit_like": lambda: arch_transformer.vit_like(D=32, H=4),
    "encoder_block_ln_op": lambda: arch_transformer.encoder_block(ln="op", T=16, D=32, H=4),
    "mha_legacy": lambda: arch_attention.mha_block("legacy", "const", T=16, D=32, H=4),
    "mha_bmm3d": lambda: arch_attention.mha_block("bmm3d", "const", T=16, D=32, H=4),
    "lstm_head": lambda: recurrent_models.cell_model("LSTM", head=True, steps=12, feat=16, hid=20),
    "gru_head": lambda: recurrent_models.cell_model("GRU", head=True, steps=12, feat=16, hid=20),
    **{f"rmsnorm_{f}": (lambda f=f: arch_decoder.rmsnorm_block(f)) for f in arch_decoder.RMS_FORMS + ("embedding",)},
    "swin_shift_merge": lambda: arch_decoder.swin_shift_merge(),
    "swin_windows": lambda: arch_decoder.swin_windows(),
    **{f"ln_{f}{'' if a else '_noaffine'}": (lambda f=f, a=a: arch_transformer.layernorm_block(f, a))
       for f in ("keras3", "tf") for a in (True, False)},
    "token_mean_head": lambda: arch_transformer.token_mean_head(),
}
# quantized as given, without quant_pre_process (whose optimizer folds a 3-D MatMul's bias Add away):
# ``quantize_static`` on the exporter's graph writes MatMul -> Q -> DQ -> Add(DQ(bias), .) -> Q -> DQ
RAW = {"bert_encoder_torch", "encoder_block_ln_op_torch"}
# extra_options of quantize_static that exporters' recipes set (Olive / optimum)
VARIANTS: Dict[str, dict] = {"default": {}, "symmetric": {"ActivationSymmetric": True, "WeightSymmetric": True},
                             "const_b_only": {"MatMulConstBOnly": True}}


def feeds(model: onnx.ModelProto, seed: int = 0) -> Dict[str, np.ndarray]:
    """ids / masks as arch_speech.feeds, float inputs N(0, 1)."""
    return arch_speech.feeds(model, seed)


def quantize(model: onnx.ModelProto, path: str, act: str = "s8", per_channel: bool = True,
             extra_options: Optional[dict] = None, calibration: int = 4, preprocess: bool = True) -> str:
    """``model`` -> quant_pre_process (unless ``preprocess`` is False) -> quantize_static (QDQ)
    written to ``path``; returns ``path``."""
    from onnxruntime import quantization as q
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter([feeds(model, 100 + i) for i in range(calibration)])

        def get_next(self):
            return next(self.it, None)

    src, pre = path + ".float.onnx", path + ".pre.onnx"
    onnx.save(model, src)
    if preprocess:
        quant_pre_process(src, pre, skip_symbolic_shape=True)
    else:
        pre = src
    q.quantize_static(pre, path, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=per_channel,
                      weight_type=q.QuantType.QInt8,
                      activation_type=q.QuantType.QInt8 if act == "s8" else q.QuantType.QUInt8,
                      extra_options=dict(extra_options or {}))
    return path


def output_steps(qmodel: onnx.ModelProto) -> Dict[str, Optional[float]]:
    """The quantization step of each model output written by a DequantizeLinear (None: a float output)."""
    init = {t.name: t for t in qmodel.graph.initializer}
    producer = {o: n for n in qmodel.graph.node for o in n.output}
    steps = {}
    for o in qmodel.graph.output:
        n = producer.get(o.name)
        steps[o.name] = (float(onnx.numpy_helper.to_array(init[n.input[1]]))
                         if n is not None and n.op_type == "DequantizeLinear" and n.input[1] in init else None)
    return steps


def agreement(qpath: str, model_path: str, runs: int = 2) -> Dict[str, dict]:
    """Per output, over ``runs`` inputs: max|err| / max|ref|, the share of identical elements and the
    max error in output quantization steps (outputs written by a DQ), onnx_mrvl vs onnxruntime."""
    import onnxruntime as ort
    import onnx_mrvl
    qmodel = onnx.load(qpath)
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(model_path)
    steps = output_steps(qmodel)
    names = [o.name for o in qmodel.graph.output]
    stats = {n: {"rel": 0.0, "same": 0, "total": 0, "steps": 0.0} for n in names}
    for r in range(runs):
        x = feeds(qmodel, seed=r)
        a, b = ref.run(names, x), sess.run(names, x)
        for n, ya, yb in zip(names, a, b):
            if not np.isfinite(yb).all():
                raise AssertionError(f"output {n} is not finite")
            err = np.abs(ya.astype(np.float64) - yb)
            s = stats[n]
            s["rel"] = max(s["rel"], float(err.max() / max(np.abs(ya).max(), 1e-30)))
            s["same"] += int((err == 0).sum())
            s["total"] += ya.size
            if steps[n]:
                s["steps"] = max(s["steps"], float(err.max() / steps[n]))
    return {n: {"rel": s["rel"], "identical": s["same"] / s["total"],
                "steps": s["steps"] if steps[n] else None} for n, s in stats.items()}


def convert_and_measure(name: str, folder: str, act: str = "s8", variant: str = "default", **convert_kw) -> dict:
    """Quantize ``name``, convert, save, measure: regions, CPU ops by type, agreement."""
    import onnx_mrvl
    qpath = quantize(MODELS[name](), os.path.join(folder, f"{name}.q.onnx"), act, extra_options=VARIANTS[variant],
                     preprocess=name not in RAW)
    result = onnx_mrvl.convert(qpath, **convert_kw)
    out = os.path.join(folder, f"{name}.out")
    result.save(out, overwrite=True)
    cpu = collections.Counter(n.op_type for n in result.model.graph.node if not n.op_type.startswith("Subgraph"))
    return {"model": name, "act": act, "variant": variant, "regions": len(result.subgraphs), "cpu": dict(cpu),
            "agreement": agreement(qpath, os.path.join(out, "model.onnx")), "qpath": qpath, "result": result}


def main(argv: Sequence[str] = None) -> int:
    names: List[str] = list(argv if argv is not None else sys.argv[1:]) or list(MODELS)
    with tempfile.TemporaryDirectory(prefix="qdq_transformers-") as d:
        for name in names:
            m = convert_and_measure(name, d)
            print(name, m["regions"], m["cpu"], m["agreement"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
