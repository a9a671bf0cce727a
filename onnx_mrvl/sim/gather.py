"""Program layer GatherElements (docs/program.md): ``y = take_along_axis(x, indices, axis)`` on the
stored tensor with a constant int32 index table (broadcast along the leading axes stored as 1).
An indexed copy: fp16 values move unchanged (exact)."""
from __future__ import annotations

import numpy as np


def build_gather_elements(spec, n_inputs: int):
    if n_inputs != 1:
        raise spec.error(f"takes 1 input, the program gives {n_inputs}")
    try:
        axis = int(spec.param("axis", required=True))
        out_shape = [int(d) for d in spec.param("index_shape", required=True)]
    except (TypeError, ValueError):
        raise spec.error(f"axis and index_shape must be integers, got {spec.params}") from None
    idx = np.asarray(spec.weight("indices", required=True))
    if idx.dtype.kind not in "iu" or idx.ndim != len(out_shape) or \
            any(i not in (1, o) for i, o in zip(idx.shape, out_shape)):
        raise spec.error(f"index table {idx.dtype} {list(idx.shape)} does not broadcast to {out_shape}")
    full = np.broadcast_to(idx.astype(np.intp), out_shape)

    def run(x):
        if x.ndim != len(out_shape) or not 0 <= axis < x.ndim or \
                any(o > d for k, (o, d) in enumerate(zip(out_shape, x.shape)) if k != axis):
            raise ValueError(f"index table {out_shape} along axis {axis} does not fit an input of shape {list(x.shape)}")
        if full.size and int(full.max()) >= x.shape[axis]:
            raise ValueError(f"index {int(full.max())} beyond axis {axis} of size {x.shape[axis]}")
        src = x[tuple(slice(0, o) if k != axis else slice(None) for k, o in enumerate(out_shape))]
        return np.take_along_axis(src, full, axis=axis), True
    return run
