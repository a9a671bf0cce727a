"""Large float weights of a model file read once, without protobuf's copy (``convert`` of a path).

upb copies every ``bytes`` field it parses, and again each time Python reads one (``raw_data``):
a 575 MB model touched 1150 MB of new memory (VGG-19: parse 0.46 + ``numpy_helper.to_array``
0.70 CPU s). ``parse`` instead finds, by a walk over the wire format (``ModelProto.graph`` 7 ->
``GraphProto.initializer`` 5 -> ``TensorProto.raw_data`` 9), each plain float initializer of at
least ``MIN_TENSOR`` bytes (only name, dims, data_type FLOAT and one raw_data), reads its
payload once (``os.pread``) into a ``bytes`` object of its own (immutable, aligned: what
``to_array`` gives), and parses the file without those payloads (VGG-19 fuse 0.85 -> 0.25 CPU s). Each such tensor is *held*: its ``raw_data`` is absent
and it is marked as external data at ``HELD`` (a location with a NUL byte: onnx's readers fail on
it rather than read anything), with the file offset of its payload and this load's key.

``array(t)`` is the array of any tensor (a held one: a read-only view of its payload, no copy);
``restore(model)`` writes the payloads back into a model's held tensors (the message is then the
one the file holds); ``prune`` drops the payloads no live model refers to, ``release`` all of a
load's (a tensor still held by it can then no longer be read: ``ModelError``). A model with
If/Loop/Scan bodies is given back whole (restored). ``convert`` (pipeline.py) does all of it.
"""
from __future__ import annotations

import itertools
import os
import sys
from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import numpy_helper

from google.protobuf.message import DecodeError

from .errors import ModelError
from .wire_sizes import Unreadable, all_fields

MIN_TENSOR = 1 << 16   # payload bytes: above shapes.LIGHT_LIMIT elements (never serialised for shape inference)
MIN_FILE = 1 << 26   # bytes: smaller model files are parsed whole (ONNX_MRVL_FILE_WEIGHTS_MIN: another size)
try:
    MIN_FILE = int(os.environ.get("ONNX_MRVL_FILE_WEIGHTS_MIN") or MIN_FILE)
except ValueError:
    pass
HELD = "\0onnx_mrvl:held"
_KEY = "onnx_mrvl_held"
_PLAIN_FIELDS = {1, 2, 8, 9}   # TensorProto dims, data_type, name, raw_data
_FLOAT = onnx.TensorProto.FLOAT
_held: Dict[str, Dict[int, bytes]] = {}   # load key -> file offset -> payload
_keys = itertools.count()


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _plain_payload(buf, start: int, end: int) -> Optional[Tuple[int, int]]:
    """(start, end) of the raw_data of the TensorProto ``buf[start:end]`` when it is a plain float
    tensor of at least MIN_TENSOR bytes; else None."""
    seen: List[int] = []
    payload = None
    for num, kind, _, value, pos in all_fields(buf, start, end):
        if num not in _PLAIN_FIELDS or (num == 1 and kind not in (0, 2)):
            return None
        if num in (2, 8, 9) and num in seen:
            return None
        seen.append(num)
        if num == 2 and (kind != 0 or value != _FLOAT):
            return None
        if num in (8, 9) and kind != 2:
            return None
        if num == 9:
            payload = (value, pos)
    if payload is None or 2 not in seen or payload[1] - payload[0] < MIN_TENSOR:
        return None
    return payload


def _split(buf) -> Optional[Tuple[bytes, List[Tuple[int, int, int]]]]:
    """The serialized model without the payloads of its plain large float initializers, and
    (initializer index, payload start, payload end) of each; None when there is none, the graph
    field occurs more than once or the walk meets something it does not follow."""
    graphs = [f for f in all_fields(buf, 0, len(buf)) if f[0] == 7]
    if len(graphs) != 1 or graphs[0][1] != 2:
        return None
    _, _, gkey, gstart, gend = graphs[0]
    body: List[bytes] = []
    found: List[Tuple[int, int, int]] = []
    index = 0
    for num, kind, start, value, pos in all_fields(buf, gstart, gend):
        payload = _plain_payload(buf, value, pos) if num == 5 and kind == 2 else None
        if payload is None:
            body.append(buf[start:pos])
        else:
            tensor = b"".join(buf[s:e] for n, _, s, _, e in all_fields(buf, value, pos) if n != 9)
            body += [b"\x2a", _encode_varint(len(tensor)), tensor]
            found.append((index, payload[0], payload[1]))
        index += num == 5
    if not found:
        return None
    graph = b"".join(body)
    return b"".join((buf[:gkey], b"\x3a", _encode_varint(len(graph)), graph, buf[gend:])), found


def parse(buf, read=None) -> Optional[Tuple[onnx.ModelProto, List[int], list]]:
    """The model in ``buf`` (a buffer of the whole file) without the payloads of its large float
    weights, the raw_data length of every initializer (-1: none), and (initializer index, file
    offset, payload) of each weight to ``hold``; None when there is none (parse the file whole).
    ``read(offset, n)``: the file's bytes there (``os.pread``: the kernel copies them into the new
    ``bytes``, cheaper than a copy out of the map, VGG-19 0.47 -> 0.39 CPU s); else copied from ``buf``."""
    if sys.byteorder != "little" or len(buf) < MIN_FILE:
        return None
    try:
        split = _split(buf)
    except (Unreadable, IndexError):
        return None
    if split is None:
        return None
    skeleton, found = split
    proto = onnx.ModelProto()
    proto.ParseFromString(skeleton)
    sizes = [len(t.raw_data) if t.HasField("raw_data") else -1 for t in proto.graph.initializer]
    for index, start, end in found:
        sizes[index] = end - start
    pending = []
    for index, start, end in found:
        data = read(start, end - start) if read is not None else bytes(buf[start:end])
        if len(data) != end - start:   # the file shrank meanwhile
            raise DecodeError(f"the model file ended within the raw data of initializer {index}")
        pending.append((index, start, data))
    return proto, sizes, pending


