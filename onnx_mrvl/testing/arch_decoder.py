"""Decoder-style (Llama / Qwen2 / T5) and DeBERTa-style blocks the way torch's exporters write
them, with seeded random weights (docs/surveys/transformers.md):

``rmsnorm``         T5LayerNorm / LlamaRMSNorm: Pow(x, 2) | Mul(x, x) -> ReduceMean -> + eps -> Sqrt ->
                    Reciprocal | Div(1, .) | Div(x, .) -> * x -> [gamma *]
``rotary``          x * cos + cat(-x[..., d/2:], x[..., :d/2]) * sin (constant cos / sin tables)
``llama_block``     RMSNorm -> q / k / v (no bias; k, v with fewer heads) -> rotary on q, k ->
                    repeat_kv (Unsqueeze -> Expand -> Reshape) -> causal softmax attention ->
                    o_proj + residual -> RMSNorm -> SiLU-gated MLP + residual
``swin_shift_merge``  Swin's cyclic shift (torch.roll of [B, H, W, C] as Slice + Concat on axes 1
                    and 2) and patch merging (x[:, i::2, j::2, :] x 4 -> Concat -> LayerNorm -> Linear)
``deberta_attention``  DeBERTa-v2/v3's disentangled attention as constant folding leaves it: heads
                    [H, T, d]; c2p = q @ K_pos (a constant [H, d, 2S]) gathered along the last axis
                    at clamp(i - j + S) (a constant GatherElements index), p2c likewise from k and
                    transposed; scores + c2p + p2c -> Softmax -> ``masked_fill`` of a constant
                    all-false mask (no attention_mask given) -> P V
``masked_fill_attention``  DeBERTa's ``scores.masked_fill(~mask, float32 lowest)`` -> Softmax with
                    an int64 attention_mask [1, T] input

    python -m onnx_mrvl.testing.arch_decoder        # regions and CPU nodes of each after convert
"""
from __future__ import annotations

import sys
from typing import List

import numpy as np
import onnx
from onnx import helper

from .arch_transformer import Net

F32, I64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
LOWEST = float(np.finfo(np.float32).min)
RMS_FORMS = ("pow_reciprocal", "pow_div_one", "div", "mul_square", "no_gamma")


def _i64(n: Net, v) -> str:
    return n.const(np.array(v, np.int64), "shape")


def rmsnorm(n: Net, x: str, d: int, form: str = "pow_reciprocal", eps: float = 1e-6) -> str:
    """RMSNorm of ``x`` over its last axis (of size ``d``) in one of ``RMS_FORMS``."""
    if form == "mul_square":
        sq = n.op("Mul", [x, x], "square")
    else:
        sq = n.op("Pow", [x, n.const(np.array(2.0, np.float32), "two")], "pow")
    m = n.mean(sq, -1)
    v = n.op("Add", [m, n.const(np.array(eps, np.float32), "eps")], "add_eps")
    s = n.op("Sqrt", [v], "sqrt")
    if form == "div":
        y = n.op("Div", [x, s], "normalise")
    else:
        r = (n.op("Div", [n.const(np.array(1.0, np.float32), "one"), s], "rsqrt") if form == "pow_div_one"
             else n.op("Reciprocal", [s], "rsqrt"))
        y = n.op("Mul", [x, r], "normalise")
    if form == "no_gamma":
        return y
    gamma = n.rng.uniform(0.5, 1.5, d).astype(np.float32)
    return n.op("Mul", [n.const(gamma, "rms_weight"), y], "rms_scale")


