"""Boundary quantization of a region's inputs and outputs (format 1.2; docs/binary-format.md
"boundary quantization"): the fields of the MLIP model metadata that tell the runtime to quantize a
float32 input on the host before the region reads it (``quantize``, ``qscale``) or to dequantize an
int8 output after it (``dequantize``, ``dscale``).

``meta.inputs[i].quantize`` = ``{"type": "float32", "model_type": "int8"|"uint8", "qscale": q,
"scale": s, "zero_point": z}`` and ``meta.outputs[i].dequantize`` = ``{"type": "float32",
"model_type": ..., "dscale": s, "zero_point": z}``: ``type`` the host side's, ``model_type`` the
region tensor's (it must equal the boundary tensor's dtype, scale and zero point), ``qscale`` the
runtime's multiplier ``fp32(1 / fp32(s))`` (the simulator divides by ``s`` as QuantizeLinear does),
``dscale`` = ``s``.
"""
from __future__ import annotations

import struct
from typing import Callable, List, NoReturn

IO_QUANT_SINCE = 2                       # the format minor that defined the fields
FIELDS = {"inputs": ("quantize", "qscale"), "outputs": ("dequantize", "dscale")}
QTYPES = ("int8", "uint8")


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def qscale_of(scale: float) -> float:
    """The runtime's quantize multiplier for ``scale``: fp32(1 / fp32(scale))."""
    return f32(1.0 / f32(scale))


def boundary_fields(tensor: dict, key: str) -> dict:
    """The ``quantize`` / ``dequantize`` object for an int8 boundary ``tensor`` (compile)."""
    s, z = float(tensor["scale"]), int(tensor["zero_point"])
    q = {"type": "float32", "model_type": tensor["dtype"], "scale": s, "zero_point": z}
    if key == "inputs":
        q["qscale"] = qscale_of(s)
    else:
        q = {"type": "float32", "model_type": tensor["dtype"], "dscale": s, "zero_point": z}
    return q


def has_io_quant(meta) -> bool:
    """Whether any boundary of ``meta`` carries quantization (the writer then needs format 1.2)."""
    return any(isinstance(b, dict) and FIELDS[key][0] in b
               for key in FIELDS for b in (meta.get(key) or []) if isinstance(meta.get(key), list))


def check_io_quant(fail: Callable[[str], NoReturn], key: str, items: list, tensors: list, minor: int) -> None:
    """Check ``meta.inputs`` / ``meta.outputs`` boundary quantization against the tensor table."""
    by_id = {t.get("id"): t for t in tensors if isinstance(t, dict)}
    field, mult = FIELDS[key]
    other = FIELDS["outputs" if key == "inputs" else "inputs"][0]
    for i, b in enumerate(items):
        path = f"meta.{key}[{i}]"
        if other in b:
            fail(f"{path}.{other}: a boundary {key[:-1]} carries {field} only")
        t = by_id.get(b["tensor"], {})
        dtype = t.get("dtype", "float16")
        if field not in b:
            if dtype in QTYPES and minor >= IO_QUANT_SINCE:
                fail(f"{path}: its tensor is {dtype}, so the boundary needs '{field}' (format 1.{minor})")
            continue
        if minor < IO_QUANT_SINCE:
            fail(f"{path}.{field}: boundary quantization needs format 1.{IO_QUANT_SINCE} (this file is 1.{minor})")
        q = b[field]
        want = {"type", "model_type", "zero_point", mult} | ({"scale"} if key == "inputs" else set())
        if not isinstance(q, dict) or set(q) != want:
            fail(f"{path}.{field}: expected an object with keys {sorted(want)}, got {_keys(q)}")
        if q["type"] != "float32":
            fail(f"{path}.{field}.type: expected 'float32' (the host side), got {q['type']!r}")
        if q["model_type"] not in QTYPES or q["model_type"] != dtype:
            fail(f"{path}.{field}.model_type: {q['model_type']!r} is not the boundary tensor's dtype {dtype!r}")
        scale = q["scale"] if key == "inputs" else q[mult]
        if not _num(scale) or scale != t.get("scale"):
            fail(f"{path}.{field}: scale {scale!r} is not the boundary tensor's {t.get('scale')!r}")
        zp = q["zero_point"]
        if isinstance(zp, bool) or not isinstance(zp, int) or zp != t.get("zero_point"):
            fail(f"{path}.{field}.zero_point: {zp!r} is not the boundary tensor's {t.get('zero_point')!r}")
        if key == "inputs" and (not _num(q[mult]) or q[mult] != qscale_of(scale)):
            fail(f"{path}.{field}.qscale: {q[mult]!r}, expected fp32(1 / scale) = {qscale_of(scale)!r}")


def _num(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and 0 < v < float("inf")


def _keys(q) -> List[str]:
    return sorted(q) if isinstance(q, dict) else type(q).__name__
