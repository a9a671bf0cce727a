"""Input and output files of the simulator command (in the spirit of Marvell's mrvl-mlsim).

Inputs: ``.npy`` (one input), ``.npz`` (by input name, or ``arr_0``, ``arr_1``... in order) or
``.bin`` (the raw little-endian float32 concatenation of all inputs in order; sizes come from the
program). Outputs: per output ``<prefix>-<i>.bin`` (raw float32) and ``<prefix>-<i>.npy``.
"""
from __future__ import annotations

import os
from typing import Dict, List, Sequence

import numpy as np

from ..errors import MrvlRuntimeError


def _fail(path: str, msg: str, hint: str) -> MrvlRuntimeError:
    return MrvlRuntimeError(f"inputs file '{path}': {msg}", hint=hint)


def read_inputs(path: str, names: Sequence[str], shapes: Sequence[Sequence[int]]) -> List[np.ndarray]:
    """Read the inputs of a program (``names`` / ``shapes`` in meta order) from ``path``."""
    names, shapes = list(names), [[int(d) for d in s] for s in shapes]
    if not os.path.isfile(path):
        raise _fail(path, "no such file", "pass an existing .npy, .npz or .bin file")
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext == ".npy":
            if len(names) != 1:
                raise _fail(path, f"a .npy holds one array, the program takes {len(names)} inputs {names}",
                            "use .npz (by input name) or .bin (all inputs concatenated)")
            arrays = [np.load(path, allow_pickle=False)]
        elif ext == ".npz":
            with np.load(path, allow_pickle=False) as z:
                files = list(z.files)
                if all(n in files for n in names):
                    arrays = [z[n] for n in names]
                elif all(f"arr_{i}" in files for i in range(len(names))):
                    arrays = [z[f"arr_{i}"] for i in range(len(names))]
                else:
                    raise _fail(path, f"holds {files}, expected the inputs {names} (or arr_0..arr_{len(names) - 1})",
                                "save the arrays under the input names")
        elif ext == ".bin":
            arrays = _split_bin(path, names, shapes)
        else:
            raise _fail(path, f"unknown extension {ext!r}", "use .npy, .npz or .bin (raw float32)")
    except (OSError, ValueError) as exc:
        raise _fail(path, f"cannot be read ({exc})", "check the file") from None
    out = []
    for name, shape, a in zip(names, shapes, arrays):
        a = np.asarray(a)
        if not np.issubdtype(a.dtype, np.floating):
            raise _fail(path, f"input {name!r} has dtype {a.dtype}, expected float32", "save float32 arrays")
        if list(a.shape) != shape:
            raise _fail(path, f"input {name!r} has shape {list(a.shape)}, expected {shape}",
                        "save the shape the region was compiled for")
        out.append(np.ascontiguousarray(a, dtype=np.float32))
    return out


def _split_bin(path: str, names: List[str], shapes: List[List[int]]) -> List[np.ndarray]:
    sizes = [int(np.prod(s)) for s in shapes]
    nbytes = os.path.getsize(path)
    if nbytes != 4 * sum(sizes):
        detail = ", ".join(f"{n} {s} = {4 * k} bytes" for n, s, k in zip(names, shapes, sizes))
        raise _fail(path, f"has {nbytes} bytes, expected {4 * sum(sizes)} (float32: {detail})",
                    "write all inputs as raw float32 in program order")
    flat = np.fromfile(path, dtype="<f4")
    out, pos = [], 0
    for shape, k in zip(shapes, sizes):
        out.append(flat[pos:pos + k].reshape(shape))
        pos += k
    return out


def write_outputs(prefix: str, outputs: Sequence[np.ndarray]) -> List[str]:
    """Write ``<prefix>-<i>.bin`` (raw little-endian float32) and ``<prefix>-<i>.npy``; return the paths."""
    d = os.path.dirname(prefix)
    if d:
        os.makedirs(d, exist_ok=True)
    paths = []
    for i, y in enumerate(outputs):
        y = np.ascontiguousarray(y, dtype="<f4")
        p_bin, p_npy = f"{prefix}-{i}.bin", f"{prefix}-{i}.npy"
        y.tofile(p_bin)
        np.save(p_npy, y)
        paths += [p_bin, p_npy]
    return paths


def output_stats(names: Sequence[str], outputs: Sequence[np.ndarray]) -> List[Dict]:
    """Shape, min, max, mean of each output (NaN-safe)."""
    rows = []
    for name, y in zip(names, outputs):
        with np.errstate(all="ignore"):
            fin = y[np.isfinite(y)]
            rows.append({"name": str(name), "shape": list(y.shape),
                         "min": float(fin.min()) if fin.size else float("nan"),
                         "max": float(fin.max()) if fin.size else float("nan"),
                         "mean": float(fin.mean()) if fin.size else float("nan"),
                         "non_finite": int(y.size - fin.size)})
    return rows
