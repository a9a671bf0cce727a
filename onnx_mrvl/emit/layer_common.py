"""What the program-layer builders share: the build context (constants, weight store, batch),
shape and padding helpers, the activation names."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np

from ..array_minmax import over_bytes
from .fp16_cast import MIN_SIZE, Float16Cast, to_float16, to_float16_checked
from .json_attrs import NodeAttrs, decode_const

ACTIVATIONS = ("none", "relu", "clamp", "leaky_relu", "prelu", "sigmoid", "tanh", "hard_sigmoid",
               "hard_swish", "silu", "gelu", "gelu_tanh", "elu", "mish", "erf", "softplus", "sqrt", "log")
PERMS = {("NCHW", "NHWC"): (0, 2, 3, 1), ("NHWC", "NCHW"): (0, 3, 1, 2)}


@dataclass
class Context:
    """What a layer needs beyond its node: constants, the weight store, the batch change."""
    consts: dict
    json_batch: int
    batch: Optional[int]          # --batch N, or None
    weights: Dict[str, np.ndarray]
    wmeta: List[dict]
    defer: bool = False           # large fp16 weights cast where pack stores them (Float16Cast)

    def weight(self, a: NodeAttrs, name: str, arr: np.ndarray, layout: str, fp16: bool, shape=None) -> str:
        """Store ``arr`` (any strides: one cast writes it C-contiguous) as fp16 or fp32, reshaped to
        ``shape`` when given; values that are not finite in that dtype are refused. Integer arrays
        (an int8 layer's int8 kernel and int32 bias) keep their dtype. With ``defer``, a large
        float32 array over immutable memory (a view of ``bytes``) to store as fp16 is kept as a
        :class:`Float16Cast` (its values are checked as pack casts them into the binary: the same
        error, raised there)."""
        overflow = f"weight '{name}' has values that are not finite in {'fp16' if fp16 else 'fp32'}"
        hint = "keep this layer on the CPU (convert(..., exclude=[...]))"
        if (self.defer and fp16 and isinstance(arr, np.ndarray) and arr.dtype == np.float32
                and arr.size >= MIN_SIZE and over_bytes(arr)   # values that cannot change until pack
                and (shape is None or int(np.prod(shape, dtype=np.int64)) == arr.size)):
            data, finite = Float16Cast(arr, shape, lambda: a.fail(overflow, hint=hint)), True
        elif arr.dtype.kind in "iu":
            data = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("="))
            finite = True
        elif fp16 and isinstance(arr, np.ndarray) and arr.dtype == np.float32:
            with np.errstate(over="ignore", invalid="ignore"):
                data, finite = to_float16_checked(arr)   # checked block by block as cast (finite_in)
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                data = to_float16(arr) if fp16 and isinstance(arr, np.ndarray) else \
                    np.ascontiguousarray(arr, dtype=np.float16 if fp16 else np.float32)
            finite = data.dtype.kind != "f" or finite_in(arr, data, fp16)
        if not finite:
            a.fail(overflow, hint=hint)
        if shape is not None and isinstance(data, np.ndarray):
            data = data.reshape(shape)
        self.weights[name] = data
        self.wmeta.append({"name": name, "shape": list(data.shape), "dtype": str(data.dtype), "layout": layout})
        return name


FP16_LIMIT = 65520.0  # float32 values of at least this magnitude round to inf in float16


def finite_in(src, data: np.ndarray, fp16: bool) -> bool:
    """All of ``data`` (``src`` cast to fp16/fp32) finite; for a float32 source checked through
    its min and max (a float32 rounds to a finite fp16 exactly when its magnitude is below 65520)."""
    if data.size == 0:
        return True
    if fp16 and isinstance(src, np.ndarray) and src.dtype == np.float32:
        lo, hi = src.min(), src.max()   # NaN propagates
        return bool(-FP16_LIMIT < lo and hi < FP16_LIMIT)
    return bool(np.all(np.isfinite(data)))


def fit_rank(shape: List[int], rank: int) -> List[int]:
    """Undo TVM's padding of a shape to 4 dims (trailing 1s) and leading 1s, down to ``rank``."""
    s = list(shape)
    while len(s) > rank and s[-1] == 1:
        s.pop()
    while len(s) > rank and s[0] == 1:
        s.pop(0)
    return s


def squeeze_lead(arr: np.ndarray, rank: int) -> np.ndarray:
    while arr.ndim > rank and arr.shape[0] == 1:
        arr = arr[0]
    return arr


def padding4(a: NodeAttrs) -> List[int]:
    """[top, left, bottom, right]; Relay also allowed [p] and [ph, pw]."""
    p = a.ints("padding", [0, 0, 0, 0])
    if len(p) == 1:
        p = p * 4
    elif len(p) == 2:
        p = p * 2
    if len(p) != 4:
        a.fail(f"attribute 'padding' has {len(p)} values, expected 4 ([top, left, bottom, right])")
    return p


def vector(a: NodeAttrs, ctx: Context, key: str, size: int, what: str, integer=None) -> np.ndarray:
    v = decode_const(ctx.consts, a.str(key), a, integer).reshape(-1)
    if v.size != size:
        a.fail(f"{what} has {v.size} values for {size} channels")
    return v


