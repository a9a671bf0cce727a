"""int8 Concat (docs/simulator.md "int8 layers"): every input's code requantized to the output's,
``q_y = sat(rne(fp32((q_i - z_i) * s_i) / s_y) + z_y)`` (QuantizeLinear of DequantizeLinear, as
onnxruntime's QLinearConcat tables and its float DQ -> Concat -> Q compute it), then concatenated."""
from __future__ import annotations

from typing import Mapping, Tuple

import numpy as np

from .int8 import F32, QRANGE, fake_quant, quantize
from .tensor_ops import concat


class Int8Concat:
    def __init__(self, params: Mapping, axis: int, n_inputs: int):
        dt = str(params["in_dtype"])
        self.ins = [(float(s), int(z), dt) for s, z in zip(params["in_scales"], params["in_zero_points"])]
        self.out_q = (float(params["out_scale"]), int(params["out_zero_point"]), str(params["out_dtype"]))
        if len(self.ins) != n_inputs or dt not in QRANGE or self.out_q[2] not in QRANGE:
            raise ValueError(f"{len(self.ins)} input quantizations of type {dt!r} for {n_inputs} inputs")
        self.axis = axis

    def apply(self, *xs) -> Tuple[np.ndarray, bool]:
        parts = []
        for x, (s, z, dt) in zip(xs, self.ins):
            real = ((quantize(x, s, z, dt) - z).astype(F32) * F32(s)).astype(F32)
            parts.append(fake_quant(real, *self.out_q))
        return concat(parts, self.axis), True


def build_concat(spec, n_inputs: int):
    try:
        layer = Int8Concat(spec.params, int(spec.param("axis", required=True)), n_inputs)
        from .int8_table_native import prepare_concat   # the native gather (same results), when built
        return prepare_concat(layer) or layer.apply
    except (ValueError, KeyError, TypeError) as exc:
        raise spec.error(f"int8 layer: {exc}") from None
