"""Multi-head self-attention blocks the way PyTorch exporters write them, with seeded weights.

``mha_block(style, mask, softmax, seed)`` -> ``onnx.ModelProto`` (static shapes, batch 1):

styles
  ``legacy``   HF BERT under the TorchScript exporter: separate q/k/v Linear (MatMul + Add),
               ``view [1,T,H,d]`` + ``permute(0,2,1,3)``, K^T as a second Transpose(0,1,3,2),
               Div by sqrt(d), Add mask, Softmax(-1), MatMul V, Transpose, Reshape [1,T,D].
  ``fused_qkv`` GPT-2 style ``c_attn``: one MatMul on a [D, 3D] weight + bias, Split into q/k/v,
               K transposed straight to [1,H,d,T] (perm 0,2,3,1).
  ``dynamo``   the dynamo exporter's scaled_dot_product_attention: fused qkv sliced with Slice,
               q and K^T each multiplied by sqrt(1/sqrt(d)).
  ``bmm3d``    ``nn.MultiheadAttention`` (sequence first [T,1,D]): in_proj + Split, Reshape
               [T, B*H, d] + Transpose(1,0,2) -> 3-D batched MatMuls [B*H,T,d] x [B*H,d,T], q scaled
               by a Mul, out_proj on [T*B, D].
masks: ``none``; ``const`` causal [1,1,T,T] of 0 / -1e4; ``min`` the same with float32's lowest
  (-3.4028235e38, what HF writes today); ``input`` a graph input ``mask`` [1,1,1,T] added to the
  scores; ``where`` Where(causal bool constant, scores, -inf) (dynamo's is_causal); ``hf`` an int64
  graph input ``attention_mask`` [B, T] turned into (1 - m) * float32's lowest on the CPU (HF BERT);
  ``bool_inf`` / ``bool_min`` that input cast to a boolean [B, 1, 1, T] and turned into
  ``Where(m, 0, -inf)`` (the TorchScript exporter, transformers >= 4.48) / ``Where(m, 0, lowest)``
  (the dynamo exporter).
softmax: ``Softmax`` | ``safe`` (torch's ``_safe_softmax``: ``Where(IsNaN(y), 0, y)`` after the
Softmax, rows whose every key is masked give 0) | ``Sigmoid`` | ``none`` (the data path alone).
"""
from __future__ import annotations

from typing import Callable, Dict

import numpy as np
import onnx

from .models import F32, GraphBuilder

STYLES = ("legacy", "fused_qkv", "dynamo", "bmm3d")
MASKS = ("none", "const", "min", "input", "where", "hf", "bool_inf", "bool_min")
SOFTMAX = ("Softmax", "safe", "Sigmoid", "none")


def _i64(g: GraphBuilder, name: str, values) -> str:
    return g.const(name, np.array(values, np.int64))


def _linear(g: GraphBuilder, x: str, k: int, n: int, name: str, gain: float = 0.7) -> str:
    y = g.node("MatMul", [x, g.const(f"{name}.weight", g.he((k, n), k, gain))], f"{name}.matmul")
    return g.node("Add", [y, g.const(f"{name}.bias", (g.rng.standard_normal(n) * 0.05).astype(np.float32))],
                  f"{name}.add")


def _causal(t: int) -> np.ndarray:
    return np.tril(np.ones((t, t), bool))


