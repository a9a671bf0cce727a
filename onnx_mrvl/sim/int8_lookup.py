"""int8 Lookup layer (docs/simulator.md "int8 layers"): ``q_y = table[c, q_x - lo]``.

The input is quantized as every int8 layer does (``int8.quantize``: QuantizeLinear as MLAS), the
code indexes the layer's int32 table (row ``c`` = the channel along the last axis when the table
has one row per channel, else row 0), and the output code is dequantized ``(q_y - z_y) * s_y``.
``precision`` "fp32" (an fp32 chain's one-input function of int8 codes, fuse/qdq_f32chain.py): the
table holds the fp32 output values themselves (onnxruntime's float ops on each code's DQ value).
"""
from __future__ import annotations

from typing import Mapping, Tuple

import numpy as np

from .int8 import F32, QRANGE, quantize


class Int8Lookup:
    def __init__(self, table: np.ndarray, params: Mapping):
        self.in_q = (float(params["in_scale"]), int(params["in_zero_point"]), str(params["in_dtype"]))
        t = np.asarray(table)
        if params.get("precision") == "fp32":   # fp32 values
            if t.dtype != np.float32 or t.ndim != 2 or t.shape[1] != 256 or self.in_q[2] not in QRANGE:
                raise ValueError(f"an fp32 Lookup takes int8 / uint8 codes and a float32 [channels, 256] table, "
                                 f"the binary holds {self.in_q[2]}, {t.dtype} {list(t.shape)}")
            self.values, self.out_q = t, None
            return
        self.out_q = (float(params["out_scale"]), int(params["out_zero_point"]), str(params["out_dtype"]))
        for dt in (self.in_q[2], self.out_q[2]):
            if dt not in QRANGE:
                raise ValueError(f"quantization type {dt!r} (int8 or uint8)")
        if t.dtype != np.int32 or t.ndim != 2 or t.shape[1] != 256:
            raise ValueError(f"a Lookup table must be int32 [channels, 256], the binary holds {t.dtype} {list(t.shape)}")
        lo, hi = QRANGE[self.out_q[2]]
        if t.size and (t.min() < lo or t.max() > hi):
            raise ValueError(f"Lookup table codes outside [{lo}, {hi}]")
        # the dequantized output of every code, so a lookup is one gather
        self.values = ((t - self.out_q[1]).astype(F32) * F32(self.out_q[0])).astype(F32)

    def apply(self, x: np.ndarray) -> Tuple[np.ndarray, bool]:
        s, z, dt = self.in_q
        idx = quantize(x, s, z, dt) - QRANGE[dt][0]
        c = self.values.shape[0]
        if c == 1:
            return self.values[0][idx], True
        if x.shape[-1] != c:
            raise ValueError(f"a per-channel Lookup of {c} channels on an input of shape {list(x.shape)}")
        return self.values[np.arange(c), idx], True


def build_lookup(spec, n_inputs: int = 1):
    if n_inputs != 1:
        raise spec.error(f"a Lookup takes one input, the layer lists {n_inputs}")
    try:
        layer = Int8Lookup(spec.weight("table", required=True), spec.params)
        from .int8_table_native import prepare_lookup   # the native gather (same results), when built
        return (layer.out_q is not None and prepare_lookup(layer)) or layer.apply
    except (ValueError, KeyError, TypeError) as exc:
        raise spec.error(f"int8 layer: {exc}") from None
