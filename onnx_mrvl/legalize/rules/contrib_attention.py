"""onnxruntime's fused attention (com.microsoft ``Attention``, ``MultiHeadAttention``) -> the standard
attention fuse runs as one region (``contrib_ops.attention_core``), following the CPU kernels:

    Attention(input [B,S,Din], weights [Din, Dq+Dk+Dv], bias, mask_index, past, attention_bias)
        Q, K, V = input @ W_part + bias_part  (``qkv_hidden_sizes``, default 3 equal parts; constant
        weights become three MatMuls, others one MatMul and Slices)
    MultiHeadAttention(query, key, value, bias, key_padding_mask, attention_bias, past_key, past_value)
        query [B,S,D], key [B,L,D], value [B,L,Dv] (+ bias [D+D+Dv]); packed QKV query [B,S,N,3,H];
        packed KV key [B,L,N,2,H]; key / value in heads [B,N,L,H] (cross attention on projected
        key / value: only the query's bias part applies)
    scores = Q K^T * scale (attribute, default 1/sqrt(head size)) + mask + attention_bias [+ causal]

Masks (onnxruntime's PrepareMask): raw 0/1 [B,L] / [B,S,L] (kept where > 0), 1-D end positions [B]
and end+start positions [2B], each masked key gets ``mask_filter_value`` (-10000); ``unidirectional``
gives the keys after the query weight 0 (float32's lowest added; onnxruntime 1.32, measured).
Not taken (the node stays on the CPU with the reason): past / present state, past_sequence_length,
cache_indirection, output_qk, Megatron 4-D and packed (3B+2) masks, ``do_rotary``.
"""
from __future__ import annotations

import math
from typing import List, Optional

import numpy as np

from .base import Match, attr, inp
from .contrib_ops import Writer, attention_core, causal_mask, float32_check, float_attr, key_mask, shape_of, used
from .contrib_ops import REPORT_SKIPS, match  # noqa: F401  (the contrib rules' own)

NAME = "contrib_attention"
OPS = ("Attention", "MultiHeadAttention")
FILL = -10000.0


def mask_reason(g, mask: str, B: int, S: int, L: int) -> Optional[str]:
    s = shape_of(g, mask)
    ok = s is not None and (tuple(s) in ((B, L), (B, S, L)) or (len(s) == 1 and s[0] in (B, 2 * B)))
    if not ok:
        return f"mask '{mask}' of shape {list(s) if s else '?'} is not one of [B]={B}, [2B], [B, L], [B, S, L] " \
               f"(Megatron 4-D and packed 3B+2 masks are not decomposed)"
    return None


def _bias_reason(g, n, idx: int, B: int, N: int, S: int, L: int) -> Optional[str]:
    s = shape_of(g, inp(n, idx))
    if s is None or len(s) != 4 or s[0] not in (1, B) or s[1] not in (1, N) or tuple(s[2:]) != (S, L):
        return f"attention_bias '{inp(n, idx)}' of shape {list(s) if s else '?'} is not [B or 1, N or 1, S, L]"
    return None


def _masks_reason(g, n, mask_idx: int, B: int, N: int, S: int, L: int, mask_prefix: str = "") -> Optional[str]:
    """Why the mask (input ``mask_idx``) or the attention_bias (input 5) of ``n`` is not taken, or None."""
    why = mask_reason(g, inp(n, mask_idx), B, S, L) if inp(n, mask_idx) else None
    why = mask_prefix + why if why else (_bias_reason(g, n, 5, B, N, S, L) if inp(n, 5) else None)
    return f"{n.op_type} '{n.name}': {why}" if why else None


def heads_reason(n) -> Optional[str]:
    """Why an attention node's heads are not taken (no ``num_heads``, rotary inside), or None."""
    if not attr(n, "num_heads"):
        return f"{n.op_type} '{n.name}' has no num_heads"
    if attr(n, "do_rotary", 0):
        return f"{n.op_type} '{n.name}' applies rotary embedding inside (do_rotary=1)"
    return None


@float32_check
def check(m: Match, g, n) -> Optional[str]:
    N = attr(n, "num_heads")
    return heads_reason(n) or (_check_attention(m, g, n, N) if n.op_type == "Attention" else _check_mha(m, g, n, N))


