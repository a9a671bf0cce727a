"""onnxruntime's fp32 ReduceMean on the CPU, in its summation orders (a QDQ layer norm that
onnxruntime runs decomposed, docs/simulator.md "int8 layers").

    last axis (its KR path: ``math::RowwiseSum``, an Eigen column sum, SSE packets of 4):
        per row, the elements before the first 16-byte boundary are left for later; from it, two
        packet accumulators over blocks of 8 (``p0 += x[i:i+4]; p1 += x[i+4:i+8]``), ``p0 + p1``,
        one more packet when one is left, folded ``(a0 + a2) + (a1 + a3)``, then the head elements
        and the tail added in order (too short for a packet: all in order)
    strided axis with only 1s before it (its RK path: an MLAS SGEMM of a row of ones, M = 1):
        a plain fp32 sum in order
    the mean: that fp32 sum divided by ``fp32(n)``

Rows are laid out as onnxruntime holds the tensor (row r starts r * n floats into a 16-byte
aligned buffer). The strided path with leading dimensions above 1 (its KRK path) sums in another
order, not followed (the marking rule in legalize leaves those means unmarked)."""
from __future__ import annotations

import numpy as np

F32 = np.float32
P = 4   # SSE packet of float32 (onnxruntime's Eigen is built for SSE)


def _eigen_rows(rows: np.ndarray, head: int) -> np.ndarray:
    """Eigen's sum of each row of ``rows`` [R, n] whose first ``head`` elements precede the boundary."""
    n = rows.shape[1]
    size = n - head
    n2, n1 = size // (2 * P) * 2 * P, size // P * P
    if n1 == 0:
        s = rows[:, 0].copy()
        for k in range(1, n):
            s += rows[:, k]
        return s
    v = rows[:, head:]
    p0 = v[:, 0:P].copy()
    if n1 > P:
        p1 = v[:, P:2 * P].copy()
        for i in range(2 * P, n2, 2 * P):
            p0 += v[:, i:i + P]
            p1 += v[:, i + P:i + 2 * P]
        p0 += p1
        if n1 > n2:
            p0 += v[:, n2:n2 + P]
    s = (p0[:, 0] + p0[:, 2]) + (p0[:, 1] + p0[:, 3])
    for k in list(range(head)) + list(range(head + n1, n)):
        s += rows[:, k]
    return s


def sum_last(rows: np.ndarray) -> np.ndarray:
    """onnxruntime's fp32 sum over the last axis of ``rows`` [R, n] (row r at offset r * n)."""
    rows = np.ascontiguousarray(rows, F32)
    r, n = rows.shape
    if n == 0:
        return np.zeros(r, F32)
    out = np.empty(r, F32)
    heads = (-(np.arange(r, dtype=np.int64) * n)) % P
    for h in np.unique(heads):
        sel = heads == h
        out[sel] = _eigen_rows(rows[sel], int(min(h, n)))
    return out


def sum_in_order(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, F32)
    if rows.shape[1] == 0:
        return np.zeros(rows.shape[0], F32)
    s = rows[:, 0].copy()
    for k in range(1, rows.shape[1]):
        s += rows[:, k]
    return s


def mean(x: np.ndarray, axis: int, strided: bool = False) -> np.ndarray:
    """onnxruntime's ReduceMean of ``x`` over ``axis`` (keepdims), x holding onnxruntime's tensor
    with that axis moved last; ``strided``: onnxruntime reduced it as a strided axis (RK path)."""
    x = np.asarray(x, F32)
    rows = np.moveaxis(x, axis, -1)
    shape, n = rows.shape, rows.shape[-1]
    rows = rows.reshape(int(np.prod(shape[:-1], dtype=np.int64)), n)
    s = sum_in_order(rows) if strided else sum_last(rows)
    m = (s / F32(n)).astype(F32)
    return np.expand_dims(m.reshape(shape[:-1]), axis)


def instance_norm(rows: np.ndarray, epsilon: float, scale: float, bias: float) -> np.ndarray:
    """onnxruntime's fp32 InstanceNormalization kernel on ``rows`` [R, W] (row r at offset r * W; one
    scale / bias for all rows): ``mean = fp32(sum / W)`` (Eigen's row sum, ``sum_last``), the
    squared norm of ``d = fp32(x - mean)`` (Eigen's sum of ``fp32(d * d)``, packets from the row's
    first element: an expression, no alignment head), ``inv = 1 / sqrt(fp32(ssq / W) + eps)``,
    ``a = fp32(inv * scale)``, ``b = fp32(bias - fp32(mean * a))``, ``y = fp32(fp32(x * a) + b)``
    (no FMA). The fp32 result, unrounded to any quantum."""
    rows = np.ascontiguousarray(rows, F32)
    r, w = rows.shape
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        mu = (sum_last(rows) / F32(w)).astype(F32)
        d = (rows - mu[:, None]).astype(F32)
        ssq = _eigen_rows((d * d).astype(F32), 0) if w else np.zeros(r, F32)
        inv = (F32(1) / np.sqrt((ssq / F32(w)).astype(F32) + F32(epsilon))).astype(F32)
        a = (inv * F32(scale)).astype(F32)
        b = (F32(bias) - (mu * a).astype(F32)).astype(F32)
        return ((rows * a[:, None]).astype(F32) + b[:, None]).astype(F32)
