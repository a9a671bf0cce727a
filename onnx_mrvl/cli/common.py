"""Helpers shared by the subcommands: input files, random inputs, shapes, progress."""
from __future__ import annotations

import sys
import time
from typing import Dict, List, Optional

import numpy as np

from ..errors import ModelError
from ..feeds import random_array, read_inputs

ORT_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
             "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
             "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


def parse_input_shapes(specs: Optional[List[str]]) -> Optional[Dict[str, List[int]]]:
    """``["x:1,3,224,224", ...]`` -> ``{"x": [1, 3, 224, 224]}``."""
    if not specs:
        return None
    out = {}
    for spec in specs:
        name, sep, dims = spec.rpartition(":")
        if not sep or not name:
            raise ModelError(f"--input-shape '{spec}' is not NAME:D1,D2,...", hint="e.g. --input-shape x:1,3,224,224")
        try:
            out[name] = [int(d) for d in dims.replace("x", ",").split(",") if d]
        except ValueError:
            raise ModelError(f"--input-shape '{spec}' has a dimension that is not an integer") from None
    return out


def random_inputs(session, seed: int = 0) -> Dict[str, np.ndarray]:
    """Seeded inputs for every input of an onnxruntime session (symbolic dims become 1)."""
    rng = np.random.default_rng(seed)
    return {i.name: random_array(rng, [d if isinstance(d, int) and d > 0 else 1 for d in i.shape],
                                 ORT_TYPES.get(i.type, np.float32)) for i in session.get_inputs()}


def load_inputs(path: str, session) -> Dict[str, np.ndarray]:
    """Inputs from .npz (by name, or arr_0... in order) or .npy (a single input)."""
    return read_inputs(path, [i.name for i in session.get_inputs()])


def error_stats(ref: np.ndarray, got: np.ndarray) -> dict:
    ref64, got64 = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    if ref64.shape != got64.shape:
        return {"shape_mismatch": [list(ref64.shape), list(got64.shape)]}
    diff = np.abs(ref64 - got64)
    scale = float(np.max(np.abs(ref64))) if ref64.size else 0.0
    return {"max_abs": float(diff.max()) if diff.size else 0.0,
            "max_rel": float(diff.max() / scale) if diff.size and scale > 0 else 0.0,
            "ref_max_abs": scale}


class Progress:
    """Stage progress on stderr (only when stderr is a terminal or verbose is asked for)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        if self.enabled:
            print(f"[{time.perf_counter() - self.t0:7.2f}s] {msg}", file=sys.stderr, flush=True)
