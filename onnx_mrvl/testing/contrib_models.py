"""onnxruntime contrib ops (com.microsoft) as single nodes with their attribute / input variants (seeded
weights, no downloads): ``CASES`` (onnxruntime runs them on the CPU), ``CUDA_ONLY`` with
``cuda_only_reference``. Blocks and onnxruntime's optimizer / quantizer: ``contrib_blocks.py``.
(Over the usual ~400 lines: a catalog, one short builder per op variant.)
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"
F32, I32, I64, U8, I8 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8, TensorProto.INT8
B, S, D, N = 2, 8, 32, 4


def build_model(nodes, inputs, outputs, inits, opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "contrib", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(o, F32 if t is None else t, None) for o, t in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    return m


def seeded(seed: int = 0):
    return np.random.default_rng(seed)


def weight(r, *shape, gain: float = 1.0):
    return (r.standard_normal(shape) * gain / math.sqrt(shape[0] if len(shape) > 1 else 1)).astype(np.float32)


def norm_case(op: str, bias: bool = True, beta: bool = True, sum_out: bool = False, stats=False,
              eps: Optional[float] = None, broadcast_skip: bool = False, opset: int = 17, seed: int = 0):
    """SkipLayerNormalization / SkipSimplifiedLayerNormalization / SimplifiedLayerNormalization /
    LayerNormalization (com.microsoft) on [B, S, D]."""
    r = seeded(seed)
    inits = {"gamma": (1 + 0.1 * r.standard_normal(D)).astype(np.float32)}
    x = r.standard_normal((B, S, D)).astype(np.float32) * 2 + 0.5
    feeds = {"x": x}
    inputs = [("x", F32, [B, S, D])]
    attrs = {} if eps is None else {"epsilon": eps}
    # onnxruntime registers LayerNormalization / SimplifiedLayerNormalization in the default domain at
    # every opset (its own kernels below 17): the optimizer writes them there
    domain = "" if op in ("SimplifiedLayerNormalization", "LayerNormalization") else MS
    if op.startswith("Skip"):
        sk = [1, S, D] if broadcast_skip else [B, S, D]
        feeds["skip"] = r.standard_normal(sk).astype(np.float32)
        inputs.append(("skip", F32, sk))
        ins = ["x", "skip", "gamma"]
        if op == "SkipLayerNormalization":
            inits["beta"] = (0.1 * r.standard_normal(D)).astype(np.float32)
            ins.append("beta" if beta else "")
        if bias:
            inits["bias"] = (0.1 * r.standard_normal(D)).astype(np.float32)
            ins.append("bias")
        outs = ["y", "", "", "sum"] if sum_out else ["y"]
        if stats and op == "SkipLayerNormalization":
            outs = ["y", "mean" if stats != "inv" else "", "inv_std", "sum" if sum_out else ""]
    else:
        ins = ["x", "gamma"]
        if op == "LayerNormalization" and beta:
            inits["beta"] = (0.1 * r.standard_normal(D)).astype(np.float32)
            ins.append("beta")
        outs = ["y"]
    while outs and not outs[-1]:
        outs.pop()
    node = helper.make_node(op, ins, outs, name=op.lower(), domain=domain, **attrs)
    return build_model([node], inputs, [(o, None) for o in outs if o], inits, opset=opset), feeds


def act_case(op: str, bias: bool = True, alpha: Optional[float] = None, seed: int = 0):
    """Gelu / BiasGelu / FastGelu / QuickGelu / GemmFastGelu / BiasAdd / BiasSplitGelu."""
    r = seeded(seed)
    x = (r.standard_normal((B, S, D)) * 2).astype(np.float32)
    inputs, feeds, inits = [("x", F32, [B, S, D])], {"x": x}, {}
    ins = ["x"]
    if op in ("BiasGelu", "FastGelu", "BiasSplitGelu") and bias:
        inits["bias"] = (0.3 * r.standard_normal(D)).astype(np.float32)
        ins.append("bias")
    if op == "GemmFastGelu":
        inits["w"] = weight(r, D, 2 * D)
        ins.append("w")
        if bias:
            inits["bias"] = (0.3 * r.standard_normal(2 * D)).astype(np.float32)
            ins.append("bias")
    if op == "BiasAdd":
        inits["bias"] = (0.3 * r.standard_normal(D)).astype(np.float32)
        feeds["skip"] = r.standard_normal((B, S, D)).astype(np.float32)
        inputs.append(("skip", F32, [B, S, D]))
        ins += ["bias", "skip"]
    attrs = {} if alpha is None else {"alpha": alpha}
    node = helper.make_node(op, ins, ["y"], name=op.lower(), domain=MS, **attrs)
    return build_model([node], inputs, [("y", None)], inits), feeds


def _mask(r, form: str, L: int):
    """(input spec, value) of a mask_index / key_padding_mask form, or None."""
    lengths = np.array([L, L - 3][:B], np.int32)
    if form == "none":
        return None
    if form == "1d":
        return ("mask", I32, [B]), lengths
    if form == "1d_start":
        return ("mask", I32, [2 * B]), np.concatenate([lengths, np.array([0, 2][:B], np.int32)])
    if form == "2d":
        m = (np.arange(L)[None] < lengths[:, None]).astype(np.int32)
        return ("mask", I32, [B, L]), m
    if form == "3d":
        m = (r.random((B, S, L)) > 0.3).astype(np.int32)
        m[:, :, 0] = 1
        return ("mask", I32, [B, S, L]), m
    raise ValueError(form)


def _add_mask(r, form: str, L: int, ins: List[str], inputs: list, feeds: dict) -> None:
    """Append the mask input of ``form`` (``_mask``; "" for none) to ``ins``, its spec and value."""
    mk = _mask(r, form, L)
    ins.append("mask" if mk else "")
    if mk:
        inputs.append(mk[0])
        feeds["mask"] = mk[1]


def _attention_node(op: str, ins: List[str], name: str, unidirectional: bool, scale: Optional[float],
                    filter_value: Optional[float], **attrs) -> onnx.NodeProto:
    """The com.microsoft attention node ``op`` with N heads on ``ins`` (trailing empty inputs
    dropped), output "y"; the optional attributes set when given."""
    while ins and not ins[-1]:
        ins.pop()
    attrs["num_heads"] = N
    if unidirectional:
        attrs["unidirectional"] = 1
    if scale is not None:
        attrs["scale"] = scale
    if filter_value is not None:
        attrs["mask_filter_value"] = filter_value
    return helper.make_node(op, ins, ["y"], name=name, domain=MS, **attrs)


def attention_case(mask: str = "2d", unidirectional: bool = False, qkv_sizes=None, scale: Optional[float] = None,
                   attn_bias: bool = False, bias: bool = True, filter_value: Optional[float] = None,
                   dynamic_weights: bool = False, gain: float = 1.0, seed: int = 0):
    """com.microsoft Attention on [B, S, D]."""
    r = seeded(seed)
    sizes = list(qkv_sizes or [D, D, D])
    inits = {"w": weight(r, D, sum(sizes))}
    x = (r.standard_normal((B, S, D)) * gain).astype(np.float32)
    inputs, feeds = [("x", F32, [B, S, D])], {"x": x}
    ins = ["x", "w"]
    if dynamic_weights:
        inputs.append(("w_in", F32, [D, sum(sizes)]))
        feeds["w_in"] = inits.pop("w")
        ins[1] = "w_in"
    if bias:
        inits["bias"] = (0.1 * r.standard_normal(sum(sizes))).astype(np.float32)
    ins.append("bias" if bias else "")
    _add_mask(r, mask, S, ins, inputs, feeds)
    if attn_bias:
        ins += ["", "attn_bias"]
        inputs.append(("attn_bias", F32, [1, N, S, S]))
        feeds["attn_bias"] = r.standard_normal((1, N, S, S)).astype(np.float32)
    node = _attention_node("Attention", ins, "attention", unidirectional, scale, filter_value,
                           **({"qkv_hidden_sizes": sizes} if qkv_sizes else {}))
    return build_model([node], inputs, [("y", None)], inits), feeds


def mha_case(form: str = "separate", mask: str = "2d", bias: bool = True, L: int = 6, attn_bias: bool = False,
             unidirectional: bool = False, scale: Optional[float] = None, filter_value: Optional[float] = None,
             seed: int = 0):
    """com.microsoft MultiHeadAttention: separate q [B,S,D], k/v [B,L,D]; packed_qkv [B,S,N,3,H];
    packed_kv key [B,L,N,2,H]; kv_heads k/v [B,N,L,H]."""
    r = seeded(seed)
    H = D // N
    inputs, feeds, inits = [], {}, {}

    def add(name, shape):
        inputs.append((name, F32, shape))
        feeds[name] = r.standard_normal(shape).astype(np.float32)
        return name
    if form == "packed_qkv":
        L = S
        ins = [add("qkv", [B, S, N, 3, H]), "", "", ""]
    elif form == "packed_kv":
        ins = [add("q", [B, S, D]), add("kv", [B, L, N, 2, H]), "", ""]
    elif form == "kv_heads":
        ins = [add("q", [B, S, D]), add("k", [B, N, L, H]), add("v", [B, N, L, H]), ""]
        if bias:
            inits["bias"] = (0.1 * r.standard_normal(3 * D)).astype(np.float32)
            ins[3] = "bias"
    else:
        ins = [add("q", [B, S, D]), add("k", [B, L, D]), add("v", [B, L, D]), ""]
        if bias:
            inits["bias"] = (0.1 * r.standard_normal(3 * D)).astype(np.float32)
            ins[3] = "bias"
    _add_mask(r, mask, L, ins, inputs, feeds)
    if attn_bias:
        ins.append(add("attn_bias", [B, 1, S, L]))
    node = _attention_node("MultiHeadAttention", ins, "mha", unidirectional, scale, filter_value)
    return build_model([node], inputs, [("y", None)], inits), feeds


def dynamic_matmul_case(op: str, r) -> Tuple[onnx.ModelProto, np.ndarray, np.ndarray, np.ndarray]:
    """x [4, 24] @ int8 weights [24, 10] (per-column scales, zero points 0) + bias as onnxruntime's
    optimizer writes it: com.microsoft DynamicQuantizeMatMul, or MatMulIntegerToFloat after a
    DynamicQuantizeLinear (opset 13). The weights drawn from ``r``: (model, wq, ws, bias)."""
    wq = r.integers(-127, 128, (24, 10)).astype(np.int8)
    ws = (r.random(10) * 0.01 + 0.005).astype(np.float32)
    bias = r.standard_normal(10).astype(np.float32)
    inits = [numpy_helper.from_array(v, k) for k, v in
             (("wq", wq), ("ws", ws), ("wz", np.zeros(10, np.int8)), ("bias", bias))]
    if op == "DynamicQuantizeMatMul":
        nodes = [helper.make_node(op, ["x", "wq", "ws", "wz", "bias"], ["y"], domain=MS, name="dqmm")]
    else:
        nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
                 helper.make_node(op, ["xq", "wq", "xs", "ws", "xz", "wz", "bias"], ["y"], domain=MS, name="dqmm")]
    m = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [4, 24])],
                                            [helper.make_tensor_value_info("y", F32, [4, 10])], inits),
                          opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    return m, wq, ws, bias


def embed_case(segment: bool = True, mask: bool = True, sum_out: bool = False, position_ids: bool = False,
               seed: int = 0):
    """com.microsoft EmbedLayerNormalization (int32 ids)."""
    r = seeded(seed)
    V = 50
    inits = {"word": weight(r, V, D, gain=3.0), "pos": weight(r, 16, D, gain=3.0), "seg": weight(r, 2, D, gain=3.0),
             "gamma": (1 + 0.1 * r.standard_normal(D)).astype(np.float32),
             "beta": (0.1 * r.standard_normal(D)).astype(np.float32)}
    inputs = [("ids", I32, [B, S])]
    feeds = {"ids": r.integers(0, V, (B, S)).astype(np.int32)}
    ins = ["ids", "segment_ids" if segment else "", "word", "pos", "seg" if segment else "", "gamma", "beta"]
    if segment:
        inputs.append(("segment_ids", I32, [B, S]))
        feeds["segment_ids"] = r.integers(0, 2, (B, S)).astype(np.int32)
    if not segment:
        inits.pop("seg")
    if mask:
        inputs.append(("mask", I32, [B, S]))
        feeds["mask"] = (np.arange(S)[None] < np.array([[S], [S - 3]])).astype(np.int32)
    ins.append("mask" if mask else "")
    if position_ids:
        inputs.append(("position_ids", I32, [B, S]))
        feeds["position_ids"] = r.integers(0, 16, (B, S)).astype(np.int32)
        ins.append("position_ids")
    while ins and not ins[-1]:
        ins.pop()
    outs = ["y", "mask_index"] + (["embedding_sum"] if sum_out else [])
    node = helper.make_node("EmbedLayerNormalization", ins, outs, name="embed", domain=MS, epsilon=1e-12)
    outputs = [("y", None), ("mask_index", I32)] + ([("embedding_sum", None)] if sum_out else [])
    return build_model([node], inputs, outputs, inits), feeds


def fused_case(op: str, activation: Optional[str] = None, params=(), trans: bool = False, alpha: float = 1.0,
               z: bool = False, seed: int = 0):
    """onnxruntime's FusedMatMul / FusedGemm / FusedConv (what ORT_ENABLE_EXTENDED saves)."""
    r = seeded(seed)
    attrs = {}
    if op == "FusedMatMul":   # attention scores: Q [B,N,S,H] x K [B,N,S,H]^T
        shape = [B, N, S, D // N]
        inputs = [("a", F32, shape), ("b", F32, shape)]
        attrs = {"transB": 1 if trans else 0, "alpha": alpha}
        if not trans:
            inputs[1] = ("b", F32, [B, N, D // N, S])
        node = helper.make_node(op, ["a", "b"], ["y"], domain=MS, name="fused", **attrs)
        feeds = {k: r.standard_normal(s).astype(np.float32) for k, _, s in inputs}
        return build_model([node], inputs, [("y", None)], {}), feeds
    if op == "FusedGemm":
        inits = {"w": weight(r, 2 * D, D), "c": (0.1 * r.standard_normal(2 * D)).astype(np.float32)}
        inputs = [("x", F32, [B, D])]
        attrs = {"transB": 1, "alpha": alpha}
        ins = ["x", "w", "c"]
    else:
        inits = {"w": (r.standard_normal((8, 4, 3, 3)) / 6).astype(np.float32),
                 "c": (0.1 * r.standard_normal(8)).astype(np.float32)}
        inputs = [("x", F32, [1, 4, 10, 10])]
        attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]}
        ins = ["x", "w", "c"]
        if z:
            inputs.append(("z", F32, [1, 8, 10, 10]))
            ins.append("z")
        if params:
            attrs["activation_params"] = list(params)
    if activation:
        attrs["activation"] = activation
        if op == "FusedGemm" and params:
            attrs["activation_alpha"] = params[0]
            if len(params) > 1:
                attrs["activation_beta"] = params[1]
    node = helper.make_node(op, ins, ["y"], domain=MS, name="fused", **attrs)
    feeds = {k: (2 * r.standard_normal(s)).astype(np.float32) for k, _, s in inputs}
    return build_model([node], inputs, [("y", None)], inits), feeds


def rotary_case(interleaved: bool = False, four_d: bool = False, rotary_dim: int = 0, offset: bool = False,
                seed: int = 0):
    """com.microsoft RotaryEmbedding on [B, S, N*H] or [B, N, S, H]."""
    r = seeded(seed)
    H = 16
    R = rotary_dim or H
    shape = [B, N, S, H] if four_d else [B, S, N * H]
    inv = 1.0 / (10000 ** (np.arange(0, R, 2) / R))
    ang = np.arange(32)[:, None] * inv[None]
    inits = {"cos": np.cos(ang).astype(np.float32), "sin": np.sin(ang).astype(np.float32)}
    inputs = [("x", F32, shape), ("pos", I64, [1] if offset else [B, S])]
    feeds = {"x": r.standard_normal(shape).astype(np.float32),
             "pos": np.array([5], np.int64) if offset else r.integers(0, 32, (B, S)).astype(np.int64)}
    attrs = {"interleaved": int(interleaved), "num_heads": N}
    if rotary_dim:
        attrs["rotary_embedding_dim"] = rotary_dim
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="rotary", domain=MS, **attrs)
    return build_model([node], inputs, [("y", None)], inits), feeds


