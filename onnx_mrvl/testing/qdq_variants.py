"""Pre-quantized models in the QDQ forms other tools write (issue #19): the seeded float models of
``qdq_variant_models`` through ``qdq_fake_quantizer`` (Q/DQ placed the way each tool does, scales
from a min/max run), and their agreement with onnxruntime after conversion.

Forms (``Style`` fields): weights as int8 initializers behind a DequantizeLinear (onnxruntime) or as
fp32 initializers -> QuantizeLinear -> DequantizeLinear (torch.ao / FX export, NVIDIA ModelOpt, AMD
Quark), optionally through a Transpose (tf2onnx: MatMul ``[N, K]`` / Conv ``HWIO`` weights); bias int32
behind a DQ or fp32; per-channel or per-tensor; opset 13 / 19 (``saturate``) / 21 (``output_dtype``,
``block_size``); int8 / uint8 / int16 activations, symmetric or not; Q/DQ after every op's output
(onnxruntime, torch) or only in front of weighted ops (ModelOpt / TensorRT); Relu fused or
between its own pairs; TFLite-style int8 graph input and output; int4 block-wise weights; ops
left float (mixed).

    python -m onnx_mrvl.testing.qdq_variants [VARIANT ...]      # convert each, compare with onnxruntime
"""
from __future__ import annotations

import collections
import os
import sys
import tempfile
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .qdq_fake_quantizer import Style, quantize  # noqa: F401
from .qdq_variant_models import cnn, cnn_acts, cnn_moves, deconv, mlp, mlp_block  # noqa: F401

F32 = TensorProto.FLOAT


# -- the variants -----------------------------------------------------------------------------------

VARIANTS: Dict[str, Tuple[Callable[..., onnx.ModelProto], Style]] = {
    "ort_s8_int8w": (cnn, Style()),
    "ort_u8_int8w": (cnn, Style(act="u8")),
    "torch_fp32w_fp32bias": (cnn, Style(weight="fp32", bias="fp32", act="u8")),
    "torch_fp32w_s8_sym": (cnn, Style(weight="fp32", bias="fp32", symmetric=True)),
    "u8_symmetric_zp128": (cnn, Style(act="u8", symmetric=True)),
    "tflite_uint8_weights_zp128": (cnn, Style(act="u8", weight="uint8", per_channel=False)),
    "tflite_uint8_weights_asym": (cnn, Style(act="u8", weight="uint8_asym", per_channel=False)),
    "u8_without_zero_points": (cnn, Style(act="u8", zero_point=False, symmetric=True)),
    "per_tensor_weights": (cnn, Style(per_channel=False)),
    "relu_own_pairs": (cnn, Style(fuse_relu=False)),
    "opset19_saturate": (lambda: cnn(opset=19), Style(opset=19)),
    "opset21_block_size0": (lambda: cnn(opset=21), Style(opset=21)),
    "opset21_output_dtype": (lambda: cnn(opset=21), Style(opset=21, symmetric=True, zero_point=False)),
    "modelopt_inputs_only": (cnn, Style(weight="fp32", bias="fp32", placement="inputs", symmetric=True)),
    "modelopt_add_inputs": (cnn, Style(weight="fp32", bias="fp32", placement="inputs", symmetric=True,
                                       add_inputs=True)),
    "tf2onnx_transposed_weights": (cnn, Style(transpose_weights=True, weight="fp32", bias="fp32")),
    "tflite_int8_io": (cnn, Style(int8_io=True, symmetric=False)),
    "tflite_uint8_io": (cnn, Style(int8_io=True, act="u8")),
    "moves": (cnn_moves, Style()),
    "moves_u8_fp32w": (cnn_moves, Style(act="u8", weight="fp32", bias="fp32")),
    "acts": (cnn_acts, Style()),
    "acts_u8_fp32w": (cnn_acts, Style(act="u8", weight="fp32", bias="fp32")),
    "gemm_transb0_axis1": (mlp, Style()),
    "gemm_transb0_fp32_negative_axis": (mlp, Style(weight="fp32", bias="fp32", negative_axis=True)),
    "tf2onnx_negative_axis": (cnn, Style(transpose_weights=True, weight="fp32", bias="fp32", negative_axis=True)),
    "deconv_axis1": (deconv, Style()),
    "deconv_fp32w": (deconv, Style(weight="fp32", bias="fp32")),
    "transformer": (mlp_block, Style()),
    "transformer_tf2onnx": (mlp_block, Style(transpose_weights=True, weight="fp32", bias="fp32")),
    "transformer_gelu_op": (lambda: mlp_block(opset=20), Style(opset=20)),
    "transformer_u8_opset21": (lambda: mlp_block(opset=21), Style(opset=21, act="u8")),
    "mixed_float_ops": (cnn, Style(float_ops=("c2", "r2", "MaxPool"))),
    "a16w8": (lambda: cnn(opset=21), Style(opset=21, act="s16")),
    "int4_blockwise": (lambda: mlp_block(opset=21), Style(opset=21, weight="int4")),
}


