"""Reading a Nodes-JSON node and the Constants-JSON, whoever wrote them.

Accepts every spelling TVM's Marvell integration and onnx_mrvl use for an attribute value:
a list of strings (``["1", "1"]``, TVM after post-processing), the same list wrapped once more
(``[["1", "1"]]``, TVM's raw JSON graph), a bare string or number. Every error names the node
and its original ONNX nodes.
"""
from __future__ import annotations

import binascii
from typing import List, Optional

import numpy as np

from ..errors import CompileError

from .const_entry import ConstEntry  # noqa: E402,F401 - read by decode_const, made by const_json

HINT = "the Nodes-JSON / Constants-JSON must follow docs/json-format.md"


def unwrap(v):
    """[["a", "b"]] -> ["a", "b"]; ["a"] -> "a"; anything else unchanged."""
    while isinstance(v, list) and len(v) == 1 and isinstance(v[0], list):
        v = v[0]
    if isinstance(v, list) and len(v) == 1 and not isinstance(v[0], (list, dict)):
        return v[0]
    return v


def to_number(x):
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, (int, float)):
        return x
    s = str(x).strip()
    if s.lower() in ("true", "false"):  # booleans as some writers print them
        return int(s.lower() == "true")
    try:
        return int(s)
    except ValueError:
        return float(s)


def _origin_of(raw: dict) -> List[str]:
    v = raw.get("origin_nodes")
    if v is None:
        return []
    while isinstance(v, list) and len(v) == 1 and isinstance(v[0], list):
        v = v[0]
    if isinstance(v, list):
        return [str(o) for o in v]
    return [str(v)]


class NodeAttrs:
    """Typed access to one node's ``attrs``; ``fail`` raises CompileError naming the node."""

    def __init__(self, node: dict, index: int):
        raw = node.get("attrs") if isinstance(node, dict) else None
        self.raw = raw if isinstance(raw, dict) else {}
        self.name = str(node.get("name", f"node {index}")) if isinstance(node, dict) else f"node {index}"
        self.origin = _origin_of(self.raw)

    def has(self, key: str) -> bool:
        v = self.raw.get(key)
        return v is not None and v != [] and v != {} and v != [[]]

    def first(self, *keys: str) -> Optional[str]:
        """The first of ``keys`` the node has (spellings of one attribute), or None."""
        return next((k for k in keys if self.has(k)), None)

    def str(self, key: str, default: Optional[str] = None) -> str:
        if not self.has(key):
            if default is None:
                self.fail(f"missing attribute '{key}'")
            return default
        v = unwrap(self.raw[key])
        if isinstance(v, (list, dict)):
            self.fail(f"attribute '{key}' should be one string, not {self.raw[key]!r}")
        return str(v)

    def ints(self, key: str, default=None, n: Optional[int] = None) -> List[int]:
        if not self.has(key):
            if default is None:
                self.fail(f"missing attribute '{key}'")
            return list(default)
        v = unwrap(self.raw[key])
        v = v if isinstance(v, list) else [v]
        try:
            out = [int(to_number(x)) for x in v]
        except (TypeError, ValueError):
            self.fail(f"attribute '{key}' is not a list of integers: {self.raw[key]!r}")
        if n is not None and len(out) != n:
            self.fail(f"attribute '{key}' has {len(out)} values, expected {n}")
        return out

    def floats(self, key: str) -> List[float]:
        v = unwrap(self.raw[key]) if self.has(key) else self.fail(f"missing attribute '{key}'")
        try:
            return [float(to_number(x)) for x in (v if isinstance(v, list) else [v])]
        except (TypeError, ValueError):
            self.fail(f"attribute '{key}' is not a list of numbers: {self.raw[key]!r}")

    def int(self, key: str, default: Optional[int] = None) -> int:
        return self.ints(key, None if default is None else [default], 1)[0]

    def float(self, key: str, default: Optional[float] = None) -> float:
        if not self.has(key):
            if default is None:
                self.fail(f"missing attribute '{key}'")
            return float(default)
        try:
            return float(to_number(unwrap(self.raw[key])))
        except (TypeError, ValueError):
            self.fail(f"attribute '{key}' is not a number: {self.raw[key]!r}")

    def fail(self, msg: str, hint: str = HINT):
        raise CompileError(msg, node=self.name, origin=self.origin, hint=hint)


INT_CONST_DTYPES = ("int8", "uint8", "int32")   # int8 layers: kernels, int32 biases (docs/json-format.md)


def decode_const(consts: dict, name: str, a: NodeAttrs, integer: Optional[str] = None) -> np.ndarray:
    """The float32 array of constant ``name``; checks its bytes against its shape and dtype.
    ``integer`` ("int8", "int32"): the constant must have that integer dtype and is returned as it is."""
    if name not in consts:
        a.fail(f"constant '{name}' is not in the Constants-JSON")
    c = consts[name]
    if not isinstance(c, dict):
        a.fail(f"constant '{name}' is not an object with shape, dtype and data_base64")
    for key in ("shape", "data_base64"):
        if key not in c:
            a.fail(f"constant '{name}' has no '{key}'")
    try:
        shape = [int(to_number(d)) for d in c["shape"]]
        dtype = np.dtype(str(c.get("dtype", "float32"))).newbyteorder("<")
        raw = c.known_bytes() if isinstance(c, ConstEntry) else None
        if raw is None:
            data = c["data_base64"]
            raw = binascii.a2b_base64(data.encode("ascii") if isinstance(data, str) else bytes(data),
                                      strict_mode=True)
    except (TypeError, ValueError, binascii.Error) as exc:
        a.fail(f"constant '{name}' is malformed ({exc})")
    if integer is not None:
        if dtype.name != integer:
            a.fail(f"constant '{name}' has dtype {c.get('dtype')} ({integer} expected for an int8 layer)")
    elif dtype.kind != "f" or dtype.itemsize not in (2, 4, 8):
        a.fail(f"constant '{name}' has dtype {c.get('dtype')} (float32 expected)")
    if any(d < 0 for d in shape):
        a.fail(f"constant '{name}' has a negative dimension in shape {shape}")
    n = int(np.prod(shape, dtype=np.int64))
    if n * dtype.itemsize != len(raw):
        a.fail(f"constant '{name}' has {len(raw)} bytes but shape {shape} of {dtype.name} needs "
               f"{n * dtype.itemsize}")
    arr = np.frombuffer(raw, dtype=dtype).reshape(shape)
    if integer is not None:
        return arr
    return arr if dtype == np.dtype("<f4") else arr.astype(np.float32)
