"""Float attention blocks with an additive mask, for onnxruntime's quantize_static to quantize as it
does real exports: TorchScript-style ``Where(mask == 0, -inf, 0)`` (the mask's and the masked
scores' Q / DQ get an infinite scale; tests/test_qdq_infinite_softmax.py), and a dynamo-style causal
mask of float32's lowest (a scale of lowest / 255; tests/test_qdq_causal_mask.py)."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

T, D, H = 8, 16, 2
X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, D])
MASK = helper.make_tensor_value_info("mask", TensorProto.INT64, [1, T])


def _heads() -> list:
    """x -> Q / K / V projections (wq, wk, wv), each split into H heads (``heads``): q_t, k_t (as
    K^T), v_t."""
    n = helper.make_node
    nodes = [n("MatMul", ["x", "wq"], ["q"], name="q_proj"), n("MatMul", ["x", "wk"], ["k"], name="k_proj"),
             n("MatMul", ["x", "wv"], ["v"], name="v_proj")]
    for t, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [n("Reshape", [t, "heads"], [f"{t}_h"], name=f"{t}_split"),
                  n("Transpose", [f"{t}_h"], [f"{t}_t"], perm=perm, name=f"{t}_perm")]
    return nodes


def _context() -> list:
    """p x v_t, heads merged (``merged``), the output projection (wo) and the residual: y."""
    n = helper.make_node
    return [n("MatMul", ["p", "v_t"], ["ctx"], name="ctx"),
            n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3], name="ctx_perm"),
            n("Reshape", ["ctx_t", "merged"], ["ctx_m"], name="ctx_merge"),
            n("MatMul", ["ctx_m", "wo"], ["o"], name="o_proj"), n("Add", ["o", "x"], ["y"], name="residual")]


def _model(nodes, name: str, inputs, inits, opset: int) -> onnx.ModelProto:
    g = helper.make_graph(nodes, name, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, T, D])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def masked_attention(seed: int = 0, guard: bool = True) -> onnx.ModelProto:
    """x [1, T, D] float, mask [1, T] int64 -> Q/K/V projections split into H heads, scores / 4 +
    Where(mask == 0, -inf, 0), Softmax with torch's ``_safe_softmax`` guard (``Where(IsNaN(p), 0,
    p)``, as the TorchScript exports of transformers 5 write it; ``guard=False``: without, as older
    exports), x V, heads merged, an output projection and the residual."""
    rng = np.random.default_rng(seed)
    inits = [nh.from_array((rng.standard_normal((D, D)) / 4).astype(np.float32), n) for n in ("wq", "wk", "wv", "wo")]
    inits += [nh.from_array(np.array(0.25, np.float32), "scale"), nh.from_array(np.array(0, np.int64), "zero_i"),
              nh.from_array(np.array(-np.inf, np.float32), "neg_inf"), nh.from_array(np.array(0.0, np.float32), "zero_f"),
              ]
    n = helper.make_node
    inits += [nh.from_array(np.array([1, T, H, D // H], np.int64), "heads"),
              nh.from_array(np.array([1, 1, 1, T], np.int64), "mshape"),
              nh.from_array(np.array([1, T, D], np.int64), "merged")]
    nodes = _heads()
    nodes += [n("MatMul", ["q_t", "k_t"], ["s0"], name="scores"), n("Mul", ["s0", "scale"], ["s1"], name="scale_mul"),
              n("Equal", ["mask", "zero_i"], ["pad"], name="pad_eq"),
              n("Where", ["pad", "neg_inf", "zero_f"], ["madd"], name="mask_where"),
              n("Reshape", ["madd", "mshape"], ["madd2"], name="mask_reshape"),
              n("Add", ["s1", "madd2"], ["s2"], name="mask_add"),
              n("Softmax", ["s2"], ["p0" if guard else "p"], axis=-1, name="softmax"),
              ] + ([n("IsNaN", ["p0"], ["p_nan"], name="safe_isnan"),   # torch's _safe_softmax guard
                    n("Where", ["p_nan", "zero_f", "p0"], ["p"], name="safe_where")] if guard else []) + _context()
    return _model(nodes, "masked_attention", [X, MASK], inits, 17)


def feeds(n: int, seed: int = 1) -> List[Dict[str, np.ndarray]]:
    """``n`` inputs: random x, the last 3 positions padded."""
    rng = np.random.default_rng(seed)
    mask = np.ones((1, T), np.int64)
    mask[:, -3:] = 0
    return [{"x": rng.standard_normal((1, T, D)).astype(np.float32), "mask": mask} for _ in range(n)]


LOWEST = float(np.finfo(np.float32).min)


def causal_attention(seed: int = 0, padding: bool = False) -> onnx.ModelProto:
    """x [1, T, D] float -> the attention block of a dynamo-exported decoder (Llama, Qwen2): Q/K/V
    projections split into H heads, ``scores * 0.25 + M`` with M float32's lowest above the diagonal
    and 0 elsewhere, Softmax, x V, heads merged, an output projection and the residual. M is a
    constant [1, 1, T, T] (what the dynamo export folds the causal mask into); with ``padding`` it is
    made at run time from an int64 ``mask`` [1, T] input: ``Where(causal And Cast(mask, bool), 0,
    lowest)`` (Hugging Face's combined causal and padding mask)."""
    rng = np.random.default_rng(seed)
    inits = [nh.from_array((rng.standard_normal((D, D)) / 4).astype(np.float32), n) for n in ("wq", "wk", "wv", "wo")]
    keep = np.tril(np.ones((T, T), bool)).reshape(1, 1, T, T)
    inits += [nh.from_array(np.array(0.25, np.float32), "scale"),
              nh.from_array(np.array([1, T, H, D // H], np.int64), "heads"),
              nh.from_array(np.array([1, T, D], np.int64), "merged")]
    n = helper.make_node
    nodes = _heads()
    inputs = [X]
    if padding:
        inits += [nh.from_array(keep, "causal"), nh.from_array(np.array([1, 2], np.int64), "axes12"),
                  nh.from_array(np.array(0.0, np.float32), "zero_f"),
                  nh.from_array(np.array(LOWEST, np.float32), "lowest")]
        nodes += [n("Cast", ["mask"], ["mask_b"], to=TensorProto.BOOL, name="mask_cast"),
                  n("Unsqueeze", ["mask_b", "axes12"], ["mask_4d"], name="mask_unsqueeze"),
                  n("And", ["causal", "mask_4d"], ["kept"], name="mask_and"),
                  n("Where", ["kept", "zero_f", "lowest"], ["bias"], name="mask_where")]
        inputs.append(MASK)
    else:
        inits.append(nh.from_array(np.where(keep, 0.0, LOWEST).astype(np.float32), "bias"))
    nodes += [n("MatMul", ["q_t", "k_t"], ["s0"], name="scores"), n("Mul", ["s0", "scale"], ["s1"], name="scale_mul"),
              n("Add", ["s1", "bias"], ["s2"], name="mask_add"),
              n("Softmax", ["s2"], ["p"], axis=-1, name="softmax"),
              ] + _context()
    return _model(nodes, "causal_attention", inputs, inits, 18)


def causal_feeds(n: int, seed: int = 1, padding: bool = False) -> List[Dict[str, np.ndarray]]:
    """``n`` inputs of ``causal_attention``: random x (and with ``padding`` the last 2 positions padded)."""
    rng = np.random.default_rng(seed)
    out = [{"x": rng.standard_normal((1, T, D)).astype(np.float32)} for _ in range(n)]
    if padding:
        mask = np.ones((1, T), np.int64)
        mask[:, -2:] = 0
        for f in out:
            f["mask"] = mask
    return out


def masked_fill_attention(seed: int = 0) -> onnx.ModelProto:
    """x [1, T, D], mask [1, T] int64 -> the attention block of DeBERTa-v2's XSoftmax as the dynamo
    export writes it: ``Where(Not(Cast(mask[:, None, None, :] * mask[:, None, :, None], bool)), lowest,
    scores)`` (``masked_fill(~mask, finfo.min)``), Softmax, x V, heads merged, output projection and
    residual."""
    rng = np.random.default_rng(seed)
    inits = [nh.from_array((rng.standard_normal((D, D)) / 4).astype(np.float32), n) for n in ("wq", "wk", "wv", "wo")]
    inits += [nh.from_array(np.array(0.25, np.float32), "scale"),
              nh.from_array(np.array([1, T, H, D // H], np.int64), "heads"),
              nh.from_array(np.array([1, T, D], np.int64), "merged"),
              nh.from_array(np.array([1, 2], np.int64), "axes12"), nh.from_array(np.array([1, 3], np.int64), "axes13"),
              nh.from_array(np.array(LOWEST, np.float32), "lowest")]
    n = helper.make_node
    nodes = _heads()
    nodes += [n("Unsqueeze", ["mask", "axes12"], ["m_c"], name="mask_cols"),     # [1, 1, 1, T]
              n("Unsqueeze", ["mask", "axes13"], ["m_rows"], name="mask_rows"),  # [1, 1, T, 1]
              n("Mul", ["m_c", "m_rows"], ["m2"], name="mask_mul"),
              n("Cast", ["m2"], ["m_b"], to=TensorProto.BOOL, name="mask_cast"),
              n("Not", ["m_b"], ["pad"], name="mask_not"),
              n("MatMul", ["q_t", "k_t"], ["s0"], name="scores"), n("Mul", ["s0", "scale"], ["s1"], name="scale_mul"),
              n("Where", ["pad", "lowest", "s1"], ["s2"], name="masked_fill"),
              n("Softmax", ["s2"], ["p"], axis=-1, name="softmax"),
              ] + _context()
    return _model(nodes, "masked_fill_attention", [X, MASK], inits, 18)


def masked_fill_feeds(n: int, seed: int = 1, padded: int = 3) -> List[Dict[str, np.ndarray]]:
    """``n`` inputs of ``masked_fill_attention``: random x, the last ``padded`` .. 0 positions padded
    (cycling: every mask differs)."""
    rng = np.random.default_rng(seed)
    out = []
    for j in range(n):
        mask = np.ones((1, T), np.int64)
        p = (padded - j) % (padded + 1) if padded else 0
        if p:
            mask[:, -p:] = 0
        out.append({"x": rng.standard_normal((1, T, D)).astype(np.float32), "mask": mask})
    return out