def build(name: str) -> onnx.ModelProto:
    builder, style = VARIANTS[name]
    return quantize(builder(), style)


def feeds_for(model: onnx.ModelProto, seed: int = 0) -> Dict[str, np.ndarray]:
    """N(0, 1.5) float inputs; int8 / uint8 inputs get codes near their zero point's range."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        et = i.type.tensor_type.elem_type
        if et == F32:
            out[i.name] = (rng.standard_normal(shape) * 1.5).astype(np.float32)
        else:
            dt = helper.tensor_dtype_to_np_dtype(et)
            info = np.iinfo(dt)
            out[i.name] = rng.integers(info.min, info.max + 1, shape).astype(dt)
    return out


def output_step(model: onnx.ModelProto, name: str) -> Optional[float]:
    """The quantization step of output ``name`` (its DQ's or Q's scale), None when it is float."""
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    p = next((n for n in model.graph.node if name in n.output), None)
    if p is not None and p.op_type in ("DequantizeLinear", "QuantizeLinear") and p.input[1] in init:
        return float(init[p.input[1]].reshape(-1)[0]) if p.op_type == "DequantizeLinear" else 1.0
    return None


def compare(model: onnx.ModelProto, model_path: str, runs: int = 3) -> Dict[str, float]:
    """onnx_mrvl (converted, at ``model_path``) against onnxruntime on ``model``: the share of
    identical output elements, the largest difference in output steps (codes for an int8 output),
    max|err| / max|ref|."""
    import onnxruntime as ort
    import onnx_mrvl
    try:
        ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        level = "default"
    except Exception:   # noqa: BLE001 - onnxruntime 1.32 cannot fuse some valid QDQ forms (int8 Q
        # without a zero point before GlobalAveragePool): the model's ONNX semantics, unoptimized
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        level = "optimizations off"
    sess = onnx_mrvl.InferenceSession(model_path)
    same = total = 0
    steps = rel = 0.0
    for r in range(runs):
        f = feeds_for(model, r)
        for o, a, b in zip(model.graph.output, ref.run(None, f), sess.run(None, f)):
            if a.dtype != b.dtype or a.shape != b.shape:
                raise AssertionError(f"output {o.name}: {b.dtype}{b.shape}, onnxruntime {a.dtype}{a.shape}")
            if b.dtype.kind == "f" and not np.isfinite(b).all():
                raise AssertionError(f"output {o.name} is not finite")
            err = np.abs(a.astype(np.float64) - b.astype(np.float64))
            same += int((err == 0).sum())
            total += a.size
            step = output_step(model, o.name)
            steps = max(steps, float(err.max() / step) if step else float("nan"))
            rel = max(rel, float(err.max() / max(np.abs(a.astype(np.float64)).max(), 1e-30)))
    return {"identical": same / total, "steps": steps, "rel": rel, "reference": level}


def convert_and_compare(name: str, folder: str, model: Optional[onnx.ModelProto] = None) -> dict:
    """Convert variant ``name``; its regions, CPU ops by type, the Q/DQ left on the CPU, and ``compare``."""
    import onnx_mrvl
    model = model or build(name)
    result = onnx_mrvl.convert(model)
    out = os.path.join(folder, name)
    result.save(out, overwrite=True)
    cpu = collections.Counter(n.op_type for n in result.model.graph.node if not n.op_type.startswith("Subgraph"))
    return {"variant": name, "regions": len(result.subgraphs), "cpu": dict(cpu), "result": result,
            **compare(model, os.path.join(out, "model.onnx"))}


def main(argv: Sequence[str] = None) -> int:
    names = list(argv if argv is not None else sys.argv[1:]) or list(VARIANTS)
    with tempfile.TemporaryDirectory(prefix="qdq_variants-") as d:
        for name in names:
            try:
                r = convert_and_compare(name, d)
                print(f"{name:28s} regions={r['regions']} cpu={r['cpu']} identical={r['identical']:.4f} "
                      f"steps={r['steps']:.2f} rel={r['rel']:.2e} ref={r['reference']}", flush=True)
            except Exception as exc:   # a survey: report and go on
                print(f"{name:28s} {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
