"""Text and speech encoders the way PyTorch's exporter writes them, with seeded random weights
(no downloads; issue #21 "Beyond CNNs"):

``bert_encoder``    MiniLM/BERT: int64 input_ids / token_type_ids -> embedding Gathers, position
                    embedding (a Gather of constants) -> LayerNorm -> 2 post-LN layers with an HF
                    attention_mask [B, T] int64 -> (1 - m) * lowest -> pooler (token 0 -> Gemm -> Tanh).
``whisper_encoder`` log-mel [1, 80, T] -> Conv1d k3 + GELU -> Conv1d k3 s2 + GELU -> Transpose ->
                    + positional embedding [T/2, D] -> 2 pre-LN layers (3-D bmm heads) -> LayerNorm.
``conformer_block`` [1, T, D] -> half FFN (SiLU) -> MHSA -> conv module (pointwise Conv1d 2D, GLU as
                    Split + Sigmoid + Mul, depthwise Conv1d k15, BatchNorm, SiLU, pointwise) ->
                    half FFN -> LayerNorm, with the Transposes between [B,T,D] and [B,D,T].

    python -m onnx_mrvl.testing.arch_speech          # regions and CPU nodes of each after convert
"""
from __future__ import annotations

import math
import sys
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
import onnx
from onnx import helper

from .arch_transformer import Net, gelu, layernorm

I64 = onnx.TensorProto.INT64
F32 = onnx.TensorProto.FLOAT


