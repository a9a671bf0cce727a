"""com.microsoft weight-only block quantization (``onnxruntime.quantization.matmul_nbits_quantizer``,
Optimum / GenAI / Olive int4 and int8 exports) -> the float op on the dequantized constant:

- ``MatMulNBits(A, B, scales [, zero_points, g_idx, bias])`` -> ``MatMul(A, W^T) [-> Add(bias)]``;
- ``GatherBlockQuantized(data, indices, scales [, zero_points])`` -> ``Gather(W, indices)``.

The activations are float in these models (no quantization at run time), so the MLIP's int8 layers,
which take quantized activations and one weight scale per output channel, have nothing to run: the
MatMul is an fp16 layer on the dequantized weights (its decision says so and why), the Gather a
constant-table lookup on the CPU, as in the float model. onnxruntime's CPU kernels dequantize the
same way, ``(q - zero_point) * scale`` per block along K (B's codes packed low bits first, 2 / 4 / 8
bits; a missing zero point is ``2^(bits-1)`` for uint8 storage, 0 for int4 / uint4 data), then
compute in fp32 (measured identical, tests/test_contrib_nbits.py). A non-constant weight, scale or
zero point, or MatMulNBits' act-order ``g_idx``, keeps the node on the CPU with that reason.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import TensorProto

from .base import Match, attr, inp
from .contrib_ops import REPORT_SKIPS, match  # noqa: F401  (the contrib rules' own)

NAME = "contrib_nbits"
OPS = ("MatMulNBits", "GatherBlockQuantized")
NOTE = "{precision} with dequantized weights (weight-only %d-bit block-quantized weights, block size %d: " \
       "the activations are not quantized, the MLIP's int8 layers take quantized activations and one weight " \
       "scale per output channel; %s '%s')"


def _unpack(codes: np.ndarray, bits: int) -> np.ndarray:
    """uint8 bytes -> their ``8 / bits`` codes each, low bits first, along the last axis."""
    per = 8 // bits
    parts = [(codes >> (bits * i)) & ((1 << bits) - 1) for i in range(per)]
    return np.stack(parts, -1).reshape(*codes.shape[:-1], codes.shape[-1] * per)


def _blocks(a: np.ndarray, axis: int, block: int, size: int) -> np.ndarray:
    """Per-block values repeated over their block along ``axis``, cut to ``size``."""
    return np.take(np.repeat(a, block, axis=axis), np.arange(size), axis=axis)


def _matmul_nbits(g, n) -> "np.ndarray | str":
    """MatMulNBits' dequantized ``[N, K]`` weight, or why not."""
    K, N, bits, bs = attr(n, "K"), attr(n, "N"), attr(n, "bits", 4), attr(n, "block_size")
    if inp(n, 4):
        return "act-order g_idx (a permuted block index per row of K)"
    b, s = g.const(inp(n, 1)), g.const(inp(n, 2))
    z = g.const(inp(n, 3)) if inp(n, 3) else None
    if b is None or s is None or (inp(n, 3) and z is None):
        return "weights, scales or zero points are not constants"
    if bits not in (2, 4, 8) or not bs or K is None or N is None:
        return f"bits={bits}, block_size={bs}: not the packed 2 / 4 / 8-bit form"
    nb = -(-K // bs)
    q = _unpack(b.reshape(N, -1), bits)[:, :nb * bs].reshape(N, nb * bs)
    if z is None:
        z = np.full((N, nb), 2 ** (bits - 1), np.float32)
    elif z.dtype == np.uint8:
        z = _unpack(z.reshape(N, -1), bits)[:, :nb]
    s, z = s.reshape(N, nb).astype(np.float32), z.reshape(N, nb).astype(np.float32)
    return ((q[:, :K].astype(np.float32) - _blocks(z, 1, bs, K)) * _blocks(s, 1, bs, K)).astype(np.float32)


def _gather_block(g, n) -> "np.ndarray | str":
    """GatherBlockQuantized's dequantized table, or why not."""
    data, s = g.const(inp(n, 0)), g.const(inp(n, 2))
    z = g.const(inp(n, 3)) if inp(n, 3) else None
    if data is None or s is None or (inp(n, 3) and z is None):
        return "table, scales or zero points are not constants"
    bits, bs = attr(n, "bits", 4), attr(n, "block_size", 128)
    packed = g.dtype(inp(n, 0)) == TensorProto.UINT8
    q = _unpack(data, bits) if packed and bits < 8 else data
    qa = attr(n, "quantize_axis", 1) % q.ndim
    if z is None:
        z = np.full(s.shape, 2 ** (bits - 1) if packed else 0, np.float32)
    elif packed and bits < 8:     # packed along the last axis, a half-filled last byte when odd
        z = _unpack(z, bits)[..., :s.shape[-1]].reshape(s.shape)
    size = q.shape[qa]
    w = (q.astype(np.float32) - _blocks(z.astype(np.float32), qa, bs, size)) \
        * _blocks(s.astype(np.float32), qa, bs, size)
    return w.astype(np.float32)


def _weight(g, n) -> "np.ndarray | str":
    return _matmul_nbits(g, n) if n.op_type == "MatMulNBits" else _gather_block(g, n)


def check(m: Match, g, target) -> Optional[str]:
    n = m.node
    try:
        w = _weight(g, n)
    except (ValueError, IndexError) as exc:   # shapes that do not match the attributes
        w = f"its constants do not match its attributes ({exc})"
    if isinstance(w, str):
        return f"{n.op_type} '{n.name}': {w}"
    m.data["weight"] = w
    return None


def rewrite(m: Match, g) -> str:
    n, w = m.node, m.data["weight"]
    bits, bs = attr(n, "bits", 4), attr(n, "block_size", 128)
    outs = list(n.output)
    g.remove(n)
    if n.op_type == "GatherBlockQuantized":
        table = g.add_const(f"{n.name}/dequantized", w)
        g.make("Gather", [table, inp(n, 1)], outs, near=n, origin=m.origin, name=n.name,
               axis=attr(n, "gather_axis", 0))
        return f"GatherBlockQuantized -> Gather of the dequantized table ({bits}-bit, block {bs})"
    weight = g.add_const(f"{n.name}/dequantized", np.ascontiguousarray(w.T))
    bias = inp(n, 5)
    mm_out = g.fresh(f"{outs[0]}/matmul") if bias else outs[0]
    g.make("MatMul", [inp(n, 0), weight], [mm_out], near=n, origin=m.origin, name=n.name)
    if bias:
        g.make("Add", [mm_out, bias], outs, near=n, origin=m.origin, name=f"{n.name}/bias")
    for o in m.origin:
        g.notes.setdefault(o, NOTE % (bits, bs, n.op_type, n.name))
    return f"MatMulNBits -> MatMul on the dequantized weights ({bits}-bit, block {bs}{', + bias' if bias else ''})"

