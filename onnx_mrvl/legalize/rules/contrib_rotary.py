"""com.microsoft ``RotaryEmbedding`` -> Gathers of the cos / sin caches at the positions, Slices, Muls,
Adds and a Concat (onnxruntime's CPU kernel): per head vector x of size H with rotary size
R = rotary_embedding_dim (default H), c = cos_cache[pos], s = sin_cache[pos] ([R/2] each; -s is gathered
from the negated table, so only Adds follow):

    interleaved=0:  x1 = x[:R/2], x2 = x[R/2:R];  y = [x1 c - x2 s, x2 c + x1 s, x[R:]]
    interleaved=1:  pairs (x[2i], x[2i+1]) -> (x[2i] c_i - x[2i+1] s_i, x[2i+1] c_i + x[2i] s_i), then x[R:]

input [B, S, N*H] (``num_heads``) or [B, N, S, H]; position_ids [B, S] or [1] (an offset: positions
offset + 0..S-1). ``is_packed_batching`` keeps the node on the CPU.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import TensorProto

from .base import Match, attr
from .contrib_ops import Writer, float32_check, shape_of
from .contrib_ops import REPORT_SKIPS, match  # noqa: F401  (the contrib rules' own)

NAME = "contrib_rotary"
OPS = ("RotaryEmbedding",)


@float32_check
def check(m: Match, g, n) -> Optional[str]:
    if attr(n, "is_packed_batching", 0):
        return f"RotaryEmbedding '{n.name}': packed batching (variable-length sequences) is not decomposed"
    sx, sp, sc = shape_of(g, n.input[0]), shape_of(g, n.input[1]), shape_of(g, n.input[2])
    if sx is None or sp is None or sc is None or len(sc) != 2 or shape_of(g, n.input[3]) != sc:
        return f"RotaryEmbedding '{n.name}': input / position_ids / caches have no static shapes"
    N = attr(n, "num_heads", 0)
    if len(sx) == 4:
        B, N, S, H = sx
    elif len(sx) == 3 and N and sx[2] % N == 0:
        B, S, H = sx[0], sx[1], sx[2] // N
    else:
        return f"RotaryEmbedding '{n.name}': input {list(sx)} is neither [B,N,S,H] nor [B,S,N*H] with num_heads"
    R = attr(n, "rotary_embedding_dim", 0) or H
    if R > H or R % 2 or sc[1] != R // 2:
        return f"RotaryEmbedding '{n.name}': rotary size {R} does not fit head size {H} and caches {list(sc)}"
    if tuple(sp) not in ((B, S), (1,)):
        return f"RotaryEmbedding '{n.name}': position_ids {list(sp)} are neither [B, S] nor [1]"
    m.data.update(B=B, S=S, N=N, H=H, R=R, four=len(sx) == 4)
    return None


def _slice(w: Writer, x: str, shape, a: int, b: int, tag: str) -> str:
    return w.op("Slice", [x, w.const(f"{tag}_s", [a], np.int64), w.const(f"{tag}_e", [b], np.int64),
                          w.const(f"{tag}_a", [len(shape) - 1], np.int64)], list(shape[:-1]) + [b - a], tag=tag)


def _table_rows(w: Writer, table: str, pos: str, shape, heads_shape, tag: str, negate: bool = False) -> str:
    """``table[pos]`` (negated) reshaped to broadcast over the heads; one per (table, positions), shared
    by the Q and K rotations."""
    g = w.g
    memo = g.__dict__.setdefault("contrib_rotary_rows", {})
    key = (table, pos, negate, tuple(heads_shape))
    if key in memo and memo[key] in g.producer:
        return memo[key]
    src = table
    if negate:
        const = g.const(table)
        src = w.const(f"{tag}_table", -const) if const is not None else \
            w.op("Neg", [table], list(shape_of(g, table)), tag=f"{tag}_table")
    rows = w.op("Gather", [src, pos], shape, tag=tag, axis=0)
    memo[key] = w.reshape(rows, heads_shape, f"{tag}_heads")
    return memo[key]


def rewrite(m: Match, g) -> str:
    n, d = m.node, m.data
    w = Writer(g, n, m.origin)
    B, S, N, H, R, four = d["B"], d["S"], d["N"], d["H"], d["R"], d["four"]
    half = R // 2
    out = n.output[0]
    inter = bool(attr(n, "interleaved", 0))
    g.remove(n)
    pos = n.input[1]
    if shape_of(g, pos) == (1,):
        pos = w.op("Add", [w.const("arange", np.arange(S).reshape(1, S), np.int64),
                           w.op("Cast", [pos], [1], tag="offset", dtype=TensorProto.INT64, to=TensorProto.INT64)],
                   [1, S], tag="positions", dtype=TensorProto.INT64)
    P = shape_of(g, pos)[0] if shape_of(g, pos) else 1
    # x as [B, S, N, H] (3-D input) or [B, N, S, H]; cos / sin broadcast over the heads
    hshape = [B, N, S, H] if four else [B, S, N, H]
    cshape = [P, 1, S, half] if four else [P, S, 1, half]
    x = n.input[0] if four else w.reshape(n.input[0], hshape, "heads")
    c = _table_rows(w, n.input[2], pos, [P, S, half], cshape, "cos")
    s = _table_rows(w, n.input[3], pos, [P, S, half], cshape, "sin")
    ns = _table_rows(w, n.input[3], pos, [P, S, half], cshape, "neg_sin", negate=True)
    if inter:
        xr = _slice(w, x, hshape, 0, R, "rot") if R < H else x
        pairs = w.reshape(xr, hshape[:-1] + [half, 2], "pairs")
        ps = hshape[:-1] + [half, 2]
        a = w.reshape(_slice(w, pairs, ps, 0, 1, "even"), hshape[:-1] + [half], "even_flat")
        b = w.reshape(_slice(w, pairs, ps, 1, 2, "odd"), hshape[:-1] + [half], "odd_flat")
    else:
        a, b = _slice(w, x, hshape, 0, half, "x1"), _slice(w, x, hshape, half, R, "x2")
    hs = hshape[:-1] + [half]
    # x1 c - x2 s as x1 c + x2 (-s): Adds only (the accelerator has no Sub of two tensors)
    o1 = w.op("Add", [w.op("Mul", [a, c], hs, tag="a_cos"), w.op("Mul", [b, ns], hs, tag="b_neg_sin")], hs, tag="rot1")
    o2 = w.op("Add", [w.op("Mul", [b, c], hs, tag="b_cos"), w.op("Mul", [a, s], hs, tag="a_sin")], hs, tag="rot2")
    if inter:
        o1, o2 = (w.reshape(o, hs + [1], f"{t}_col") for o, t in ((o1, "rot1"), (o2, "rot2")))
        rot = w.reshape(w.op("Concat", [o1, o2], hs + [2], tag="interleave", axis=-1), hshape[:-1] + [R], "rot_flat")
        parts = [rot]
    else:
        parts = [o1, o2]
    if R < H:
        parts.append(_slice(w, x, hshape, R, H, "pass"))
    final = None if four else g.fresh(f"{n.name}/rotated")
    y = w.op("Concat", parts, hshape, tag="concat", axis=-1, out=out if four else final) if len(parts) > 1 else parts[0]
    if not four:
        w.reshape(y, [B, S, N * H], "merge", out=out)
    elif y != out:
        w.op("Identity", [y], hshape, tag="out", out=out)
    return f"RotaryEmbedding ({'interleaved' if inter else 'half split'}, {R} of {H}) -> Gather/Slice/Mul/Add/Concat"
