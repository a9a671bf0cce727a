"""A legalized model in a new protobuf arena when most of the source's weights died.

Protobuf (upb) frees a parsed model's memory only as a whole: an initializer deleted from it keeps
its bytes until the model goes, and any reference to one of its parts keeps all of it. When
legalize consumes the model (``consume=True``) and its rewrites replaced most of the weights (a
BatchNormalization folded into every Conv makes new Conv weights and leaves the old ones dead),
``Graph.commit`` builds the output in a new ModelProto instead: the structure and the surviving
initializers are copied there, the new weights are written there, and the source's arena is freed
with the last reference to it. The serialized model is the same either way.
"""
from __future__ import annotations

from typing import Dict, Iterable, Set

import onnx
from onnx import helper

from .shapes import declared_as_input


def tensor_bytes(t: onnx.TensorProto) -> int:
    """Bytes of ``t``'s values from its dims and type (no value is read)."""
    n = 1
    for d in t.dims:
        n *= d
    try:
        size = helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        size = 1
    return n * size


def worth_it(initializers: Iterable[onnx.TensorProto], keep: Set[str], min_dead: int) -> bool:
    """Whether more of the initializers' bytes die (their names not in ``keep``) than survive, and at
    least ``min_dead`` bytes (a new arena costs a copy of the survivors). False with duplicate names
    (which of them survives is the in-place path's business)."""
    dead = kept = 0
    names = set()
    for t in initializers:
        if t.name in names:
            return False
        names.add(t.name)
        if t.name in keep:
            kept += tensor_bytes(t)
        else:
            dead += tensor_bytes(t)
    return dead > kept and dead >= min_dead


def rebuilt(model: onnx.ModelProto, keep: Set[str]) -> onnx.ModelProto:
    """A new ModelProto: ``model`` without nodes, and of its initializers those named in ``keep``,
    in their order. ``model``'s initializer list is emptied (what is left of it is not to be used)."""
    kept = []
    for t in model.graph.initializer:
        if t.name in keep:
            copy = onnx.TensorProto()
            copy.CopyFrom(t)
            kept.append(copy)
    del model.graph.initializer[:]
    del model.graph.node[:]
    out = onnx.ModelProto()
    out.CopyFrom(model)   # every other field, unknown ones too: the structure only (small)
    kept.reverse()
    while kept:   # each standalone copy goes once copied in
        out.graph.initializer.add().CopyFrom(kept.pop())
    return out


def detached(inits: Dict[str, onnx.TensorProto], model: onnx.ModelProto, standalone: Set[str]) -> None:
    """Point ``inits`` (name -> TensorProto) at ``model``'s initializers, and the other names but
    the ``standalone`` ones (tensors of their own already) at standalone tensors, so that nothing
    refers into an earlier model: a tensor shape inference declares as a graph input keeps name,
    type and dims (the values of a dead initializer are not read again); any other is copied."""
    live = {t.name: t for t in model.graph.initializer}
    for name, t in list(inits.items()):
        if name in standalone:
            continue
        if name in live:
            inits[name] = live[name]
            continue
        if declared_as_input(t):
            stub = onnx.TensorProto(name=t.name, data_type=t.data_type)
            stub.dims.extend(t.dims)
        else:
            stub = onnx.TensorProto()
            stub.CopyFrom(t)
        inits[name] = stub