CASES: Dict[str, Callable[[], Tuple[onnx.ModelProto, Dict[str, np.ndarray]]]] = {
    "skip_ln": lambda: norm_case("SkipLayerNormalization"),
    "skip_ln_nobias_nobeta_eps": lambda: norm_case("SkipLayerNormalization", bias=False, beta=False, eps=1e-5),
    "skip_ln_sum_out": lambda: norm_case("SkipLayerNormalization", sum_out=True),
    "skip_ln_inv_std_out": lambda: norm_case("SkipLayerNormalization", stats="inv", sum_out=True),
    "skip_ln_stats": lambda: norm_case("SkipLayerNormalization", stats=True, sum_out=True),
    "skip_ln_broadcast_skip": lambda: norm_case("SkipLayerNormalization", broadcast_skip=True),
    "skip_simplified_ln": lambda: norm_case("SkipSimplifiedLayerNormalization", sum_out=True),
    "skip_simplified_ln_nobias": lambda: norm_case("SkipSimplifiedLayerNormalization", bias=False, eps=1e-6),
    "simplified_ln": lambda: norm_case("SimplifiedLayerNormalization", eps=1e-6),
    "ort_layernorm_opset14": lambda: norm_case("LayerNormalization", eps=1e-5, opset=14),
    "ort_layernorm_opset11": lambda: norm_case("LayerNormalization", eps=1e-5, opset=11),
    "gelu": lambda: act_case("Gelu"),
    "bias_gelu": lambda: act_case("BiasGelu"),
    "fast_gelu": lambda: act_case("FastGelu"),
    "fast_gelu_nobias": lambda: act_case("FastGelu", bias=False),
    "quick_gelu": lambda: act_case("QuickGelu"),
    "quick_gelu_alpha1": lambda: act_case("QuickGelu", alpha=1.0),
    "attention_nomask": lambda: attention_case("none"),
    "attention_2d": lambda: attention_case("2d"),
    "attention_1d": lambda: attention_case("1d"),
    "attention_1d_start": lambda: attention_case("1d_start"),
    "attention_3d": lambda: attention_case("3d"),
    "attention_unidirectional": lambda: attention_case("2d", unidirectional=True),
    "attention_causal_nomask": lambda: attention_case("none", unidirectional=True),
    "attention_qkv_sizes": lambda: attention_case("2d", qkv_sizes=[32, 32, 16]),
    "attention_scale_bias_filter": lambda: attention_case("2d", scale=0.3, attn_bias=True, filter_value=-1000.0),
    "attention_nobias": lambda: attention_case("none", bias=False),
    # a fill small enough that masked keys keep weight: checks the fill value and that causal adds to it
    "attention_soft_fill_causal": lambda: attention_case("2d", unidirectional=True, filter_value=-2.0),
    # scores spanning ~2.5e4: onnxruntime's causal keys get weight 0, not mask_filter_value
    "attention_causal_large_scores": lambda: attention_case("2d", unidirectional=True, filter_value=-2.0, gain=60.0),
    "attention_soft_fill_1d_start": lambda: attention_case("1d_start", filter_value=-1.5),
    "attention_dynamic_weights": lambda: attention_case("2d", dynamic_weights=True),
    "mha_separate": lambda: mha_case("separate"),
    "mha_separate_nobias_nomask": lambda: mha_case("separate", bias=False, mask="none"),
    "mha_3d_mask_bias": lambda: mha_case("separate", mask="3d", attn_bias=True, scale=0.2),
    "mha_1d_mask": lambda: mha_case("separate", mask="1d"),
    "mha_causal": lambda: mha_case("separate", mask="none", L=S, unidirectional=True),
    "mha_kv_heads": lambda: mha_case("kv_heads", mask="2d"),
    "mha_kv_heads_nobias_3d": lambda: mha_case("kv_heads", bias=False, mask="3d"),
    "mha_cross_causal": lambda: mha_case("separate", mask="2d", L=5, unidirectional=True, filter_value=-2.0),
    "mha_soft_fill_causal_2d": lambda: mha_case("separate", mask="2d", L=S, unidirectional=True, filter_value=-2.0),
    "embed": lambda: embed_case(),
    "embed_no_segment_no_mask": lambda: embed_case(segment=False, mask=False, sum_out=True),
    "fused_matmul_scores": lambda: fused_case("FusedMatMul", trans=True, alpha=0.35),
    "fused_matmul_plain": lambda: fused_case("FusedMatMul"),
    "fused_gemm_tanh": lambda: fused_case("FusedGemm", "Tanh"),
    "fused_gemm_leaky": lambda: fused_case("FusedGemm", "LeakyRelu", (0.2,), alpha=0.5),
    "fused_gemm_hardsigmoid": lambda: fused_case("FusedGemm", "HardSigmoid", (0.3, 0.4)),
    "fused_conv_relu": lambda: fused_case("FusedConv", "Relu"),
    "fused_conv_clip_sum": lambda: fused_case("FusedConv", "Clip", (0.0, 6.0), z=True),
    "fused_conv_leaky": lambda: fused_case("FusedConv", "LeakyRelu", (0.1,)),
    "fused_conv_hardsigmoid": lambda: fused_case("FusedConv", "HardSigmoid", (0.2, 0.5)),
    "fused_conv_sigmoid": lambda: fused_case("FusedConv", "Sigmoid"),
    "rotary": lambda: rotary_case(),
    "rotary_interleaved": lambda: rotary_case(interleaved=True),
    "rotary_4d_partial": lambda: rotary_case(four_d=True, rotary_dim=8),
    "rotary_offset": lambda: rotary_case(offset=True),
}
# CUDA-only ops (no CPU kernel in onnxruntime): checked against numpy transcriptions of their definitions
CUDA_ONLY = {
    "bias_add": lambda: act_case("BiasAdd"),
    "bias_split_gelu": lambda: act_case("BiasSplitGelu"),
    "gemm_fast_gelu": lambda: act_case("GemmFastGelu"),
    "mha_packed_qkv": lambda: mha_case("packed_qkv", mask="none"),
    "mha_packed_kv": lambda: mha_case("packed_kv", mask="2d"),
}


