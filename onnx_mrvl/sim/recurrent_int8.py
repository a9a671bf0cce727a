"""int8 LSTM / GRU / RNN layers (``precision: "int8_in"``, docs/simulator.md "int8 recurrent layers").

Same timestep loop, gates and fp16 state storage as ``recurrent.py``; the two GEMMs change:

1. **input projection** on int8 codes: ``q_x = sat(rne(x / s_x) + z_x)`` (ONNX QuantizeLinear, x / s_x
   in fp32), ``acc[t, o] = sum_i (q_x - z_x) * q_w[o, i]`` exact (int32 on the MAC array), dequantized
   in fp32: ``fp32(acc) * fp32(s_x * s_w[o])``, then the fp32 biases (as the int8-in FC's epilogue);
2. **recurrent product** ``h_{t-1} R^T`` with the int8 codes of R:
   - state kept fp16 (``state_q`` None, the default of the flow): ``h`` (fp16) times the codes of R
     (exact in fp16) summed in fp32, times ``s_r[o]`` in fp32 (the per-channel scale in the epilogue);
   - state quantized (``state_q`` = (s_h, z_h, type), an option): ``q_h = sat(rne(h / s_h) + z_h)`` per
     step, ``acc = sum (q_h - z_h) * q_r`` exact, ``fp32(acc) * fp32(s_h * s_r[o])``. A GRU without
     ``linear_before_reset`` quantizes ``r * h`` the same way.
W and R scales are per (direction, gate row) ``[D, G*H]`` (a per-tensor scale repeated). With
``out_q`` (``precision: "int8"``: a QDQ model's Q -> DQ after Y absorbed) Y holds the codes of each
step's fp32 ``h_t`` (QuantizeLinear before the fp16 rounding); the state itself stays fp16.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .int8 import QRANGE, fake_quant, quantize
from .recurrent import F32, Recurrent

ACC_LIMIT = 2 ** 31


def _scales(v, dirs: int, rows: int, what: str) -> np.ndarray:
    s = np.asarray(v, F32).reshape(-1)
    if s.size == 1:
        s = np.repeat(s, dirs * rows)
    if s.size == dirs:
        s = np.repeat(s, rows)
    if s.size != dirs * rows:
        raise ValueError(f"{what} has {s.size} values: 1, {dirs} or {dirs * rows} expected")
    if not (np.isfinite(s).all() and np.all(s > 0)):
        raise ValueError(f"{what} must be positive and finite")
    return s.reshape(dirs, rows)


def _centered(codes: np.ndarray, zp, what: str) -> np.ndarray:
    """int32 ``q - z`` of int8 codes [D, rows, K] with zero points per row (None: 0)."""
    c = codes.astype(np.int32)
    if zp is None:
        return c
    z = np.rint(np.asarray(zp, np.float64)).astype(np.int32).reshape(-1)
    d, rows = codes.shape[:2]
    if z.size == 1:
        z = np.repeat(z, d * rows)
    if z.size != d * rows or z.min() < -128 or z.max() > 127:
        raise ValueError(f"{what} zero point has {z.size} values (1 or {d * rows} int8 values expected)")
    return c - z.reshape(d, rows, 1)


def _qparams(q, what: str) -> Optional[Tuple[float, int, str]]:
    if q is None:
        return None
    s, z, dt = float(q[0]), int(q[1]), str(q[2])
    if dt not in QRANGE or not (np.isfinite(s) and s > 0) or not QRANGE[dt][0] <= z <= QRANGE[dt][1]:
        raise ValueError(f"{what} quantization (scale {s}, zero point {z}, {dt}) is not a valid int8 / uint8 one")
    return s, z, dt


EXACT_K = 256          # 256 * 255 * 255 < 2^24: a float32 sum of that many products of codes is exact


def exact_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` exactly, as float64, for float32 integers with |a|, |b| <= 255: float32 matmuls over
    chunks of ``EXACT_K`` inputs (every partial sum an integer under 2^24, in any order), added in
    float64 (~2x faster than one float64 matmul)."""
    k = a.shape[1]
    acc = (a[:, :EXACT_K] @ b[:EXACT_K]).astype(np.float64)
    for k0 in range(EXACT_K, k, EXACT_K):
        acc += a[:, k0:k0 + EXACT_K] @ b[k0:k0 + EXACT_K]
    return acc


