"""FC: a prepared fully connected layer (docs/simulator.md): fp16 weights, float32 sums, the shared
epilogue; natively a GEMV for up to ``GEMV_ROWS`` rows, else a 1x1 ``Conv2D`` over [N, 1, 1, K]."""
from __future__ import annotations

from typing import TYPE_CHECKING, Tuple

import numpy as np

from . import jit, native
from .activations import make_activation
from .epilogue import F32, make_epilogue
from .fp16 import fp16_source, to_fp16_values
from .parallel import workers

if TYPE_CHECKING:
    from .kernels import Conv2D

GEMV_ROWS = 4               # native FC: at most this many rows take the GEMV kernel (fp16 weights)


class FC:
    """A prepared fully connected layer: y = act(x @ kernel.T + bias), kernel [O, K]."""

    def __init__(self, kernel, bias=None, activation="none", activation_params=None, slope=None):
        k = np.asarray(kernel)
        if k.ndim != 2:
            raise ValueError(f"FC kernel must be [O, K], got shape {list(k.shape)}")
        self.out_features, self.in_features = (int(d) for d in k.shape)
        self._k16 = fp16_source(k)              # [O, K] float16: the native kernels pack it directly
        self._w = None
        self.epilogue = make_epilogue(self.out_features, bias, None, None, activation, activation_params, slope)
        # the native path: a 1x1 conv over [N, 1, 1, K] (built on the first native call)
        self._conv_args = (bias, activation, activation_params, slope)
        self._conv = None                       # Optional[Conv2D]
        self._gemv_plans = {}                   # row count -> gemv_plan()
        self._gemv_weights = None

    @property
    def w(self) -> np.ndarray:
        """The float32 [K, O] weight matrix (the numpy path; built on first use)."""
        if self._w is None:
            self._w = np.ascontiguousarray(self._k16.T, dtype=F32)
        return self._w

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.apply(x)[0]

    def apply(self, x: np.ndarray) -> Tuple[np.ndarray, bool]:
        """Run on fp16-valued float32 ``x`` [N, K]; returns (output, every output value finite)."""
        x2 = x.reshape(x.shape[0], -1) if x.ndim != 2 else x
        if x2.shape[1] != self.in_features:
            raise ValueError(f"FC expects {self.in_features} input features, got shape {list(x.shape)}")
        if native.on() and x2.shape[0] <= GEMV_ROWS:
            return self._gemv(np.ascontiguousarray(x2, dtype=F32))
        if native.on():
            y, finite = self.native_conv().apply(x2.reshape(x2.shape[0], 1, 1, self.in_features))
            return y.reshape(x2.shape[0], self.out_features), finite
        with np.errstate(over="ignore", invalid="ignore"):
            out = np.matmul(np.ascontiguousarray(x2), self.w)
            finite = self.epilogue(out)
        return out, finite

    def gemv_plan(self, rows: int):
        """(descriptor, its address, keep-alive arrays, numpy activation for code < 0) of the
        native GEMV on ``rows`` rows (fp16 weights, epilogue fused); built once per row count."""
        plan = self._gemv_plans.get(rows)
        if plan is None:
            bias, activation, params, slope = self._conv_args
            o = self.out_features
            code, p0, p1, sl = jit.act_args(activation, params, slope, o)
            wts = self._gemv_weights if self._gemv_weights is not None else native.pack_weights_f16(self._k16.T)
            self._gemv_weights = wts
            vecs = (None if bias is None else native.padded(jit.channel_vector(bias, o, 0.0), 16),
                    native.padded(np.broadcast_to(sl, (o,)), 16))
            bits = np.array([p0, p1], F32).view(np.uint32).astype(np.int64)
            desc = np.array([rows, self.in_features, o, wts.ctypes.data] + [0 if v is None else v.ctypes.data for v in vecs]
                            + [int(code), bits[0], bits[1]], dtype=np.int64)
            act = make_activation(activation, params, slope) if code < 0 else None
            plan = self._gemv_plans[rows] = (desc, desc.ctypes.data, (wts, vecs), act)
        return plan

    def native_conv(self) -> "Conv2D":
        """The 1x1 Conv2D over [N, 1, 1, K] that runs this FC natively for more than GEMV_ROWS rows."""
        if self._conv is None:
            from .kernels import Conv2D         # noqa: F811 - kernels.py re-exports FC: imported here, not at the top
            bias, activation, params, slope = self._conv_args
            self._conv = Conv2D(self._k16.reshape(self.out_features, 1, 1, self.in_features), bias=bias,
                                activation=activation, activation_params=params, slope=slope)
        return self._conv

    def _gemv(self, x: np.ndarray) -> Tuple[np.ndarray, bool]:
        """The native GEMV (fp16 weights, epilogue fused) for a batch of at most GEMV_ROWS rows."""
        _, desc, _, act = self.gemv_plan(x.shape[0])
        from .kernels import Conv2D   # noqa: F811
        out = native.empty((x.shape[0], self.out_features))
        ok = native.lib().gemv_desc(desc, x.ctypes.data, out.ctypes.data, workers())
        return Conv2D._native_finish(out, ok, act)


def fc(x, kernel, bias=None, activation="none", activation_params=None, slope=None):
    """One-shot FC: x [N, K], kernel [O, K] -> fp16 values [N, O]."""
    return FC(kernel, bias=bias, activation=activation, activation_params=activation_params,
              slope=slope)(to_fp16_values(x))
