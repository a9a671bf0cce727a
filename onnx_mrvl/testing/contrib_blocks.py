"""Blocks around onnxruntime contrib ops and onnxruntime's own tools on the builders' models: the
refused forms (``REFUSED``), a rotary attention block, an RMS norm between FCs, ``quantize_dynamic`` of an
Attention, and ``optimize`` (onnxruntime's transformer optimizer on a copy). The optimizer's symbolic shape
inference needs sympy; without it, the edge shapes it asks for are measured with one onnxruntime run of
the model being fused (``MeasuredShapes``), which gives the same fusions on static-shape models (checked
with sympy installed: BERT, Whisper, ViT, encoder block).
"""
from __future__ import annotations

import importlib.util
import os
import tempfile
from typing import Dict, Tuple

import numpy as np
import onnx
from onnx import helper

from .contrib_models import (B, D, F32, I32, I64, MS, N, S, attention_case, build_model, norm_case, rotary_case, seeded,
                             weight)

def _refused_attention(kind: str):
    r = seeded(0)
    H = D // N
    x = ("x", F32, [B, S, D])
    inits = {"w": weight(r, D, 3 * D), "bias": np.zeros(3 * D, np.float32)}
    if kind == "attention_past":
        node = helper.make_node("Attention", ["x", "w", "bias", "", "past"], ["y", "present"], domain=MS,
                                name="attention", num_heads=N, unidirectional=1)
        return build_model([node], [x, ("past", F32, [2, B, N, 3, H])], [("y", None), ("present", None)], inits)
    if kind == "attention_4d_mask":
        node = helper.make_node("Attention", ["x", "w", "bias", "mask"], ["y"], domain=MS, name="attention",
                                num_heads=N)
        return build_model([node], [x, ("mask", I32, [B, 1, S, S])], [("y", None)], inits)
    if kind == "mha_past":
        node = helper.make_node("MultiHeadAttention", ["x", "k", "v", "", "", "", "pk", "pv"], ["y", "prk", "prv"],
                                domain=MS, name="mha", num_heads=N)
        ins = [x, ("k", F32, [B, 1, D]), ("v", F32, [B, 1, D]), ("pk", F32, [B, N, 3, H]), ("pv", F32, [B, N, 3, H])]
        return build_model([node], ins, [("y", None), ("prk", None), ("prv", None)], {})
    if kind == "gqa":
        node = helper.make_node("GroupQueryAttention", ["x", "k", "v", "", "", "seqlens", "total"], ["y", "pk", "pv"],
                                domain=MS, name="gqa", num_heads=N, kv_num_heads=2)
        ins = [x, ("k", F32, [B, S, 2 * H]), ("v", F32, [B, S, 2 * H]), ("seqlens", I32, [B]), ("total", I32, [1])]
        return build_model([node], ins, [("y", None), ("pk", None), ("pv", None)], {})
    if kind == "rotary_packed":
        m, _ = rotary_case()
        m.graph.node[0].attribute.append(helper.make_attribute("is_packed_batching", 1))
        return m
    if kind == "skip_simplified_ln_stats":
        m, _ = norm_case("SkipSimplifiedLayerNormalization", sum_out=True)
        n = m.graph.node[0]
        del n.output[:]
        n.output.extend(["y", "", "inv_std", "sum"])
        m.graph.output.insert(1, helper.make_tensor_value_info("inv_std", F32, None))
        return m
    raise ValueError(kind)


# refused forms: name -> (builder, the node, what its reason names)
REFUSED = {
    "attention_past": (lambda: _refused_attention("attention_past"), "attention", "past state"),
    "attention_4d_mask": (lambda: _refused_attention("attention_4d_mask"), "attention", "Megatron 4-D"),
    "mha_past": (lambda: _refused_attention("mha_past"), "mha", "past_key"),
    "gqa": (lambda: _refused_attention("gqa"), "gqa", "cached-decoding"),
    "rotary_packed": (lambda: _refused_attention("rotary_packed"), "rotary", "packed batching"),
    "skip_simplified_ln_stats": (lambda: _refused_attention("skip_simplified_ln_stats"),
                                 "skipsimplifiedlayernormalization", "inv_std_var output"),
}


