"""com.microsoft ``QAttention`` (``quantize_dynamic`` on an attention-fused model) -> per part of Q, K, V
the dynamic-int8 form ``MatMulInteger(x_q, W_q[:, part], x_zp, W_zp[part]) -> Cast(float) ->
Mul(x_scale * W_scale[part]) -> Add(bias[part])`` followed by the attention of ``contrib_attention``.

The ``dynamic_int8`` rule then turns each MatMulInteger group into a MatMul with dequantized weights
(its note: fp16 with dequantized weights). Taken only when the quantized input is a
``DynamicQuantizeLinear`` output with its own scale and zero point (the quantize_dynamic form);
weights, weight scales / zero points (one value or one per column) and the bias constant.
A calibrated model's QAttention (``quantize/dynamic_qattention.py``) reads ``QuantizeLinear(x, s, z)``
with constant s, z instead: each part becomes ``DQ(x_q) -> MatMul(DQ(W_q[:, part])) -> Add(bias[part])``,
the QDQ form the int8 import takes as an int8-in / fp16-out layer (uint8 weights with zero point 128
as the int8 codes ``W_q - 128``; other zero points stay in the DQ: the fp16 layer on dequantized weights).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .base import Match, attr, inp
from .contrib_attention import heads_reason, mask_reason, masks
from .contrib_ops import FLOAT, Writer, attention_core, float32_check, float_attr, shape_of, used
from .contrib_ops import REPORT_SKIPS, match  # noqa: F401  (the contrib rules' own)

NAME = "contrib_qattention"
OPS = ("QAttention",)


@float32_check
def check(m: Match, g, n) -> Optional[str]:
    why = heads_reason(n)
    if why:
        return why
    N = attr(n, "num_heads")
    if inp(n, 8) or used(g, n, 1):
        return f"QAttention '{n.name}' has past / present state (decoding with a cache stays on the CPU)"
    p = g.producer.get(n.input[0])
    static = _static_input(g, n, p)
    if not static and (p is None or p.op_type != "DynamicQuantizeLinear" or p.domain not in ("", "ai.onnx")
                       or inp(n, 3) != p.output[1] or (inp(n, 6) and inp(n, 6) != p.output[2])):
        return f"QAttention '{n.name}': its input is not a DynamicQuantizeLinear output with that op's scale and " \
               f"zero point, nor a QuantizeLinear with constant ones (the quantize_dynamic form, calibrated or not)"
    sx, sw = shape_of(g, p.input[0]), shape_of(g, n.input[1])
    if sx is None or len(sx) != 3 or sw is None or len(sw) != 2 or sw[0] != sx[2] or sw[1] % 3 or (sw[1] // 3) % N:
        return f"QAttention '{n.name}': input {sx} / weights {sw} are not [B,S,D] / [D, 3*H] with {N} heads"
    cols = sw[1]
    for idx, what in ((1, "weights"), (2, "bias"), (4, "weight scale"), (7, "weight zero point")):
        if inp(n, idx) and g.const(inp(n, idx)) is None:
            return f"QAttention '{n.name}': the {what} '{inp(n, idx)}' is not a constant"
        if idx in (4, 7) and inp(n, idx) and g.const(inp(n, idx)).size not in (1, cols):
            return f"QAttention '{n.name}': the {what} is neither one value nor one per column"
    if not inp(n, 2):
        return f"QAttention '{n.name}' has no bias"
    B, S = sx[0], sx[1]
    if inp(n, 5):
        why = mask_reason(g, inp(n, 5), B, S, S)
        if why:
            return f"QAttention '{n.name}': {why}"
    m.data.update(B=B, S=S, H=cols // 3, dql=p, static=static)
    return None


def _static_input(g, n, p) -> bool:
    """Whether QAttention ``n`` reads ``QuantizeLinear(x, s, z)`` with constant s, z as its input, scale and
    zero point (a calibrated dynamic model, quantize/dynamic_qattention.py)."""
    if p is None or p.op_type != "QuantizeLinear" or p.domain not in ("", "ai.onnx") or len(p.input) < 3:
        return False
    same = inp(n, 3) == p.input[1] and inp(n, 6) in ("", p.input[2])
    return same and all(g.const(t) is not None and g.const(t).size == 1 for t in p.input[1:3])


def _weight_dq(w: Writer, p: str, codes: np.ndarray, scale: np.ndarray, zp: Optional[np.ndarray]) -> str:
    """``DQ(W_q part)`` of one projection, [D, H], per tensor or per column (axis 1); uint8 codes with
    zero point 128 become the int8 codes ``W_q - 128`` (exact: the accelerator takes symmetric int8). The
    zero point is explicit (zeros when symmetric), as quantizers write it: onnxruntime's
    session.x64quantprecision rewrite of int8 weights to uint8 gives a per-column DQ without one a
    scalar zero point its DequantizeLinear refuses."""
    if codes.dtype == np.uint8 and zp is not None and np.all(zp == 128):
        codes, zp = (codes.astype(np.int16) - 128).astype(np.int8), None
    zp = np.zeros(scale.size, codes.dtype) if zp is None else np.asarray(zp).astype(codes.dtype)
    ins = [w.const(f"w{p}_q", codes, codes.dtype), w.const(f"w{p}_scale", scale.reshape(-1) if scale.size > 1
                                                           else scale.reshape(())),
           w.const(f"w{p}_zp", zp.reshape(-1) if scale.size > 1 else zp.reshape(()), codes.dtype)]
    return w.op("DequantizeLinear", ins, list(codes.shape), tag=f"w{p}_dq", **({"axis": 1} if scale.size > 1 else {}))


def _part(arr: Optional[np.ndarray], k: int, H: int) -> Optional[np.ndarray]:
    if arr is None:
        return None
    flat = arr.reshape(-1)
    return flat.copy() if flat.size == 1 else flat[k * H:(k + 1) * H].copy()


def _static_parts(w: Writer, q, wq, ws, wz, bias, B: int, S: int, H: int) -> list:
    """Calibrated: ``DQ(x_q) -> MatMul(DQ(W_q part)) -> + bias`` per Q / K / V (int8-in layers)."""
    x = w.op("DequantizeLinear", [q.output[0], q.input[1], q.input[2]], [B, S, wq.shape[0]], tag="x_dq")
    parts = []
    for k, p in enumerate("qkv"):
        wdq = _weight_dq(w, p, wq[:, k * H:(k + 1) * H].copy(), _part(ws, k, H), _part(wz, k, H))
        t = w.op("MatMul", [x, wdq], [B, S, H], tag=f"{p}_matmul")
        parts.append(w.op("Add", [t, w.const(f"b{p}", bias[k * H:(k + 1) * H])], [B, S, H], tag=f"{p}_bias"))
    return parts


def _dynamic_parts(w: Writer, dql, wq, ws, wz, bias, B: int, S: int, H: int) -> list:
    """``MatMulInteger(x_q, W_q part) -> Cast -> Mul(x_scale * w_scale) -> + bias`` per Q / K / V."""
    parts = []
    for k, p in enumerate("qkv"):
        ins = [dql.output[0], w.const(f"w{p}_q", wq[:, k * H:(k + 1) * H], wq.dtype), dql.output[2]]
        if wz is not None:
            ins.append(w.const(f"w{p}_zp", _part(wz, k, H), wz.dtype))
        t = w.op("MatMulInteger", ins, [B, S, H], tag=f"{p}_matmulinteger", dtype=6)   # int32
        t = w.op("Cast", [t], [B, S, H], tag=f"{p}_cast", to=FLOAT)
        s = w.op("Mul", [dql.output[1], w.const(f"w{p}_scale", _part(ws, k, H))], list(_part(ws, k, H).shape),
                 tag=f"{p}_scale_product")
        t = w.op("Mul", [t, s], [B, S, H], tag=f"{p}_dequantize")
        parts.append(w.op("Add", [t, w.const(f"b{p}", bias[k * H:(k + 1) * H])], [B, S, H], tag=f"{p}_bias"))
    return parts


def rewrite(m: Match, g) -> str:
    n, d = m.node, m.data
    w = Writer(g, n, m.origin)
    N = int(attr(n, "num_heads"))
    B, S, H, dql = d["B"], d["S"], d["H"], d["dql"]
    scale = float_attr(n, "scale", 0.0) or 1.0 / math.sqrt(H // N)
    wq = g.const(n.input[1])
    ws = g.const(inp(n, 4))
    wz = g.const(inp(n, 7)) if inp(n, 7) else None
    bias = g.const(n.input[2])
    out = n.output[0]
    g.remove(n)
    parts = (_static_parts if d["static"] else _dynamic_parts)(w, dql, wq, ws, wz, bias, B, S, H)
    adds = masks(w, n, inp(n, 5), "", B, S, S)
    attention_core(w, *parts, B=B, S=S, L=S, N=N, hq=H // N, hv=H // N, scale=scale, adds=adds, out=out)
    if d["static"]:
        return f"QAttention ({N} heads, calibrated input) -> 3 QDQ MatMul + bias (int8 in) + MatMul/Softmax attention"
    return f"QAttention ({N} heads) -> 3 MatMulInteger groups (dynamic int8) + MatMul/Softmax attention"