def _mask(g: GraphBuilder, s: str, mask: str, t: int, rank: int, inputs: list, b: int = 1) -> str:
    lead = (1,) * (rank - 2)
    if mask == "none":
        return s
    if mask in ("const", "min"):
        fill = -1e4 if mask == "const" else np.finfo(np.float32).min
        m = np.where(_causal(t), 0.0, fill).astype(np.float32).reshape(lead + (t, t))
        return g.node("Add", [s, g.const("attn.mask", m)], "attn.add_mask")
    if mask == "input":
        inputs.append(("mask", F32, [b] + [1] * (rank - 2) + [t]))     # HF: [B, 1, 1, T]
        return g.node("Add", [s, "mask"], "attn.add_mask")
    if mask == "hf":   # HF BERT / MiniLM: int64 attention_mask [B, T] -> (1 - m) * float32's lowest
        inputs.append(("attention_mask", onnx.TensorProto.INT64, [b, t]))
        axes = [1, 2] if rank == 4 else [1]           # [B, 1, 1, T] / [1, 1, T]
        m = (g.node("Unsqueeze", ["attention_mask", _i64(g, "attn.mask.axes", axes)], "attn.mask.unsqueeze")
             if g.opset >= 13 else g.node("Unsqueeze", ["attention_mask"], "attn.mask.unsqueeze", axes=axes))
        m = g.node("Cast", [m], "attn.mask.cast", to=onnx.TensorProto.FLOAT)
        m = g.node("Sub", [g.const("attn.mask.one", np.array(1.0, np.float32)), m], "attn.mask.sub")
        m = g.node("Mul", [m, g.const("attn.mask.min", np.array(np.finfo(np.float32).min, np.float32))],
                   "attn.mask.mul")
        return g.node("Add", [s, m], "attn.add_mask")
    if mask in ("bool_inf", "bool_min"):   # Where(bool mask, 0, fill) on the CPU, added to the scores
        inputs.append(("attention_mask", onnx.TensorProto.INT64, [b, t]))
        axes = [1, 2] if rank == 4 else [1]
        m = (g.node("Unsqueeze", ["attention_mask", _i64(g, "attn.mask.axes", axes)], "attn.mask.unsqueeze")
             if g.opset >= 13 else g.node("Unsqueeze", ["attention_mask"], "attn.mask.unsqueeze", axes=axes))
        m = g.node("Cast", [m], "attn.mask.cast", to=onnx.TensorProto.BOOL)
        fill = -np.inf if mask == "bool_inf" else np.finfo(np.float32).min
        m = g.node("Where", [m, g.const("attn.mask.zero", np.array(0.0, np.float32)),
                             g.const("attn.mask.fill", np.array(fill, np.float32))], "attn.mask.where")
        return g.node("Add", [s, m], "attn.add_mask")
    if mask == "where":
        cond = g.const("attn.causal", _causal(t).reshape(lead + (t, t)))
        return g.node("Where", [cond, s, g.const("attn.neg_inf", np.array(-np.inf, np.float32))], "attn.where")
    raise ValueError(f"unknown mask {mask!r} (known: {', '.join(MASKS)})")


def _split3(g: GraphBuilder, qkv: str, d: int, axis: int, name: str):
    if g.opset >= 13:
        return g.node("Split", [qkv, _i64(g, f"{name}.sizes", [d, d, d])], name, n_out=3, axis=axis)
    return g.node("Split", [qkv], name, n_out=3, axis=axis, split=[d, d, d])


def _shape_of(g: GraphBuilder, x: str, dims, name: str) -> str:
    """The TorchScript exporter's reshape target: ``Shape(x)`` -> ``Gather`` per leading axis ->
    ``Unsqueeze`` -> ``Concat`` with the constant tail; ``dims`` lists axes of x (int) or constants."""
    shp = g.node("Shape", [x], f"{name}.shape_of")
    parts = []
    for i, d in enumerate(dims):
        if isinstance(d, str):
            ax = int(d)
            v = g.node("Gather", [shp, _i64(g, f"{name}.idx{i}", ax)], f"{name}.gather{i}", axis=0)
            parts.append(g.node("Unsqueeze", [v, _i64(g, f"{name}.ax{i}", [0])], f"{name}.unsqueeze{i}"))
        else:
            parts.append(_i64(g, f"{name}.c{i}", [d]))
    return g.node("Concat", parts, f"{name}.concat", axis=0)