def rotary_attention_block(S_: int = 16, seed: int = 0):
    """A rotary self-attention block as ORT-fused exports write it: x [1,S,D] -> MatMul q/k/v ->
    RotaryEmbedding(q), RotaryEmbedding(k) (position_ids input) -> MultiHeadAttention -> MatMul."""
    r = seeded(seed)
    H = D // N
    ang = np.arange(64)[:, None] * (1.0 / (10000 ** (np.arange(0, H, 2) / H)))[None]
    inits = {f"w{p}": weight(r, D, D) for p in "qkvo"}
    inits.update(cos=np.cos(ang).astype(np.float32), sin=np.sin(ang).astype(np.float32))
    nodes = [helper.make_node("MatMul", ["x", f"w{p}"], [p], name=f"proj_{p}") for p in "qkv"]
    nodes += [helper.make_node("RotaryEmbedding", [p, "position_ids", "cos", "sin"], [f"r{p}"], name=f"rotary_{p}",
                               domain=MS, num_heads=N) for p in "qk"]
    nodes += [helper.make_node("MultiHeadAttention", ["rq", "rk", "v"], ["a"], name="mha", domain=MS, num_heads=N),
              helper.make_node("MatMul", ["a", "wo"], ["y"], name="proj_o")]
    m = build_model(nodes, [("x", F32, [1, S_, D]), ("position_ids", I64, [1, S_])], [("y", None)], inits)
    feeds = {"x": r.standard_normal((1, S_, D)).astype(np.float32),
             "position_ids": np.arange(3, 3 + S_).reshape(1, S_).astype(np.int64)}
    return m, feeds


def rms_norm_block(skip: bool = False, seed: int = 0):
    """x [1,S,D] -> MatMul -> SimplifiedLayerNormalization (or SkipSimplifiedLayerNormalization with x as
    the skip and its sum output in a residual Add) -> MatMul (LLaMA / T5-style RMS norm between FCs)."""
    r = seeded(seed)
    inits = {"w1": weight(r, D, D), "w2": weight(r, D, D), "g": (1 + 0.1 * r.standard_normal(D)).astype(np.float32)}
    if skip:
        nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
                 helper.make_node("SkipSimplifiedLayerNormalization", ["h", "x", "g"], ["n", "", "", "sum"],
                                  name="rms", domain=MS, epsilon=1e-6),
                 helper.make_node("MatMul", ["n", "w2"], ["y0"], name="fc2"),
                 helper.make_node("Add", ["y0", "sum"], ["y"], name="residual")]
    else:
        nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
                 helper.make_node("SimplifiedLayerNormalization", ["h", "g"], ["n"], name="rms", epsilon=1e-6,
                                  axis=-1),
                 helper.make_node("MatMul", ["n", "w2"], ["y"], name="fc2")]
    m = build_model(nodes, [("x", F32, [1, 16, D])], [("y", None)], inits)
    return m, {"x": r.standard_normal((1, 16, D)).astype(np.float32)}


def ort_saved(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model as onnxruntime saves it after its own fusions (``optimized_model_filepath``,
    ORT_ENABLE_EXTENDED, CPU): FusedConv, FusedGemm, FusedMatMul, SkipLayerNormalization, Gelu, ..."""
    import onnxruntime as ort
    with tempfile.TemporaryDirectory(prefix="contrib-") as d:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = os.path.join(d, "o.onnx")
        so.log_severity_level = 3
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return onnx.load(so.optimized_model_filepath)


def qattention_model(seed: int = 0, mask: str = "2d", unidirectional: bool = False, per_channel: bool = False,
                     signed: bool = True) -> Tuple[onnx.ModelProto, onnx.ModelProto, Dict[str, np.ndarray]]:
    """``quantize_dynamic`` of an fp32 model holding one com.microsoft Attention (weights [D, 3D]):
    (quantized model, the fp32 model, feeds)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    m, feeds = attention_case(mask, unidirectional=unidirectional, seed=seed)
    with tempfile.TemporaryDirectory(prefix="contrib-") as d:
        src, dst = os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx")
        onnx.save(m, src)
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8 if signed else QuantType.QUInt8,
                         per_channel=per_channel)
        q = onnx.load(dst)
    return q, m, feeds


