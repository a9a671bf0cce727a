"""The program's weights as the Simulator holds them: stored arrays, float32 on demand.

The binary stores fp16 weights (plus int8 kernels and int32 biases of int8 layers). A layer
builder reads ``weights[name]`` and gets a new float32 array of the same values (exact); the
large kernels (Conv2D, FC) read ``stored(name)`` and lay the fp16 values out themselves. No
float32 copy of the whole weight set is kept: only the layouts the kernels built
(docs/simulator.md "Load")."""
from __future__ import annotations

from typing import Any, Iterator, Mapping

import numpy as np

_KEEP = (np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.float32))


class StoredWeights(Mapping):
    """name -> float32 array (a new one per read of a float16 weight; float32, int8 and int32
    weights as stored). ``stored(name)`` is the array as stored."""

    def __init__(self, weights: Mapping[str, Any]):
        self._stored = {name: np.asarray(w) for name, w in (weights or {}).items()}

    def __getitem__(self, name: str) -> np.ndarray:
        a = self._stored[name]
        return a if a.dtype in _KEEP else a.astype(np.float32)

    def stored(self, name: str) -> np.ndarray:
        return self._stored[name]

    def __contains__(self, name) -> bool:
        return name in self._stored

    def __iter__(self) -> Iterator[str]:
        return iter(self._stored)

    def __len__(self) -> int:
        return len(self._stored)

    def nbytes(self) -> int:
        """Bytes of the stored arrays (views into the binary count their own size)."""
        return sum(int(a.nbytes) for a in self._stored.values())