def _heads(g: GraphBuilder, t: str, shape, perm, name: str, dynamic: bool = False) -> str:
    target = (_shape_of(g, t, ["0", "1"] + list(shape[2:]), f"{name}.target") if dynamic
              else _i64(g, f"{name}.shape", shape))
    t = g.node("Reshape", [t, target], f"{name}.reshape")
    return g.node("Transpose", [t], f"{name}.transpose", perm=list(perm))


def mha_block(style: str = "legacy", mask: str = "const", softmax: str = "Softmax", seed: int = 0,
              T: int = 16, D: int = 32, H: int = 4, opset: int = 13, B: int = 1,
              dynamic: bool = False, grouped_kt: bool = False) -> onnx.ModelProto:
    """One self-attention block with its residual (see the module docstring). ``B``: batch
    (not for bmm3d); ``dynamic``: legacy's head reshapes take their target from Shape/Gather/Concat;
    ``grouped_kt`` (dynamo): K^T as torch 2.13's dynamo exporter writes it for any batch,
    ``Reshape [B*H, T, d] -> Transpose [0, 2, 1] -> Reshape [B, H, d, T]``."""
    if B != 1 and style == "bmm3d":
        raise ValueError("bmm3d is written for batch 1")
    if style not in STYLES or softmax not in SOFTMAX:
        raise ValueError(f"style in {STYLES}, softmax in {SOFTMAX}")
    g = GraphBuilder(seed, 18 if style == "dynamo" else opset)
    d = D // H
    x = "input"
    seq_first = style == "bmm3d"
    inputs = [("input", F32, [T, 1, D] if seq_first else [B, T, D])]
    if style == "legacy":
        q, k, v = (_linear(g, x, D, D, f"attn.{p}") for p in "qkv")
        q, k, v = (_heads(g, t, [B, T, H, d], (0, 2, 1, 3), f"attn.{p}", dynamic) for t, p in zip((q, k, v), "qkv"))
        k = g.node("Transpose", [k], "attn.k.transpose_last", perm=[0, 1, 3, 2])
    elif style == "fused_qkv":
        q, k, v = _split3(g, _linear(g, x, D, 3 * D, "attn.c_attn"), D, 2, "attn.split")
        q = _heads(g, q, [B, T, H, d], (0, 2, 1, 3), "attn.q")
        k = _heads(g, k, [B, T, H, d], (0, 2, 3, 1), "attn.k")
        v = _heads(g, v, [B, T, H, d], (0, 2, 1, 3), "attn.v")
    elif style == "dynamo":
        qkv = _linear(g, x, D, 3 * D, "attn.in_proj")
        parts = []
        for i, p in enumerate("qkv"):
            sl = g.node("Slice", [qkv, _i64(g, f"attn.{p}.starts", [i * D]), _i64(g, f"attn.{p}.ends", [(i + 1) * D]),
                                  _i64(g, f"attn.{p}.axes", [2]), _i64(g, f"attn.{p}.steps", [1])], f"attn.{p}.slice")
            parts.append(_heads(g, sl, [B, T, H, d], (0, 2, 1, 3), f"attn.{p}"))
        q, k, v = parts
        sqrt_scale = g.const("attn.sqrt_scale", np.array(np.sqrt(1.0 / np.sqrt(d)), np.float32))
        q = g.node("Mul", [q, sqrt_scale], "attn.q.scale")
        if grouped_kt:
            k = g.node("Reshape", [k, _i64(g, "attn.k.merge", [B * H, T, d])], "attn.k.merge_heads")
            k = g.node("Transpose", [k], "attn.k.transpose_last", perm=[0, 2, 1])
            k = g.node("Reshape", [k, _i64(g, "attn.k.split", [B, H, d, T])], "attn.k.split_heads")
        else:
            k = g.node("Transpose", [k], "attn.k.transpose_last", perm=[0, 1, 3, 2])
        k = g.node("Mul", [k, sqrt_scale], "attn.k.scale")
    else:   # bmm3d: nn.MultiheadAttention, sequence first
        q, k, v = _split3(g, _linear(g, x, D, 3 * D, "attn.in_proj"), D, 2, "attn.split")
        q = g.node("Mul", [q, g.const("attn.scaling", np.array(d ** -0.5, np.float32))], "attn.q.scale")
        q, k, v = (_heads(g, t, [T, H, d], (1, 0, 2), f"attn.{p}") for t, p in zip((q, k, v), "qkv"))
        k = g.node("Transpose", [k], "attn.k.transpose_last", perm=[0, 2, 1])
    s = g.node("MatMul", [q, k], "attn.qk")
    if style in ("legacy", "fused_qkv"):
        s = g.node("Div", [s, g.const("attn.sqrt_d", np.array(np.sqrt(d), np.float32))], "attn.div")
    s = _mask(g, s, mask, T, 3 if seq_first else 4, inputs, B)
    if softmax == "safe":     # torch's _safe_softmax as exported: Where(IsNaN(y), 0, y)
        y = g.node("Softmax", [s], "attn.softmax", axis=-1)
        nan = g.node("IsNaN", [y], "attn.softmax.isnan")
        s = g.node("Where", [nan, g.const("attn.softmax.zero", np.array(0.0, np.float32)), y], "attn.softmax.where")
    elif softmax != "none":
        s = g.node(softmax, [s], "attn.softmax", **({"axis": -1} if softmax == "Softmax" else {}))
    o = g.node("MatMul", [s, v], "attn.av")
    if seq_first:
        o = g.node("Transpose", [o], "attn.out.transpose", perm=[1, 0, 2])
        o = g.node("Reshape", [o, _i64(g, "attn.out.shape", [T, D])], "attn.out.reshape")
        o = _linear(g, o, D, D, "attn.out_proj")
        o = g.node("Reshape", [o, _i64(g, "attn.out.shape3", [T, 1, D])], "attn.out.reshape3")
    else:
        o = g.node("Transpose", [o], "attn.out.transpose", perm=[0, 2, 1, 3])
        target = (_shape_of(g, o, ["0", "1", D], "attn.out.target") if dynamic
                  else _i64(g, "attn.out.shape", [B, T, D]))
        o = g.node("Reshape", [o, target], "attn.out.reshape")
        o = _linear(g, o, D, D, "attn.out_proj")
    g.node("Add", [x, o], "residual")
    g.nodes[-1].output[0] = "output"
    return g.model(f"mha_{style}_{mask}_{softmax}", inputs, [("output", F32, inputs[0][2])])