class MeasuredShapes:
    """What the optimizer asks of SymbolicShapeInferenceHelper (``get_edge_shape``, ``compare_shape``),
    answered from one onnxruntime run of the model with every tensor as an output."""

    def __init__(self, model: onnx.ModelProto):
        import onnxruntime as ort
        m = onnx.ModelProto()
        m.CopyFrom(model)
        names = [o for n in m.graph.node for o in n.output if o]
        del m.graph.output[:]
        m.graph.output.extend(helper.make_empty_tensor_value_info(t) for t in dict.fromkeys(names))
        feeds = {}
        r = seeded(0)
        for i in m.graph.input:
            tt = i.type.tensor_type
            shape = [d.dim_value for d in tt.shape.dim]
            if any(not d.HasField("dim_value") for d in tt.shape.dim):
                raise ValueError(f"MeasuredShapes needs static input shapes ('{i.name}' has a symbolic axis): "
                                 f"install sympy for the optimizer's own shape inference")
            dt = helper.tensor_dtype_to_np_dtype(tt.elem_type)
            feeds[i.name] = (r.integers(0, 2, shape) if np.issubdtype(dt, np.integer) else
                             r.standard_normal(shape)).astype(dt)
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        outs = sess.run(None, feeds)
        self.shapes = {o.name: list(v.shape) for o, v in zip(sess.get_outputs(), outs)}
        self.shapes.update({k: list(v.shape) for k, v in feeds.items()})
        self.shapes.update({t.name: list(t.dims) for t in m.graph.initializer})

    def infer(self, *_a, **_k):
        return True

    def get_edge_shape(self, edge):
        return self.shapes.get(edge)

    def compare_shape(self, edge, other):
        a, b = self.get_edge_shape(edge), self.get_edge_shape(other)
        if a is None or b is None:
            raise ValueError(f"shape of {edge} or {other} unknown")
        return a == b


def optimize(model: onnx.ModelProto, model_type: str = "bert", num_heads: int = 4, hidden_size: int = 32,
             float16: bool = False, **options) -> onnx.ModelProto:
    """onnxruntime.transformers.optimizer.optimize_model(model_type, num_heads, hidden_size) on a copy;
    ``float16``: then its ``convert_float_to_float16(keep_io_types=True)``, as GPU deployments do."""
    import sys
    from onnxruntime.transformers.optimizer import optimize_model
    # the optimizer imports its modules top-level (its folder on sys.path) and as a package
    modules = (sys.modules.get("onnx_model"), sys.modules.get("onnxruntime.transformers.onnx_model"))
    classes = {mod.OnnxModel for mod in modules if mod is not None}
    patched = {}
    if importlib.util.find_spec("sympy") is None:
        patched = {cls: cls.infer_runtime_shape for cls in classes}

        def measured(self, dynamic_axis_mapping=None, update=False):
            return MeasuredShapes(self.model) if self.enable_shape_infer else None
        for cls in classes:
            cls.infer_runtime_shape = measured
    try:
        with tempfile.TemporaryDirectory(prefix="contrib-opt-") as d:
            path = os.path.join(d, "in.onnx")
            onnx.save(model, path)
            opt = optimize_model(path, model_type=model_type, num_heads=num_heads, hidden_size=hidden_size,
                                 opt_level=options.pop("opt_level", 0), **options)
            if float16:
                opt.convert_float_to_float16(keep_io_types=True)   # needs sympy (its own shape inference)
            opt.save_model_to_file(path)   # as users save it (adds the com.microsoft opset import)
            return onnx.load(path)
    finally:
        for cls, fn in patched.items():
            cls.infer_runtime_shape = fn


