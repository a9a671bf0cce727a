"""``ConvertResult.stages``: the model after each stage, by name ("quantize", "legalize", "fuse").

Each snapshot holds every weight of the model again (protobuf cannot share bytes between messages),
so keeping them all through ``convert`` multiplied its peak memory. When ``convert`` can read its
source again -- a file (unchanged since: same size and modification time), a ``bytes`` object, or the
QDQ model it quantized itself -- the legalize and fuse snapshots are not kept: the first read of one of
them runs legalize and fuse again on the source with the options and CPU exclusions of the
conversion, which gives the same models (the stages are deterministic; tests/test_convert_memory.py
compares them with kept ones). A ModelProto passed to ``convert`` (the caller may change it
afterwards) keeps its snapshots. Either way ``stages`` reads like the dict it was.
"""
from __future__ import annotations

import os
from typing import Callable, Dict, Iterator, MutableMapping, Optional, Sequence

import onnx

from .errors import MrvlError
from .model_checks import copy_field

Rebuild = Callable[[], Dict[str, onnx.ModelProto]]


class StageSnapshots(MutableMapping):
    """name -> ModelProto; the ``lazy`` names are built by ``rebuild()`` on the first read of one of them."""

    def __init__(self, kept: Optional[Dict[str, onnx.ModelProto]] = None, rebuild: Optional[Rebuild] = None,
                 lazy: Sequence[str] = ()):
        self._kept: Dict[str, onnx.ModelProto] = dict(kept or {})
        self._lazy = [n for n in lazy if n not in self._kept] if rebuild is not None else []
        self._order = list(self._kept) + self._lazy
        self._rebuild = rebuild if self._lazy else None

    def is_kept(self, name: str) -> bool:
        """True when the snapshot ``name`` is in memory (kept, or built by an earlier read)."""
        return name in self._kept

    def with_first(self, name: str, model: onnx.ModelProto) -> "StageSnapshots":
        """A mapping with ``name`` -> ``model`` before these entries (the same lazy ones)."""
        out = StageSnapshots({name: model, **self._kept}, self._rebuild, self._lazy)
        out._order = [name] + [n for n in self._order if n != name]
        return out

    def __getitem__(self, name: str) -> onnx.ModelProto:
        if name not in self._kept and name in self._lazy:
            built = self._rebuild()
            self._kept.update((n, built[n]) for n in self._lazy)
            self._lazy, self._rebuild = [], None
        return self._kept[name]

    def __setitem__(self, name: str, model: onnx.ModelProto) -> None:
        if name in self._lazy:
            self._lazy.remove(name)
        if name not in self._order:
            self._order.append(name)
        self._kept[name] = model

    def __delitem__(self, name: str) -> None:
        if name not in self._order:
            raise KeyError(name)
        self._order.remove(name)
        self._kept.pop(name, None)
        if name in self._lazy:
            self._lazy.remove(name)

    def __contains__(self, name) -> bool:   # without building anything
        return name in self._order

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)

    def __repr__(self) -> str:
        return "StageSnapshots(" + ", ".join(n if n in self._kept else f"{n} (rebuilt on read)"
                                            for n in self._order) + ")"


def source_reader(model) -> Optional[Callable[[], onnx.ModelProto]]:
    """A function that reads the model ``convert`` was given again (None for a ModelProto or a
    bytearray: the caller may change them). A file that changed since raises ``MrvlError``."""
    from .modelio import load_model
    if isinstance(model, bytes):
        return lambda: load_model(model)
    if isinstance(model, (str, os.PathLike)):
        path = os.path.abspath(os.fspath(model))
        try:
            st = os.stat(path)
        except OSError:
            return None   # load_model reports it
        seen = (st.st_size, st.st_mtime_ns)

        def read() -> onnx.ModelProto:
            try:
                now = os.stat(path)
                same = (now.st_size, now.st_mtime_ns) == seen
            except OSError:
                same = False
            if not same:
                raise MrvlError(f"'{path}' changed or went away since convert() read it: the legalize and fuse "
                                f"stages are rebuilt from it on first read and cannot be",
                                hint="convert the model again, and read result.stages before changing the file")
            return load_model(path)
        return read
    return None


class Source:
    """The model ``convert`` starts from; ``reread()`` reads it again (None: it cannot be);
    ``release``: nothing else holds ``model``, so convert may replace it by its structure after legalize."""

    def __init__(self, model: onnx.ModelProto, reread: Optional[Callable[[], onnx.ModelProto]] = None,
                 release: bool = False):
        self.model, self.reread, self.release = model, reread, release

    def hand_over(self) -> onnx.ModelProto:
        """``model``, no longer held here (``model`` becomes its structure: ``structure_only``)."""
        given, self.model = self.model, structure_only(self.model)
        return given


def weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the initializers' values, from their dims and types (no value is read)."""
    total = 0
    for t in model.graph.initializer:
        n = 1
        for d in t.dims:
            n *= d
        total += n * _ITEMSIZE.get(t.data_type, 1)
    return total


_ITEMSIZE = {onnx.TensorProto.DOUBLE: 8, onnx.TensorProto.INT64: 8, onnx.TensorProto.UINT64: 8,
             onnx.TensorProto.COMPLEX128: 16, onnx.TensorProto.COMPLEX64: 8, onnx.TensorProto.FLOAT: 4,
             onnx.TensorProto.INT32: 4, onnx.TensorProto.UINT32: 4, onnx.TensorProto.FLOAT16: 2,
             onnx.TensorProto.BFLOAT16: 2, onnx.TensorProto.INT16: 2, onnx.TensorProto.UINT16: 2}


def has_bodies(model: onnx.ModelProto) -> bool:
    """Whether a node carries a graph attribute (If/Loop/Scan bodies read the graph's initializers)."""
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for n in model.graph.node for a in n.attribute)


def structure_only(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` without its initializers: node names, types and graph outputs."""
    out = onnx.ModelProto()
    for fd, value in model.ListFields():
        if fd.name != "graph":
            copy_field(out, fd, value)
    for fd, value in model.graph.ListFields():
        if fd.name != "initializer":
            copy_field(out.graph, fd, value)
    return out
