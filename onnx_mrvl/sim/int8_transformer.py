"""The int8 ``Requantize`` layer (docs/simulator.md "int8 layers"): a QuantizeLinear ->
DequantizeLinear pair of a QDQ model inside a region. ``q = sat(rne(x / s) + z)`` with x / s in
float32 (MLAS QuantizeLinear, ``int8.quantize``), the output held as its dequantized value
``(q - z) * s`` (an int8 tensor: the codes are stored, so the next int8 layer reads them exactly).
"""
from __future__ import annotations

from typing import Mapping

from .int8 import QRANGE, fake_quant


def build_requantize(spec, n_inputs: int):
    """The prepared closure of a Requantize layer spec (sim/layers.py)."""
    if n_inputs != 1:
        raise spec.error(f"takes 1 input, the program gives {n_inputs}")
    p: Mapping = spec.params
    try:
        if p.get("precision") != "int8":
            raise ValueError("precision must be int8")
        s, z, dt = float(p["out_scale"]), int(p["out_zero_point"]), str(p["out_dtype"])
        if (float(p["in_scale"]), int(p["in_zero_point"]), str(p["in_dtype"])) != (s, z, dt):
            raise ValueError("in_* and out_* quantization differ (a Requantize keeps one)")
        if dt not in QRANGE or not s > 0:
            raise ValueError(f"quantization {dt!r} with scale {s} (int8 or uint8, positive scale)")
    except (ValueError, KeyError, TypeError) as exc:
        raise spec.error(f"int8 layer: {exc}") from None
    return lambda x: (fake_quant(x, s, z, dt), True)