def cuda_only_reference(name: str, feeds, model) -> np.ndarray:
    """The CUDA-only ops' results on the CPU: numpy of docs/ContribOperators.md's BiasAdd (x + bias +
    skip), BiasSplitGelu (left * Gelu(right) of x + bias, halves of the last axis) and GemmFastGelu
    (FastGelu(x @ W + bias)); a packed MultiHeadAttention is onnxruntime's MultiHeadAttention on the
    unpacked query / key / value."""
    from math import erf
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    if name.startswith("mha_packed"):
        return _unpacked_mha(name, feeds, model)
    if name == "gemm_fast_gelu":
        y = feeds["x"].astype(np.float64) @ inits["w"] + inits["bias"]
        return (0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3)))).astype(np.float32)
    x = feeds["x"].astype(np.float64) + inits["bias"]
    if name == "bias_add":
        return (x + feeds["skip"]).astype(np.float32)
    h = x.shape[-1] // 2
    left, right = x[..., :h], x[..., h:]
    gelu = right * 0.5 * (1 + np.vectorize(erf)(right / math.sqrt(2.0)))
    return (left * gelu).astype(np.float32)


def _unpacked_mha(name: str, feeds, model) -> np.ndarray:
    import onnxruntime as ort
    node = model.graph.node[0]
    f = dict(feeds)
    if name == "mha_packed_qkv":
        qkv = f.pop("qkv")
        f.update({p: qkv[:, :, :, i].reshape(qkv.shape[0], qkv.shape[1], -1) for i, p in enumerate("qkv")})
        ins = ["q", "k", "v"] + list(node.input[3:])
    else:
        kv = f.pop("kv")
        f.update({p: kv[:, :, :, i].reshape(kv.shape[0], kv.shape[1], -1) for i, p in enumerate("kv")})
        ins = ["q", "k", "v"] + list(node.input[3:])
    inputs = [(k, I32 if v.dtype == np.int32 else F32, list(v.shape)) for k, v in f.items()]
    node = helper.make_node("MultiHeadAttention", ins, ["y"], domain=MS, num_heads=N)
    m = build_model([node], inputs, [("y", None)], {})
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]


def contrib_ops(model: onnx.ModelProto) -> List[str]:
    return sorted(n.op_type for n in model.graph.node if n.domain == MS)
