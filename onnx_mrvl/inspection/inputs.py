"""The reference model's random inputs for ``compare``: their shapes, and the seeded arrays.

A symbolic input dimension takes, in order: the size ``--input-shape`` gives, the converted model's
static size for it (``convert --input-shape`` fixed it there), or 1 when it is the first (batch)
dimension. Any other symbolic dimension is a ``UsageError`` asking for ``--input-shape``: random
inputs of size 1 crash models whose sides must be multiples of 32.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import onnx

from ..errors import UsageError
from ..feeds import random_feeds as _random_feeds


def random_feeds(model: onnx.ModelProto, seed: int = 0,
                 shapes: Optional[Mapping[str, Sequence[int]]] = None) -> Dict[str, np.ndarray]:
    """Seeded inputs for every true graph input (standard normal floats) of the shapes ``shapes``
    gives (``feed_shapes``); without ``shapes``, symbolic dims are 1."""
    return _random_feeds(model, seed, None if shapes is None else {k: list(v) for k, v in shapes.items()})


def _declared(model: onnx.ModelProto) -> Dict[str, List[Any]]:
    """Input name -> declared dims (int, or the symbol / None of a symbolic dimension)."""
    inits = {t.name for t in model.graph.initializer}
    return {vi.name: [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None)
                      for d in vi.type.tensor_type.shape.dim]
            for vi in model.graph.input if vi.name not in inits}


def feed_shapes(ma: onnx.ModelProto, mb: Optional[onnx.ModelProto] = None,
                given: Optional[Mapping[str, Sequence[int]]] = None) -> Dict[str, List[int]]:
    """The input shapes of A's random feeds: ``given`` (checked against A's declared shapes), else
    each symbolic dimension from B's static input shape, else 1 for a first (batch) dimension.
    Raises ``UsageError`` for an unknown name, a rank or static size ``given`` contradicts, or a
    symbolic non-batch dimension nothing fixes."""
    decl = _declared(ma)
    b_decl = _declared(mb) if mb is not None else {}
    given = dict(given or {})
    unknown = [n for n in given if n not in decl]
    if unknown:
        raise UsageError(f"--input-shape names {unknown}, which are not inputs of the reference model "
                         f"{sorted(decl)}", hint="use the input names of A.onnx")
    out: Dict[str, List[int]] = {}
    for name, dims in decl.items():
        if name in given:
            shape = [int(d) for d in given[name]]
            if len(shape) != len(dims) or any(isinstance(d, int) and d != s for d, s in zip(dims, shape)) \
                    or any(s < 1 for s in shape):
                shown = [d if isinstance(d, int) else (d or "?") for d in dims]
                raise UsageError(f"--input-shape {name}:{','.join(map(str, shape))} does not fit input "
                                 f"'{name}' of the reference model, declared {shown}",
                                 hint="give every dimension, positive, equal to the static ones")
            out[name] = shape
            continue
        other = b_decl.get(name) or []
        shape, open_dims = [], []
        for i, d in enumerate(dims):
            if isinstance(d, int):
                shape.append(d)
            elif len(other) == len(dims) and isinstance(other[i], int):
                shape.append(other[i])          # the size the converted model was built for
            elif i == 0:
                shape.append(1)                 # a symbolic batch dimension: batch 1
            else:
                shape.append(1)
                open_dims.append(f"{i} ({d or '?'})")
        if open_dims:
            raise UsageError(f"input '{name}' has symbolic dimension(s) {', '.join(open_dims)} that neither "
                             f"model fixes, and random inputs need a size",
                             hint=f"pass --input-shape {name}:" + ",".join(
                                 str(d) if isinstance(d, int) else f"<{d or '?'}>" for d in dims)
                             + " with a size for each <dimension> (e.g. 224 for an image side), or "
                               "--inputs with real arrays")
        out[name] = shape
    for name, shape in out.items():
        other = b_decl.get(name)
        if other is not None and (len(other) != len(shape) or any(
                isinstance(d, int) and d != s for d, s in zip(other, shape))):
            shown = [d if isinstance(d, int) else (d or "?") for d in other]
            raise UsageError(f"input '{name}' of shape {shape} does not fit the converted model, "
                             f"which takes {shown}",
                             hint="compare with the input shape the model was converted for "
                                  "(convert --input-shape), or convert it again for this one")
    return out
