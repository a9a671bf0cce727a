"""Model inputs for the tools: seeded random arrays and .npz/.npy input files, in one place."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .errors import UsageError
from .options import close_matches, suggest


def random_array(rng: np.random.Generator, shape: Sequence[int], dtype) -> np.ndarray:
    """Standard-normal floats, 0/1 booleans, small non-negative integers."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(list(shape)).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, list(shape)).astype(bool)
    return rng.integers(0, 4, list(shape)).astype(dtype)


def read_inputs(path: str, names: List[str]) -> Dict[str, np.ndarray]:
    """Arrays for ``names`` from a .npz (by input name, or arr_0, arr_1... in order) or a .npy (one
    input). A missing input, an array that is no input (a typo) or a .npy for several inputs raises
    ``UsageError`` naming the close matches."""
    try:
        if path.endswith(".npy"):
            if len(names) != 1:
                raise UsageError(f"'{path}' holds one array, the model takes {len(names)} inputs {names}",
                                 hint="save the inputs with np.savez(path, **{name: array}) into a .npz")
            arrays = {names[0]: np.load(path, allow_pickle=False)}
        else:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError) as exc:
        raise UsageError(f"cannot read inputs from '{path}' ({exc})",
                         hint="pass an existing .npz (arrays by input name) or .npy (one input)") from None
    feeds, used = {}, set()
    for i, name in enumerate(names):
        key = name if name in arrays else f"arr_{i}"
        if key not in arrays:
            close = close_matches(name, arrays)
            raise UsageError(f"'{path}' has no array for input '{name}' (has {sorted(arrays)})",
                             hint=(f"rename the array {close[0]!r} to {name!r}; " if close else "")
                             + f"name the arrays after the model inputs {names}")
        feeds[name] = arrays[key]
        used.add(key)
    extra = sorted(set(arrays) - used)
    if extra:
        close = suggest(extra, names)
        raise UsageError(f"'{path}' has array(s) {extra} that are no input of the model (inputs: {names})",
                         hint=(close + " " if close else "") + "name the arrays after the model inputs and "
                         "leave out the others")
    return feeds


def check_feeds(feeds: Dict[str, np.ndarray], specs: Sequence[Tuple[str, Sequence, object]],
                what: str = "the inputs") -> None:
    """Each of ``specs`` -- (name, shape with ``None``/str for a symbolic dimension, dtype) -- has an
    array of that rank, static dimensions and dtype in ``feeds``, and ``feeds`` has nothing else."""
    want = [s[0] for s in specs]
    missing = [n for n in want if n not in feeds]
    extra = [n for n in feeds if n not in want]
    if missing or extra:
        raise UsageError(f"{what} do not match the model's inputs {want}: "
                         + "; ".join(p for p in (missing and f"missing {missing}", extra and f"unknown {extra}") if p),
                         hint=(suggest(extra, want) + " " if extra and suggest(extra, want) else "")
                         + "give exactly one array per model input, named after it")
    for name, shape, dtype in specs:
        arr = np.asarray(feeds[name])
        shown = [d if isinstance(d, int) and d >= 0 else "?" for d in shape]
        if arr.ndim != len(shape) or any(isinstance(d, int) and d >= 0 and d != a for d, a in zip(shape, arr.shape)):
            raise UsageError(f"input '{name}' of {what} has shape {list(arr.shape)}, the model takes {shown} "
                             f"('?': any size)", hint=f"save '{name}' with the model's input shape")
        if dtype is not None and arr.dtype != np.dtype(dtype):
            raise UsageError(f"input '{name}' of {what} is {arr.dtype}, the model takes {np.dtype(dtype)}",
                             hint=f"save it as {np.dtype(dtype)}, e.g. np.savez(path, {name}=x.astype(np.{np.dtype(dtype)}))")


def input_mismatches(ours: Sequence[Tuple[str, Sequence, object]], theirs: Sequence[Tuple[str, Sequence, object]],
                     our_name: str = "the converted model", their_name: str = "the reference") -> List[str]:
    """Why two models' inputs -- (name, shape with ``None``/str for a symbolic dimension, dtype) each --
    cannot take the same feeds: names only one has, other dtypes, other ranks or static dimensions."""
    a = {name: (list(shape), dtype) for name, shape, dtype in ours}
    b = {name: (list(shape), dtype) for name, shape, dtype in theirs}
    out = [f"{their_name} has no input '{n}'" for n in a if n not in b]
    out += [f"input '{n}' of {their_name} is no input of {our_name}" for n in b if n not in a]
    for name in [n for n in a if n in b]:
        (s1, t1), (s2, t2) = a[name], b[name]
        if t1 is not None and t2 is not None and np.dtype(t1) != np.dtype(t2):
            out.append(f"input '{name}' is {np.dtype(t2)} in {their_name}, {np.dtype(t1)} in {our_name}")
        elif len(s1) != len(s2) or any(isinstance(x, int) and isinstance(y, int) and x >= 0 and y >= 0 and x != y
                                       for x, y in zip(s1, s2)):
            out.append(f"input '{name}' has shape {s2} in {their_name}, {s1} in {our_name}")
    return out


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
