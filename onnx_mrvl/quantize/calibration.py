"""Calibration data for ``convert(..., quantize="int8", calibration=...)``: read, checked against the
model's inputs, and handed to onnxruntime's quantizer as a ``CalibrationDataReader``.

Accepted forms (each sample is one feed: ``{input name: array of the input's shape}``):

- an iterable of feed dicts (a list, a generator, a ``CalibrationDataReader``-like iterator);
- a ``.npz`` file: arrays named after the model inputs (``arr_0``, ``arr_1``... in input order also
  work). An array of the input's rank is **one sample**; an array of one more dimension is a
  **stack of samples** along a new leading axis (all inputs the same count);
- a ``.npy`` file (a single-input model): one sample or a stack, by the same rank rule;
- a folder: every ``.npz`` and ``.npy`` in it (sorted by name), each read as above.
"""
from __future__ import annotations

import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import helper

from ..errors import UsageError
from ..feeds import check_feeds, read_inputs

FORMS = ("an iterable of feed dicts {input name: array}, a .npz / .npy file (one sample, or samples "
         "stacked along a new leading axis), or a folder of such files")
MAX_SAMPLES = 10000


def input_specs(model: onnx.ModelProto, shapes: Optional[Dict[str, Sequence[int]]] = None
                ) -> List[Tuple[str, list, object]]:
    """(name, shape with None for a symbolic dimension, numpy dtype) of every true graph input;
    ``shapes`` (the user's ``input_shapes``) replaces a declared shape."""
    inits = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = list((shapes or {}).get(vi.name) or [
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim])
        try:
            dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        except (KeyError, ValueError):
            dtype = None
        out.append((vi.name, shape, dtype))
    return out


def _samples_of_file(path: str, names: List[str], ranks: Dict[str, int]) -> List[Dict[str, np.ndarray]]:
    arrays = read_inputs(path, names)        # UsageError for unreadable files, missing / unknown arrays
    stacked = {n: a.ndim == ranks[n] + 1 for n, a in arrays.items()}
    if not any(stacked.values()):
        return [arrays]
    if not all(stacked.values()):
        raise UsageError(f"calibration file '{path}' mixes stacked and single-sample arrays "
                         f"({', '.join(f'{n}: {list(a.shape)}' for n, a in arrays.items())})",
                         hint="give every input the same leading sample axis, or none")
    counts = {n: a.shape[0] for n, a in arrays.items()}
    if len(set(counts.values())) != 1:
        raise UsageError(f"calibration file '{path}' stacks different sample counts per input {counts}",
                         hint="stack the same number of samples for every input")
    return [{n: a[i] for n, a in arrays.items()} for i in range(next(iter(counts.values())))]


def _from_path(path: str, names: List[str], ranks: Dict[str, int]) -> List[Dict[str, np.ndarray]]:
    if os.path.isdir(path):
        files = sorted(f for f in os.listdir(path) if f.endswith((".npz", ".npy")))
        if not files:
            raise UsageError(f"calibration folder '{path}' holds no .npz or .npy file",
                             hint="save one sample per file with np.savez(f, **{input name: array})")
        out = []
        for f in files:
            out.extend(_samples_of_file(os.path.join(path, f), names, ranks))
        return out
    if not os.path.exists(path):
        raise UsageError(f"calibration data '{path}' does not exist", hint=f"pass {FORMS}")
    if not path.endswith((".npz", ".npy")):
        raise UsageError(f"calibration data '{path}' is not a .npz / .npy file or a folder", hint=f"pass {FORMS}")
    return _samples_of_file(path, names, ranks)


def _from_iterable(data: Iterable) -> List[Dict[str, np.ndarray]]:
    if isinstance(data, dict):
        raise UsageError("calibration is one feed dict, not an iterable of samples",
                         hint="pass a list of feed dicts, e.g. [feed] or [feed1, feed2, ...]")
    try:
        it = iter(data)
    except TypeError:
        raise UsageError(f"calibration is a {type(data).__name__}", hint=f"pass {FORMS}") from None
    out = []
    for i, sample in enumerate(it):
        if not isinstance(sample, dict):
            raise UsageError(f"calibration sample {i} is a {type(sample).__name__}, not a dict of input arrays",
                             hint="yield {input name: numpy array} per sample")
        out.append({str(k): np.asarray(v) for k, v in sample.items()})
        if len(out) > MAX_SAMPLES:
            raise UsageError(f"calibration yields more than {MAX_SAMPLES} samples (an endless generator?)",
                             hint="pass a finite iterable; a few hundred samples are plenty")
    return out


def load_calibration(data, model: onnx.ModelProto, shapes: Optional[Dict[str, Sequence[int]]] = None
                     ) -> Tuple[List[Dict[str, np.ndarray]], str]:
    """The samples of ``data`` checked against ``model``'s inputs (names, ranks, static dimensions,
    dtypes, finite values), and a short description of where they came from. ``UsageError`` otherwise."""
    specs = input_specs(model, shapes)
    names = [s[0] for s in specs]
    ranks = {s[0]: len(s[1]) for s in specs}
    if data is None:
        raise UsageError("quantizing to int8 needs calibration data (activation ranges are measured on it)",
                         hint=f"pass calibration=... ({FORMS}); on the command line --calibration DATA")
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        samples, source = _from_path(path, names, ranks), os.path.abspath(path)
    else:
        samples, source = _from_iterable(data), f"{type(data).__name__} of feed dicts"
    if not samples:
        raise UsageError("the calibration data holds no sample", hint=f"pass at least one sample: {FORMS}")
    for i, feed in enumerate(samples):
        check_feeds(feed, specs, f"calibration sample {i}")
        for name, arr in feed.items():
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                raise UsageError(f"input '{name}' of calibration sample {i} holds NaN or inf values",
                                 hint="calibrate on finite, representative inputs")
    return samples, source


class FeedReader:
    """onnxruntime's ``CalibrationDataReader`` protocol (``get_next``, ``rewind``) over a list of feeds."""

    def __init__(self, samples: List[Dict[str, np.ndarray]]):
        self.samples, self.i = samples, 0

    def get_next(self):
        if self.i >= len(self.samples):
            return None
        self.i += 1
        return self.samples[self.i - 1]

    def rewind(self) -> None:
        self.i = 0

    def __iter__(self):
        return iter(self.samples)

    def __len__(self):
        return len(self.samples)
