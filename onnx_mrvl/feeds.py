"""Model inputs for the tools: seeded random arrays and .npz/.npy input files, in one place."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

from .errors import ModelError


def random_array(rng: np.random.Generator, shape: Sequence[int], dtype) -> np.ndarray:
    """Standard-normal floats, 0/1 booleans, small non-negative integers."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(list(shape)).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, list(shape)).astype(bool)
    return rng.integers(0, 4, list(shape)).astype(dtype)


def read_inputs(path: str, names: List[str]) -> Dict[str, np.ndarray]:
    """Arrays for ``names`` from a .npz (by input name, or arr_0, arr_1... in order) or a .npy (one input)."""
    try:
        if path.endswith(".npy"):
            arrays = {names[0]: np.load(path, allow_pickle=False)}
        else:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read inputs from '{path}' ({exc})", hint="use .npz (by input name) or .npy") from None
    feeds = {}
    for i, name in enumerate(names):
        key = name if name in arrays else f"arr_{i}"
        if key not in arrays:
            raise ModelError(f"'{path}' has no array for input '{name}' (has {sorted(arrays)})",
                             hint="name the arrays after the model inputs")
        feeds[name] = arrays[key]
    return feeds


def random_feeds(model, seed: int = 0, shapes: Optional[Dict[str, Sequence[int]]] = None) -> Dict[str, np.ndarray]:
    """Seeded arrays (``random_array``) for every true graph input of an ONNX model: ``shapes[name]``
    when given, else the declared shape with symbolic or unknown dimensions as 1."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = (shapes or {}).get(vi.name) or [
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tt.shape.dim]
        try:
            dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        except KeyError:   # not a plain tensor type
            dtype = np.float32
        feeds[vi.name] = random_array(rng, shape, dtype)
    return feeds