def feeds(model: onnx.ModelProto, seed: int = 0) -> Dict[str, np.ndarray]:
    """Inputs for ``model``: x ~ N(0, 1); an additive ``mask`` input masks the last quarter of keys
    with -1e4 (padding)."""
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "attention_mask":      # the last quarter of the tokens is padding
            m = np.ones(shape, np.int64)
            m[..., -(shape[-1] // 4):] = 0
            out[vi.name] = m
        elif vi.name == "mask":
            m = np.zeros(shape, np.float32)
            m[..., -(shape[-1] // 4):] = -1e4
            out[vi.name] = m
        else:
            out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def all_models() -> Dict[str, Callable[..., onnx.ModelProto]]:
    """One builder per (style, mask) with Softmax, and the data-path-only variants."""
    out = {}
    for style in STYLES:
        for mask in MASKS:
            out[f"{style}_{mask}"] = (lambda s=style, m=mask, **kw: mha_block(s, m, "Softmax", **kw))
        # the data path alone: Softmax replaced by Sigmoid, or by nothing (no mask then: -1e4
        # scores times V overflow fp16 without a Softmax, as they would on the device)
        out[f"{style}_const_Sigmoid"] = (lambda s=style, **kw: mha_block(s, "const", "Sigmoid", **kw))
        out[f"{style}_none_none"] = (lambda s=style, **kw: mha_block(s, "none", "none", **kw))
    return out