def hold(model: onnx.ModelProto, pending: list) -> None:
    """Mark ``parse``'s weights held in ``model`` (module doc); a tensor whose dims do not match
    its payload, or any of a model with If/Loop/Scan bodies, gets its payload back instead."""
    key = f"{os.getpid()}.{next(_keys)}"
    payloads: Dict[int, bytes] = {}
    inits = model.graph.initializer
    bodies = any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                 for n in model.graph.node for a in n.attribute)
    for index, start, data in pending:
        t = inits[index]
        if bodies or any(d < 0 for d in t.dims) or int(np.prod(t.dims, dtype=np.int64)) * 4 != len(data):
            t.raw_data = data   # as parsed whole (the checker reports a wrong size)
            continue
        payloads[start] = data
        t.data_location = onnx.TensorProto.EXTERNAL
        for k, v in (("location", HELD), ("offset", str(start)), ("length", str(len(data))), (_KEY, key)):
            e = t.external_data.add()
            e.key, e.value = k, v
    pending.clear()
    if payloads:
        _held[key] = payloads


def _marked(t: onnx.TensorProto) -> bool:
    return t.data_location == onnx.TensorProto.EXTERNAL and bool(t.external_data) and t.external_data[0].value == HELD


def _where(t: onnx.TensorProto) -> Optional[Tuple[str, int]]:
    """(load key, file offset) of a held tensor; None for any other (one given raw_data besides its
    mark is not held: onnx's readers fail on its location)."""
    if not _marked(t) or t.HasField("raw_data"):
        return None
    ext = {e.key: e.value for e in t.external_data}
    return ext.get(_KEY, ""), int(ext.get("offset", -1))


def is_held(t: onnx.TensorProto) -> bool:
    return _where(t) is not None


def _payload(t: onnx.TensorProto) -> bytes:
    key, offset = _where(t)
    data = _held.get(key, {}).get(offset)
    if data is None:
        raise ModelError(f"the values of initializer '{t.name}' were released before they were read",
                         hint="report this model (an internal error of onnx_mrvl)")
    return data


def array(t: onnx.TensorProto) -> np.ndarray:
    """``numpy_helper.to_array(t)``; of a held tensor, a read-only view of its payload."""
    if not is_held(t):
        return numpy_helper.to_array(t)
    return np.frombuffer(_payload(t), dtype=np.float32).reshape(tuple(t.dims))


def nbytes(t: onnx.TensorProto) -> int:
    """The length of a held tensor's payload."""
    return len(_payload(t))


def _tensors(graph: onnx.GraphProto):
    """Every TensorProto of ``graph``: its initializers, tensor attributes and bodies' (recursively)."""
    yield from graph.initializer
    for n in graph.node:
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from _tensors(a.g)
            for g in a.graphs:
                yield from _tensors(g)


def restore(model: Optional[onnx.ModelProto]) -> None:
    """Write the payloads back into ``model``'s held tensors (the message becomes the file's)."""
    if model is None or not _held:
        return
    for t in _tensors(model.graph):
        if _marked(t):
            if t.HasField("raw_data"):
                raise ModelError(f"initializer '{t.name}' was written over while its values were held",
                                 hint="report this model (an internal error of onnx_mrvl)")
            data = _payload(t)
            t.ClearField("data_location")
            del t.external_data[:]
            t.raw_data = data


def inline(model: onnx.ModelProto) -> onnx.ModelProto:
    """The serialization boundary: ``model`` as anything outside convert's own code must see it
    (onnxruntime, onnx.reference, onnx.checker, shape inference, a file): ``model`` itself when it
    holds no tensor, else a copy with the payloads written back. Every hand-off of a model (or a
    copy of one) passes here or through ``serialized`` (tests/test_file_weights.py scans for others)."""
    if not _held or not any(map(_marked, _tensors(model.graph))):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    restore(copy)
    return copy


def serialized(model: onnx.ModelProto, deterministic: bool = False) -> bytes:
    """``model.SerializeToString()`` of ``inline(model)``: the bytes the file's model would give."""
    return inline(model).SerializeToString(deterministic=deterministic)


def keys(model: onnx.ModelProto) -> set:
    return {w[0] for w in map(_where, _tensors(model.graph)) if w is not None}


def release(key_set) -> None:
    """Drop the payloads of the loads ``key_set``."""
    for key in key_set:
        _held.pop(key, None)


def prune(key_set, *models: Optional[onnx.ModelProto]) -> None:
    """Drop the payloads of the loads ``key_set`` that no held initializer of ``models`` (all the
    models that may still read them) refers to."""
    if not key_set:
        return
    live = {w for m in models if m is not None for w in map(_where, _tensors(m.graph)) if w is not None}
    for key in key_set:
        payloads = _held.get(key, {})
        for offset in [o for o in payloads if (key, o) not in live]:
            del payloads[offset]