class Int8Recurrent(Recurrent):
    """A recurrent layer with int8 W and R codes and an int8 input projection (module docstring)."""

    def __init__(self, cell: str, kernel: np.ndarray, recurrence: np.ndarray, kernel_scale, recurrence_scale,
                 in_q, state_q=None, kernel_zero_point=None, recurrence_zero_point=None, out_q=None, **kw):
        kernel, recurrence = np.asarray(kernel), np.asarray(recurrence)
        codes = kernel if kernel_zero_point is None or not np.any(np.asarray(kernel_zero_point)) else None
        if kernel.dtype != np.int8 or recurrence.dtype != np.int8:
            raise ValueError(f"an int8 recurrent layer needs int8 kernel / recurrence codes, got "
                             f"{kernel.dtype} / {recurrence.dtype}")
        # q - z per gate row: exact integers (|q - z| <= 255; the MAC array sums q * x and subtracts
        # z * sum(x), docs/fusion.md)
        kernel = _centered(kernel, kernel_zero_point, "kernel")
        recurrence = _centered(recurrence, recurrence_zero_point, "recurrence")
        super().__init__(cell, kernel.astype(F32), recurrence.astype(F32), **kw)
        rows = self.gates * self.hid
        self.ws = _scales(kernel_scale, self.dirs, rows, "kernel scale")
        self.rs = _scales(recurrence_scale, self.dirs, rows, "recurrence scale")
        self.in_q = _qparams(in_q, "input")
        self.state_q = _qparams(state_q, "state")
        if self.in_q is None:
            raise ValueError("an int8 recurrent layer needs the input quantization (in_scale, in_zero_point)")
        if max(self.feat, self.hid) * 255 * 255 >= ACC_LIMIT:   # |q_x - z_x|, |q_w - z_w| <= 255
            raise ValueError(f"input size {self.feat} / hidden size {self.hid} could overflow the int32 accumulator")
        self.wq = [np.ascontiguousarray(kernel[d].T, dtype=F32) for d in range(self.dirs)]          # [I, G*H]
        self._codes, self._sums = codes, None   # the native int8 GEMM of the input projection (_xw)
        self.rq = [np.ascontiguousarray(recurrence[d].T, dtype=np.float64) for d in range(self.dirs)]  # [H, G*H]
        self.out_q = _qparams(out_q, "output")
        if self.out_q is not None and (self.c_row or self.h_row):
            raise ValueError("an int8 recurrent layer with a quantized output writes no cell-state row")
        self.keep_h32 = self.out_q is not None
        self.mx = (F32(self.in_q[0]) * self.ws).astype(F32)                                    # s_x * s_w
        self.mh = (F32(self.state_q[0]) * self.rs).astype(F32) if self.state_q else self.rs    # s_h * s_r | s_r

    def _row(self, h: np.ndarray) -> np.ndarray:
        """Y's row: the fp16 state, or with ``out_q`` the codes of the fp32 state (QuantizeLinear
        of the value before its fp16 rounding), held dequantized."""
        return h if self.out_q is None else fake_quant(self.h32, *self.out_q)

    def _xw(self, d: int, flat: np.ndarray) -> np.ndarray:
        sums = self._native_sums(d)
        if sums is not None:      # fp32(acc) of the exact sum: what acc.astype(F32) gives below
            acc = sums(flat)
        else:
            s, z, dt = self.in_q
            acc = exact_sum((quantize(flat, s, z, dt) - z).astype(F32), self.wq[d])    # exact integers
        with np.errstate(over="ignore", invalid="ignore"):
            return (acc.astype(F32) * self.mx[d]).astype(F32)

    def _native_sums(self, d: int):
        """int8_in_native.exact_sums for direction ``d`` (weights without a zero point, native int8
        kernels built, the layer not held to numpy), else None."""
        if self._codes is None or self.use_native is False:
            return None
        if self._sums is None:
            from .int8_in_native import exact_sums
            self._sums = [exact_sums(self._codes[d], self.in_q) for d in range(self.dirs)]
        return self._sums[d]

    def _hr(self, d: int, h: np.ndarray, lo: int, hi: int) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            if self.state_q is None:   # fp16 h x int8 codes (exact products), fp32 sums, x s_r
                acc = self.hr_sum(np.asarray(h, F32), self.rt[d][:, lo:hi])
                return (acc * self.mh[d, lo:hi]).astype(F32)
            s, z, dt = self.state_q
            acc = (quantize(h, s, z, dt) - z).astype(np.float64) @ self.rq[d][:, lo:hi]
            return (acc.astype(F32) * self.mh[d, lo:hi]).astype(F32)


def build(spec, cell: str, common: dict):
    """The prepared int8 layer of a program layer spec (``common``: the keyword arguments the fp16
    layer takes, built by ``recurrent.build``)."""
    p = spec.param
    in_q = (p("in_scale", required=True), p("in_zero_point", 0), p("in_dtype", "uint8"))
    state_q = (p("state_scale"), p("state_zero_point", 0), p("state_dtype", "uint8")) \
        if p("state_scale") is not None else None
    out_q = (p("out_scale"), p("out_zero_point", 0), p("out_dtype", "int8")) if p("out_scale") is not None else None
    return Int8Recurrent(cell, spec.weight("kernel", required=True), spec.weight("recurrence", required=True),
                         spec.weight("kernel_scale", required=True), spec.weight("recurrence_scale", required=True),
                         in_q, state_q, kernel_zero_point=spec.weight("kernel_zero_point"),
                         recurrence_zero_point=spec.weight("recurrence_zero_point"), out_q=out_q, **common)