def rotary(n: Net, x: str, shape: List[int], base: float = 10000.0) -> str:
    """HF's apply_rotary_pos_emb on ``x`` [B, H, T, d]: x * cos + rotate_half(x) * sin."""
    T, d = shape[-2], shape[-1]
    inv = 1.0 / base ** (np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.outer(np.arange(T), inv)
    emb = np.concatenate([ang, ang], -1)[None, None]
    cos, sin = n.const(np.cos(emb).astype(np.float32), "cos"), n.const(np.sin(emb).astype(np.float32), "sin")
    h = d // 2
    x1 = n.op("Slice", [x, _i64(n, [0]), _i64(n, [h]), _i64(n, [3]), _i64(n, [1])], "x1")
    x2 = n.op("Slice", [x, _i64(n, [h]), _i64(n, [d]), _i64(n, [3]), _i64(n, [1])], "x2")
    rot = n.op("Concat", [n.op("Neg", [x2], "neg"), x1], "rotate_half", axis=-1)
    return n.op("Add", [n.op("Mul", [x, cos], "x_cos"), n.op("Mul", [rot, sin], "rot_sin")], "rope")


def _proj(n: Net, x: str, k: int, o: int, name: str) -> str:
    w = (n.rng.standard_normal((k, o)) / np.sqrt(k)).astype(np.float32)
    return n.op("MatMul", [x, n.const(w, f"{name}_w")], name)


def llama_block(T: int = 16, D: int = 64, H: int = 4, Hkv: int = 2, opset: int = 18, seed: int = 0) -> onnx.ModelProto:
    """One Llama / Qwen2 decoder layer as an encoder pass (no KV cache) on hidden states [1, T, D]."""
    n = Net(seed, opset)
    d, r = D // H, H // Hkv
    x = "hidden"
    h = rmsnorm(n, x, D)
    q = n.op("Transpose", [n.op("Reshape", [_proj(n, h, D, D, "q_proj"), _i64(n, [1, T, H, d])])], perm=[0, 2, 1, 3])
    k = n.op("Transpose", [n.op("Reshape", [_proj(n, h, D, Hkv * d, "k_proj"), _i64(n, [1, T, Hkv, d])])],
             perm=[0, 2, 1, 3])
    v = n.op("Transpose", [n.op("Reshape", [_proj(n, h, D, Hkv * d, "v_proj"), _i64(n, [1, T, Hkv, d])])],
             perm=[0, 2, 1, 3])
    q, k = rotary(n, q, [1, H, T, d]), rotary(n, k, [1, Hkv, T, d])
    rep = []
    for t, p in ((k, "k"), (v, "v")):   # repeat_kv
        u = n.op("Unsqueeze", [t, _i64(n, [2])], f"{p}_unsqueeze")
        e = n.op("Expand", [u, _i64(n, [1, Hkv, r, T, d])], f"{p}_expand")
        rep.append(n.op("Reshape", [e, _i64(n, [1, H, T, d])], f"{p}_repeat"))
    k, v = rep
    s = n.op("MatMul", [q, n.op("Transpose", [k], "k_t", perm=[0, 1, 3, 2])], "scores")
    s = n.op("Mul", [s, n.const(np.array(d ** -0.5, np.float32), "scale")], "scaled")
    causal = np.where(np.tril(np.ones((T, T), bool)), 0.0, LOWEST).astype(np.float32)[None, None]
    p = n.op("Softmax", [n.op("Add", [s, n.const(causal, "causal_mask")], "masked")], "probs", axis=-1)
    a = n.op("Reshape", [n.op("Transpose", [n.op("MatMul", [p, v], "context")], perm=[0, 2, 1, 3]),
                         _i64(n, [1, T, D])], "merge_heads")
    x = n.op("Add", [x, _proj(n, a, D, D, "o_proj")], "attn_residual")
    h = rmsnorm(n, x, D, "pow_div_one")
    g = _proj(n, h, D, 2 * D, "gate_proj")
    silu = n.op("Mul", [g, n.op("Sigmoid", [g], "gate_sigmoid")], "silu")
    up = _proj(n, h, D, 2 * D, "up_proj")
    n.op("Add", [x, _proj(n, n.op("Mul", [silu, up], "gated"), 2 * D, D, "down_proj")], "mlp_residual")
    return n.model("llama_block", [("hidden", [1, T, D])])


def rmsnorm_block(form: str = "pow_reciprocal", T: int = 16, D: int = 32, opset: int = 18,
                  seed: int = 0) -> onnx.ModelProto:
    """x [1, T, D] -> Linear -> RMSNorm (``RMS_FORMS``) -> Linear -> [1, T, D]: an RMSNorm between
    the int8 layers of a QDQ export. ``form`` "embedding": ``input_ids`` [1, T] -> Gather of a
    [100, D] table (a CPU op: the RMSNorm reads a region input, T5 / Llama's first layer) -> RMSNorm."""
    n = Net(seed, opset)
    if form == "embedding":
        table = n.const(n.rng.standard_normal((100, D)).astype(np.float32), "embed_tokens")
        h = rmsnorm(n, n.op("Gather", [table, "input_ids"], "embedding"), D)
        n.linear(h, D, D, "out_proj")
        m = n.model(f"rmsnorm_{form}", [("x", [1, T])])
        m.graph.input[0].CopyFrom(helper.make_tensor_value_info("input_ids", onnx.TensorProto.INT64, [1, T]))
        return m
    h = rmsnorm(n, n.linear("x", D, D, "in_proj"), D, form)
    n.linear(h, D, D, "out_proj")
    return n.model(f"rmsnorm_{form}", [("x", [1, T, D])])


def swin_shift_merge(H: int = 8, W: int = 8, C: int = 16, shift: int = 2, opset: int = 18,
                     seed: int = 0) -> onnx.ModelProto:
    """Tokens [1, H * W, C] -> Linear -> [1, H, W, C] -> roll by -shift on H and W -> patch merging
    -> LayerNorm -> Linear [1, H * W / 4, 2C]."""
    n = Net(seed, opset)
    x = n.op("Reshape", [n.linear("tokens", C, C, "fc"), _i64(n, [1, H, W, C])], "to_grid")
    for axis, size in ((1, H), (2, W)):   # torch.roll(x, -shift, axis)
        a = n.op("Slice", [x, _i64(n, [shift]), _i64(n, [size]), _i64(n, [axis])], f"roll{axis}_tail")
        b = n.op("Slice", [x, _i64(n, [0]), _i64(n, [shift]), _i64(n, [axis])], f"roll{axis}_head")
        x = n.op("Concat", [a, b], f"roll{axis}", axis=axis)
    parts = []
    for i, j in ((0, 0), (1, 0), (0, 1), (1, 1)):
        r = n.op("Slice", [x, _i64(n, [i]), _i64(n, [H]), _i64(n, [1]), _i64(n, [2])], f"rows{i}")
        parts.append(n.op("Slice", [r, _i64(n, [j]), _i64(n, [W]), _i64(n, [2]), _i64(n, [2])], f"cols{i}{j}"))
    y = n.op("Reshape", [n.op("Concat", parts, "merge", axis=-1), _i64(n, [1, H * W // 4, 4 * C])], "merged")
    g = n.rng.uniform(0.8, 1.2, 4 * C).astype(np.float32)
    y = n.op("LayerNormalization", [y, n.const(g, "ln_g"), n.const(np.zeros(4 * C, np.float32), "ln_b")], "ln",
             axis=-1, epsilon=1e-5)
    n.linear(y, 4 * C, 2 * C, "reduction")
    return n.model("swin_shift_merge", [("tokens", [1, H * W, C])])


def swin_windows(H: int = 8, W: int = 8, C: int = 16, w: int = 4, opset: int = 18, seed: int = 0) -> onnx.ModelProto:
    """Swin's window partition and reverse as HF's dynamo export writes them: tokens [1, H * W, C]
    -> Linear -> [1, H, W, C] -> Pad to multiples of ``w`` -> Reshape 6-D -> Transpose -> windows
    [-1, w * w, C] -> Linear per window -> Reshape 6-D -> Transpose -> Reshape -> crop (Slice) ->
    residual Add -> Linear."""
    n = Net(seed, opset)
    Hp, Wp = -(-H // w) * w, -(-W // w) * w
    t = n.linear("tokens", C, C, "fc")
    x = n.op("Reshape", [t, _i64(n, [1, H, W, C])], "to_grid")
    x = n.op("Pad", [x, _i64(n, [0, 0, 0, 0, 0, Hp - H, Wp - W, 0])], "pad")
    x = n.op("Reshape", [x, _i64(n, [1, Hp // w, w, Wp // w, w, C])], "split6")
    x = n.op("Transpose", [x], "windows6", perm=[0, 1, 3, 2, 4, 5])
    x = n.op("Reshape", [x, _i64(n, [-1, w * w, C])], "windows")
    x = n.linear(x, C, C, "attn")
    x = n.op("Reshape", [x, _i64(n, [1, Hp // w, Wp // w, w, w, C])], "merge6")
    x = n.op("Transpose", [x], "grid6", perm=[0, 1, 3, 2, 4, 5])
    x = n.op("Reshape", [x, _i64(n, [1, Hp, Wp, C])], "grid")
    x = n.op("Slice", [x, _i64(n, [0, 0]), _i64(n, [H, W]), _i64(n, [1, 2])], "crop")
    x = n.op("Add", [t, n.op("Reshape", [x, _i64(n, [1, H * W, C])], "to_tokens")], "residual")
    n.linear(x, C, C, "mlp")
    return n.model("swin_windows", [("tokens", [1, H * W, C])])


def deberta_attention(T: int = 16, D: int = 32, H: int = 2, span: int = 4, opset: int = 17,
                      seed: int = 0) -> onnx.ModelProto:
    """x [1, T, D] -> DeBERTa's disentangled self-attention core -> [1, T, D]."""
    n = Net(seed, opset)
    d = D // H
    heads = []
    for p in "qkv":
        t = n.op("Reshape", [n.linear("x", D, D, p), _i64(n, [T, H, d])], f"{p}_view")
        heads.append(n.op("Transpose", [t], f"{p}_heads", perm=[1, 0, 2]))          # [H, T, d]
    q, k, v = heads
    scale = n.const(np.array(np.sqrt(3 * d), np.float32), "scale")
    s = n.op("Div", [n.op("MatMul", [q, n.op("Transpose", [k], "k_t", perm=[0, 2, 1])], "qk"), scale], "scores")
    rel = np.arange(T)[:, None] - np.arange(T)[None, :]
    c2p_idx = np.broadcast_to(np.clip(rel + span, 0, 2 * span - 1), (H, T, T)).astype(np.int64)
    p2c_idx = np.broadcast_to(np.clip(-rel + span, 0, 2 * span - 1), (H, T, T)).astype(np.int64)
    pos_k = (n.rng.standard_normal((H, d, 2 * span)) / np.sqrt(d)).astype(np.float32)
    pos_q = (n.rng.standard_normal((H, d, 2 * span)) / np.sqrt(d)).astype(np.float32)
    c2p = n.op("GatherElements", [n.op("MatMul", [q, n.const(pos_k, "pos_key")], "c2p_att"),
                                  n.const(c2p_idx, "c2p_pos")], "c2p", axis=-1)
    p2c = n.op("GatherElements", [n.op("MatMul", [k, n.const(pos_q, "pos_query")], "p2c_att"),
                                  n.const(p2c_idx, "p2c_pos")], "p2c", axis=-1)
    p2c = n.op("Transpose", [p2c], "p2c_t", perm=[0, 2, 1])
    s = n.op("Add", [n.op("Add", [s, n.op("Div", [c2p, scale], "c2p_scaled")], "plus_c2p"),
                     n.op("Div", [p2c, scale], "p2c_scaled")], "plus_p2c")
    p = n.op("Softmax", [s], "probs", axis=-1)
    p = n.op("Where", [n.const(np.zeros((1, 1, T), bool), "no_padding"), n.const(np.array(0.0, np.float32), "zero"), p],
             "masked_probs")
    a = n.op("Reshape", [n.op("Transpose", [n.op("MatMul", [p, v], "context")], perm=[1, 0, 2]), _i64(n, [1, T, D])],
             "merge_heads")
    n.linear(a, D, D, "dense")
    return n.model("deberta_attention", [("x", [1, T, D])])


def masked_fill_attention(T: int = 16, D: int = 32, H: int = 2, opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """DeBERTa's attention core on x [1, T, D] and an int64 attention_mask [1, T]: scores
    ``masked_fill(~mask, lowest)`` -> Softmax -> P V -> output projection."""
    n = Net(seed, opset)
    d = D // H
    heads = []
    for p in "qkv":
        t = n.op("Reshape", [n.linear("x", D, D, p), _i64(n, [1, T, H, d])], f"{p}_view")
        heads.append(n.op("Transpose", [t], f"{p}_heads", perm=[0, 2, 1, 3]))
    q, k, v = heads
    s = n.op("MatMul", [q, n.op("Transpose", [k], "k_t", perm=[0, 1, 3, 2])], "scores")
    s = n.op("Div", [s, n.const(np.array(np.sqrt(d), np.float32), "sqrt_d")], "scaled")
    m = n.op("Cast", [n.op("Unsqueeze", ["attention_mask", _i64(n, [1, 2])], "mask_4d")], "mask_bool",
             to=onnx.TensorProto.BOOL)
    s = n.op("Where", [n.op("Not", [m], "not_mask"), n.const(np.array(LOWEST, np.float32), "lowest"), s], "masked_fill")
    p = n.op("Softmax", [s], "probs", axis=-1)
    a = n.op("Reshape", [n.op("Transpose", [n.op("MatMul", [p, v], "context")], perm=[0, 2, 1, 3]),
                         _i64(n, [1, T, D])], "merge_heads")
    out = n.linear(a, D, D, "dense")
    n.nodes[-1].output[0] = "output"
    g = helper.make_graph(n.nodes, "masked_fill_attention", [helper.make_tensor_value_info("x", F32, [1, T, D]),
                                                            helper.make_tensor_value_info("attention_mask", I64, [1, T])],
                          [helper.make_tensor_value_info("output", F32, None)], n.inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    assert out
    return model


def main(argv=None) -> int:
    import collections
    import onnx_mrvl
    for name, m in (("llama_block", llama_block()), ("swin_shift_merge", swin_shift_merge()),
                    ("deberta_attention", deberta_attention()),
                    ("masked_fill_attention", masked_fill_attention())):
        r = onnx_mrvl.convert(m)
        cpu = collections.Counter(x.op_type for x in r.report.cpu_nodes())
        print(f"{name}: regions {len(r.report.regions)} cpu {dict(cpu) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