def speech_model(n: Net, name: str, inputs: List[Tuple[str, int, List[int]]], outputs: Dict[str, str]) -> onnx.ModelProto:
    """``outputs``: graph output name -> the tensor it is (the producing node's output is renamed)."""
    for out, t in outputs.items():
        for node in n.nodes:
            for i, o in enumerate(node.output):
                if o == t:
                    node.output[i] = out
            for i, x in enumerate(node.input):
                if x == t:
                    node.input[i] = out
    g = helper.make_graph(n.nodes, name, [helper.make_tensor_value_info(x, e, s) for x, e, s in inputs],
                          [helper.make_tensor_value_info(o, F32, None) for o in outputs], n.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", n.opset)])
    m.ir_version = 8 if n.opset <= 17 else 9
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def _i64(n: Net, v) -> str:
    return n.const(np.array(v, np.int64), "shape")


def _linear(n: Net, x: str, k: int, o: int, name: str, bias: bool = True) -> str:
    if bias:
        return n.linear(x, k, o, name)
    w = (n.rng.standard_normal((k, o)) * math.sqrt(1.0 / k)).astype(np.float32)
    return n.op("MatMul", [x, n.const(w, f"{name}_w")], f"{name}_matmul")


def mha_block(n: Net, x: str, T: int, D: int, H: int, mask: str = "", bmm3d: bool = False,
         scale_q: bool = False) -> str:
    """Self-attention on [1, T, D] (output projection included, no residual). ``bmm3d``: heads as
    [H, T, d] (HF Whisper's ``view(bsz * heads, -1, d)``), else HF BERT's [1, H, T, d] with K^T by a
    second Transpose; ``scale_q``: q_proj(x) * d^-0.5 (Whisper) instead of scores / sqrt(d);
    ``mask``: an additive [1, 1, 1, T] tensor."""
    d = D // H
    q = _linear(n, x, D, D, "q")
    if scale_q:
        q = n.op("Mul", [q, n.const(np.array(d ** -0.5, np.float32), "scaling")], "q_scale")
    k = _linear(n, x, D, D, "k", bias=not scale_q)     # Whisper's k_proj has no bias
    v = _linear(n, x, D, D, "v")
    heads = []
    for t, p in zip((q, k, v), "qkv"):
        t = n.op("Reshape", [t, _i64(n, [1, T, H, d])], f"{p}_view")
        t = n.op("Transpose", [t], f"{p}_heads", perm=[0, 2, 1, 3])
        if bmm3d:
            t = n.op("Reshape", [t, _i64(n, [H, T, d])], f"{p}_bmm_view")
        heads.append(t)
    q, k, v = heads
    kt = n.op("Transpose", [k], "k_t", perm=[0, 2, 1] if bmm3d else [0, 1, 3, 2])
    s = n.op("MatMul", [q, kt], "qk")
    if not scale_q:
        s = n.op("Div", [s, n.const(np.array(math.sqrt(d), np.float32), "sqrt_d")], "qk_scale")
    if mask:
        s = n.op("Add", [s, mask], "add_mask")
    s = n.op("Softmax", [s], "attn_softmax", axis=-1)
    o = n.op("MatMul", [s, v], "av")
    if bmm3d:
        o = n.op("Reshape", [o, _i64(n, [1, H, T, d])], "av_view")
    o = n.op("Transpose", [o], "av_t", perm=[0, 2, 1, 3])
    o = n.op("Reshape", [o, _i64(n, [1, T, D])], "merge_heads")
    return _linear(n, o, D, D, "out_proj")


def _hf_mask(n: Net, name: str = "attention_mask", unsqueezes: int = 1, T: int = 0) -> str:
    """HF's extended attention mask: [B, T] int64 -> Unsqueeze [B, 1, 1, T] (one Unsqueeze, or two as
    older exporters write ``mask[:, None, None, :]``) -> Cast -> (1 - m) * lowest. ``unsqueezes`` 0
    (with ``T``): transformers' SDPA-era ``_prepare_4d_attention_mask``: Unsqueeze -> Expand
    [1, 1, T, T] -> Cast -> 1 - m -> Where(Cast(bool), lowest, 1 - m)."""
    if unsqueezes == 0:
        m = n.op("Unsqueeze", [name, _i64(n, [1, 2])], "mask_unsqueeze")
        m = n.op("Expand", [m, _i64(n, [1, 1, T, T])], "mask_expand")
        m = n.op("Sub", [n.const(np.array(1.0, np.float32), "one"), n.op("Cast", [m], "mask_cast", to=F32)],
                 "mask_invert")
        lowest = n.const(np.array(np.finfo(np.float32).min, np.float32), "lowest")
        return n.op("Where", [n.op("Cast", [m], "mask_bool", to=onnx.TensorProto.BOOL), lowest, m], "mask_fill")
    if unsqueezes == 2:
        m = n.op("Unsqueeze", [n.op("Unsqueeze", [name, _i64(n, [1])], "mask_unsqueeze"), _i64(n, [2])],
                 "mask_unsqueeze")
    else:
        m = n.op("Unsqueeze", [name, _i64(n, [1, 2])], "mask_unsqueeze")
    m = n.op("Cast", [m], "mask_cast", to=F32)
    m = n.op("Sub", [n.const(np.array(1.0, np.float32), "one"), m], "mask_sub")
    return n.op("Mul", [m, n.const(np.array(np.finfo(np.float32).min, np.float32), "lowest")], "mask_mul")


def bert_encoder(seed: int = 0, T: int = 16, D: int = 32, H: int = 4, layers: int = 2, vocab: int = 100,
                 ln: str = "torch", mask_unsqueezes: int = 1, positions: str = "const") -> onnx.ModelProto:
    """MiniLM/BERT-style encoder (legacy exporter, opset 14). Inputs input_ids, attention_mask,
    token_type_ids [1, T] int64; outputs last_hidden_state [1, T, D], pooler_output [1, D].
    ``mask_unsqueezes`` 2: the mask's [B, 1, 1, T] as two Unsqueezes (onnxruntime's Attention fusion
    matches that form); 0: the SDPA-era Expand / Where mask (``_hf_mask``). ``positions`` "slice": position_ids = buffer[:, :Shape(input_ids)[1]] as HF's
    dynamic-axes export writes it (Shape, Gather, Unsqueeze, Slice; onnxruntime's EmbedLayerNormalization
    fusion matches it), "const": that slice folded to a constant."""
    n = Net(seed, 17 if ln == "op" else 14)
    table = lambda rows: (n.rng.standard_normal((rows, D)) * 0.5).astype(np.float32)   # noqa: E731
    x = n.op("Gather", [n.const(table(vocab), "word_embeddings"), "input_ids"], "word_embed", axis=0)
    tt = n.op("Gather", [n.const(table(2), "token_type_embeddings"), "token_type_ids"], "type_embed", axis=0)
    x = n.op("Add", [x, tt], "embed_add_type")
    # position_ids = buffer[:, :T] (a constant after constant folding) -> Gather of the table
    if positions == "slice":
        seq = n.op("Gather", [n.op("Shape", ["input_ids"], "ids_shape"), n.const(np.array(1, np.int64), "one")],
                   "seq_len", axis=0)
        end = n.op("Unsqueeze", [seq, _i64(n, [0])], "seq_len_1d")
        ids = n.op("Slice", [n.const(np.arange(64, dtype=np.int64).reshape(1, 64), "position_ids"), _i64(n, [0]), end,
                             _i64(n, [1]), _i64(n, [1])], "position_ids_slice")
    else:
        ids = n.const(np.arange(T, dtype=np.int64).reshape(1, T), "position_ids")
    pos = n.op("Gather", [n.const(table(64), "position_embeddings"), ids], "pos_embed", axis=0)
    x = n.op("Add", [x, pos], "embed_add_pos")
    x = layernorm(n, x, [1, T, D], ln)
    mask = _hf_mask(n, unsqueezes=mask_unsqueezes, T=T)
    for _ in range(layers):
        a = mha_block(n, x, T, D, H, mask=mask)
        x = layernorm(n, n.op("Add", [a, x], "attn_residual"), [1, T, D], ln)
        h = gelu(n, n.linear(x, D, 4 * D, "intermediate"), "erf")
        x = layernorm(n, n.op("Add", [n.linear(h, 4 * D, D, "output"), x], "ffn_residual"), [1, T, D], ln)
    hidden = x
    first = n.op("Gather", [x, n.const(np.array(0, np.int64), "idx0")], "first_token", axis=1)   # [1, D]
    w = (n.rng.standard_normal((D, D)) * math.sqrt(1.0 / D)).astype(np.float32)
    p = n.op("Gemm", [first, n.const(w, "pooler_w"), n.const(n.rng.standard_normal(D) * 0.05, "pooler_b")],
             "pooler_dense", transB=1)
    pooled = n.op("Tanh", [p], "pooler_tanh")
    ids = [("input_ids", I64, [1, T]), ("attention_mask", I64, [1, T]), ("token_type_ids", I64, [1, T])]
    return speech_model(n, "bert_encoder", ids, {"last_hidden_state": hidden, "pooler_output": pooled})


def _conv1d(n: Net, x: str, cin: int, cout: int, k: int, name: str, stride: int = 1, group: int = 1,
            bias: bool = True) -> str:
    w = (n.rng.standard_normal((cout, cin // group, k)) * math.sqrt(2.0 / (cin // group * k))).astype(np.float32)
    ins = [x, n.const(w, f"{name}_w")]
    if bias:
        ins.append(n.const(n.rng.standard_normal(cout) * 0.05, f"{name}_b"))
    return n.op("Conv", ins, name, kernel_shape=[k], strides=[stride], pads=[k // 2, k // 2], group=group,
                dilations=[1])


def whisper_encoder(seed: int = 0, mels: int = 80, T: int = 200, D: int = 32, H: int = 4,
                    layers: int = 2, ln: str = "op", pos_rank: int = 2) -> onnx.ModelProto:
    """HF Whisper encoder (opset 17): input_features [1, mels, T] -> last_hidden_state [1, T/2, D].
    ``pos_rank``: the positional embedding as [T/2, D] (HF: ``embed_positions.weight``) or [1, T/2, D]."""
    n = Net(seed, 17 if ln == "op" else 14)
    x = gelu(n, _conv1d(n, "input_features", mels, D, 3, "conv1"), "erf")
    x = gelu(n, _conv1d(n, x, D, D, 3, "conv2", stride=2), "erf")
    T2 = (T - 1) // 2 + 1
    x = n.op("Transpose", [x], "permute", perm=[0, 2, 1])
    pos = (n.rng.standard_normal((T2, D)) * 0.2).astype(np.float32)
    x = n.op("Add", [x, n.const(pos if pos_rank == 2 else pos[None], "embed_positions")], "add_pos")
    for _ in range(layers):
        a = mha_block(n, layernorm(n, x, [1, T2, D], ln), T2, D, H, bmm3d=True, scale_q=True)
        x = n.op("Add", [x, a], "attn_residual")
        h = gelu(n, n.linear(layernorm(n, x, [1, T2, D], ln), D, 4 * D, "fc1"), "erf")
        x = n.op("Add", [x, n.linear(h, 4 * D, D, "fc2")], "ffn_residual")
    x = layernorm(n, x, [1, T2, D], ln)
    return speech_model(n, "whisper_encoder", [("input_features", F32, [1, mels, T])], {"last_hidden_state": x})


def _silu(n: Net, x: str) -> str:
    return n.op("Mul", [x, n.op("Sigmoid", [x], "swish_sigmoid")], "swish")


def _half_ffn(n: Net, x: str, T: int, D: int, ln: str) -> str:
    h = layernorm(n, x, [1, T, D], ln)
    h = n.linear(_silu(n, n.linear(h, D, 4 * D, "ffn_w1")), 4 * D, D, "ffn_w2")
    h = n.op("Mul", [h, n.const(np.array(0.5, np.float32), "half")], "ffn_half")
    return n.op("Add", [x, h], "ffn_residual")


def _batchnorm(n: Net, x: str, c: int) -> str:
    r = n.rng
    p = [r.uniform(0.5, 1.5, c), r.normal(0, 0.1, c), r.normal(0, 0.1, c), r.uniform(0.5, 1.5, c)]
    return n.op("BatchNormalization", [x] + [n.const(v, nm) for v, nm in zip(p, ("bn_g", "bn_b", "bn_m", "bn_v"))],
                "batch_norm", epsilon=1e-5)


def conformer_block(seed: int = 0, T: int = 32, D: int = 32, H: int = 4, kernel: int = 15,
                    ln: str = "op") -> onnx.ModelProto:
    """One conformer block (torchaudio / ESPnet order, opset 17 LayerNormalization) on [1, T, D]."""
    n = Net(seed, 17 if ln == "op" else 13)
    x = _half_ffn(n, "input", T, D, ln)
    x = n.op("Add", [x, mha_block(n, layernorm(n, x, [1, T, D], ln), T, D, H)], "mhsa_residual")
    h = n.op("Transpose", [layernorm(n, x, [1, T, D], ln)], "to_channels", perm=[0, 2, 1])   # [1, D, T]
    h = _conv1d(n, h, D, 2 * D, 1, "pointwise1")
    a, b = n.op("Split", [h, _i64(n, [D, D])], "glu_split", axis=1), None
    n.nodes[-1].output[:] = [f"{a}0", f"{a}1"]
    a, b = f"{a}0", f"{a}1"
    h = n.op("Mul", [a, n.op("Sigmoid", [b], "glu_sigmoid")], "glu_mul")
    h = _conv1d(n, h, D, D, kernel, "depthwise", group=D)
    h = _silu(n, _batchnorm(n, h, D))
    h = _conv1d(n, h, D, D, 1, "pointwise2")
    h = n.op("Transpose", [h], "to_time", perm=[0, 2, 1])
    x = n.op("Add", [x, h], "conv_residual")
    x = _half_ffn(n, x, T, D, ln)
    x = layernorm(n, x, [1, T, D], ln)
    return speech_model(n, "conformer_block", [("input", F32, [1, T, D])], {"output": x})


def feeds(model: onnx.ModelProto, seed: int = 0) -> Dict[str, np.ndarray]:
    """Inputs: ids in [0, 100), token types 0/1, attention_mask with the last quarter padding,
    float inputs N(0, 1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "attention_mask":
            m = np.ones(shape, np.int64)
            m[..., -(shape[-1] // 4):] = 0
            out[vi.name] = m
        elif vi.name == "input_ids":
            out[vi.name] = rng.integers(0, 100, shape).astype(np.int64)
        elif vi.name == "token_type_ids":
            out[vi.name] = (np.arange(shape[-1]) >= shape[-1] // 2).astype(np.int64).reshape(shape)
        else:
            out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def all_models() -> Dict[str, Callable[[], onnx.ModelProto]]:
    return {"bert_encoder": bert_encoder, "bert_encoder_ln_op": lambda: bert_encoder(ln="op"),
            "whisper_encoder": whisper_encoder, "conformer_block": conformer_block}


def main(argv: Sequence[str] = None) -> int:
    from .arch_transformer import region_count
    for name, build in all_models().items():
        regions, cpu = region_count(build())
        print(f"{name:24s} regions {regions:3d}  CPU nodes {cpu:3d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