def _check_attention(m, g, n, N) -> Optional[str]:
    for idx, what in ((4, "past state"), (6, "past_sequence_length")):
        if inp(n, idx):
            return f"Attention '{n.name}' has {what} input '{inp(n, idx)}' (decoding with a cache stays on the CPU)"
    if used(g, n, 1):
        return f"Attention '{n.name}': its present (key/value cache) output is used"
    sx, sw = shape_of(g, n.input[0]), shape_of(g, n.input[1])
    if sx is None or len(sx) != 3 or sw is None or len(sw) != 2 or sw[0] != sx[2]:
        return f"Attention '{n.name}': input {sx} / weights {sw} are not static [B,S,D] / [D, Dqkv]"
    sizes = [int(v) for v in (attr(n, "qkv_hidden_sizes") or [sw[1] // 3] * 3)]
    if len(sizes) != 3 or sum(sizes) != sw[1] or sizes[0] != sizes[1] or any(v % N for v in sizes):
        return f"Attention '{n.name}': qkv_hidden_sizes {sizes} do not split {sw[1]} into Q = K, V by {N} heads"
    B, S = sx[0], sx[1]
    if inp(n, 2) and shape_of(g, inp(n, 2)) != (sw[1],):
        return f"Attention '{n.name}': bias '{inp(n, 2)}' is not [{sw[1]}]"
    why = _masks_reason(g, n, 3, B, N, S, S)
    if why:
        return why
    m.data.update(B=B, S=S, L=S, sizes=sizes)
    return None


def _check_mha(m, g, n, N) -> Optional[str]:
    for idx, what in ((6, "past_key"), (7, "past_value"), (8, "past_sequence_length"), (9, "cache_indirection")):
        if inp(n, idx):
            return f"MultiHeadAttention '{n.name}' has {what} input '{inp(n, idx)}' (decoding with a cache stays " \
                   f"on the CPU)"
    for idx, what in ((1, "present_key"), (2, "present_value"), (3, "output_qk")):
        if used(g, n, idx):
            return f"MultiHeadAttention '{n.name}': its {what} output is used"
    sq = shape_of(g, n.input[0])
    sk = shape_of(g, inp(n, 1)) if inp(n, 1) else None
    sv = shape_of(g, inp(n, 2)) if inp(n, 2) else None
    if sq is None or (inp(n, 1) and sk is None) or (inp(n, 2) and sv is None):
        return f"MultiHeadAttention '{n.name}': query / key / value shapes are not static"
    B, S = sq[0], sq[1]
    if len(sq) == 5:
        if inp(n, 1) or inp(n, 2) or sq[2] != N or sq[3] != 3:
            return f"MultiHeadAttention '{n.name}': 5-D query {list(sq)} is not packed QKV [B,S,{N},3,H] alone"
        form, L, D, Dv = "packed_qkv", S, N * sq[4], N * sq[4]
    elif len(sq) == 3 and sk is not None and len(sk) == 5 and not inp(n, 2):
        if sk[0] != B or sk[2] != N or sk[3] != 2 or sq[2] != N * sk[4]:
            return f"MultiHeadAttention '{n.name}': key {list(sk)} is not packed KV [B,L,{N},2,{sq[2] // N}]"
        form, L, D, Dv = "packed_kv", sk[1], sq[2], sq[2]
    elif len(sq) == 3 and sk is not None and sv is not None and len(sk) == 3 and len(sv) == 3:
        if sk[0] != B or sv[0] != B or sk[1] != sv[1] or sk[2] != sq[2] or sq[2] % N or sv[2] % N:
            return f"MultiHeadAttention '{n.name}': query {list(sq)}, key {list(sk)}, value {list(sv)} do not " \
                   f"fit [B,S,D], [B,L,D], [B,L,Dv] with {N} heads"
        form, L, D, Dv = "separate", sk[1], sq[2], sv[2]
    elif len(sq) == 3 and sk is not None and sv is not None and len(sk) == 4 and len(sv) == 4:
        if sk[0] != B or sv[0] != B or sk[1] != N or sv[1] != N or sk[2] != sv[2] or sq[2] != N * sk[3]:
            return f"MultiHeadAttention '{n.name}': query {list(sq)}, key {list(sk)}, value {list(sv)} do not " \
                   f"fit [B,S,N*H], [B,N,L,H], [B,N,L,Hv] with {N} heads"
        form, L, D, Dv = "kv_heads", sk[2], sq[2], N * sv[3]
    else:
        return f"MultiHeadAttention '{n.name}': query {sq} / key {sk} / value {sv} are none of the forms taken " \
               f"(separate 3-D, packed QKV / KV, key / value in heads)"
    if inp(n, 3):
        if form not in ("separate", "kv_heads"):
            return f"MultiHeadAttention '{n.name}': bias with packed {form.split('_')[1].upper()} is not decomposed"
        if shape_of(g, inp(n, 3)) != (2 * D + Dv,):
            return f"MultiHeadAttention '{n.name}': bias '{inp(n, 3)}' is not [{2 * D + Dv}]"
    why = _masks_reason(g, n, 4, B, N, S, L, "key_padding_")
    if why:
        return why
    m.data.update(B=B, S=S, L=L, sizes=[D, D, Dv], form=form)
    return None


def _slices(w: Writer, x: str, shape, sizes: List[int], tags) -> List[str]:
    """``x`` cut along its last axis into ``sizes``."""
    outs, start, axis = [], 0, len(shape) - 1
    for size, tag in zip(sizes, tags):
        outs.append(w.op("Slice", [x, w.const(f"{tag}_start", [start], np.int64),
                                   w.const(f"{tag}_end", [start + size], np.int64),
                                   w.const(f"{tag}_axis", [axis], np.int64)], list(shape[:-1]) + [size], tag=tag))
        start += size
    return outs


def _unpack(w: Writer, x: str, shape, idx: int, tag: str) -> str:
    """Part ``idx`` of a packed [B,T,N,k,H] tensor as [B,T,N*H]."""
    B, T, N, _, H = shape
    part = w.op("Slice", [x, w.const(f"{tag}_start", [idx], np.int64), w.const(f"{tag}_end", [idx + 1], np.int64),
                          w.const(f"{tag}_axis", [3], np.int64)], [B, T, N, 1, H], tag=tag)
    return w.reshape(part, [B, T, N * H], f"{tag}_merge")


def project(w: Writer, x: str, weights: str, bias: str, sizes: List[int], B: int, S: int):
    """Q, K, V of ``x @ weights + bias`` cut into ``sizes`` (three MatMuls when the weights are constant)."""
    g = w.g
    wv, bv = g.const(weights), (g.const(bias) if bias else None)
    if wv is not None and (not bias or bv is not None):
        parts, start = [], 0
        for size, p in zip(sizes, "qkv"):
            t = w.op("MatMul", [x, w.const(f"w{p}", wv[:, start:start + size])], [B, S, size], tag=f"{p}_proj")
            if bias:
                t = w.op("Add", [t, w.const(f"b{p}", bv[start:start + size])], [B, S, size], tag=f"{p}_bias")
            parts.append(t)
            start += size
        return parts
    t = w.op("MatMul", [x, weights], [B, S, sum(sizes)], tag="qkv_proj")
    if bias:
        t = w.op("Add", [t, bias], [B, S, sum(sizes)], tag="qkv_bias")
    return _slices(w, t, [B, S, sum(sizes)], sizes, ("q_part", "k_part", "v_part"))


def masks(w: Writer, n, mask: str, attn_bias: str, B: int, S: int, L: int) -> List[str]:
    """The additive terms of the scores, in order: key mask, attention_bias, causal (last: directly
    before the Softmax)."""
    fill = float_attr(n, "mask_filter_value", FILL)
    adds = []
    if mask:
        adds.append(key_mask(w, mask, B, S, L, fill))
    if attn_bias:
        adds.append(attn_bias)
    if attr(n, "unidirectional", 0) and S > 1:
        adds.append(causal_mask(w, S, L))
    return adds


def rewrite(m: Match, g) -> str:
    n, d = m.node, m.data
    w = Writer(g, n, m.origin)
    N = int(attr(n, "num_heads"))
    B, S, L, sizes = d["B"], d["S"], d["L"], d["sizes"]
    hq, hv = sizes[0] // N, sizes[2] // N
    scale = float_attr(n, "scale", 0.0) or 1.0 / math.sqrt(hq)
    out = n.output[0]
    g.remove(n)
    if n.op_type == "Attention":
        q, k, v = project(w, n.input[0], n.input[1], inp(n, 2), sizes, B, S)
        adds = masks(w, n, inp(n, 3), inp(n, 5), B, S, L)
    else:
        form = d["form"]
        if form == "packed_qkv":
            sq = shape_of(g, n.input[0])
            q, k, v = (_unpack(w, n.input[0], sq, i, f"{p}_unpack") for i, p in enumerate("qkv"))
        elif form == "kv_heads":   # onnxruntime adds only the query's part of the bias (measured)
            q, k, v = n.input[0], n.input[1], n.input[2]
            if inp(n, 3):
                bq = _slices(w, inp(n, 3), [sum(sizes)], sizes, ("bq", "bk", "bv"))[0]
                q = w.op("Add", [q, bq], [B, S, sizes[0]], tag="q_bias")
        elif form == "packed_kv":
            sk = shape_of(g, n.input[1])
            q = n.input[0]
            k, v = (_unpack(w, n.input[1], sk, i, f"{p}_unpack") for i, p in enumerate("kv"))
        else:
            q, k, v = n.input[0], n.input[1], n.input[2]
            if inp(n, 3):
                bq, bk, bv = _slices(w, inp(n, 3), [sum(sizes)], sizes, ("bq", "bk", "bv"))
                q = w.op("Add", [q, bq], [B, S, sizes[0]], tag="q_bias")
                k = w.op("Add", [k, bk], [B, L, sizes[1]], tag="k_bias")
                v = w.op("Add", [v, bv], [B, L, sizes[2]], tag="v_bias")
        adds = masks(w, n, inp(n, 4), inp(n, 5), B, S, L)
    attention_core(w, q, k, v, B=B, S=S, L=L, N=N, hq=hq, hv=hv, scale=scale, adds=adds, out=out,
                   kv_heads=d.get("form") == "kv_heads")
    return f"{n.op_type} ({N} heads, S={S}, L={L}, {len(adds)} additive masks) -> MatMul/Softmax attention"
