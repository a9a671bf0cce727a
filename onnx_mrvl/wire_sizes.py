"""The byte length of every graph initializer's ``raw_data``, read from the serialized model.

upb hands a ``bytes`` field to Python only as a copy (``len(t.raw_data)`` copies the weight), so
``validate_model`` asking each initializer for its length copied the whole model again (VGG-19:
0.3 CPU s). The model's bytes, read for parsing anyway, say the lengths: a walk over the protobuf
wire format of ``ModelProto.graph`` (field 7) -> ``GraphProto.initializer`` (field 5) ->
``TensorProto.raw_data`` (field 9) that skips every other field by its length and copies nothing.
"""
from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

MIN_BYTES = 1 << 24   # smaller models are not walked: copying their weights costs less than the walk
_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA = 7, 5, 9


class Unreadable(Exception):
    """The bytes hold something the walk does not follow."""


def varint(buf, pos: int) -> Tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise Unreadable


def all_fields(buf, pos: int, end: int) -> Iterator[Tuple[int, int, int, int, int]]:
    """(field number, wire type, start of its key, its value (a varint's value; a length-delimited
    field's start), end) of each field in ``buf[pos:end]``."""
    while pos < end:
        start = pos
        key, pos = varint(buf, pos)
        kind, value = key & 7, pos
        if kind == 0:
            value, pos = varint(buf, pos)
        elif kind == 1:
            pos += 8
        elif kind == 5:
            pos += 4
        elif kind == 2:
            n, value = varint(buf, pos)
            pos = value + n
        else:   # groups (deprecated) or garbage: not followed
            raise Unreadable
        yield key >> 3, kind, start, value, pos
    if pos != end:
        raise Unreadable


def _fields(buf: bytes, pos: int, end: int) -> Iterator[Tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field in ``buf[pos:end]``."""
    for num, kind, _, value, stop in all_fields(buf, pos, end):
        if kind == 2:
            yield num, value, stop


def raw_data_sizes(data: bytes) -> Optional[List[int]]:
    """The ``raw_data`` length of each initializer of ``graph`` in the serialized ModelProto ``data``,
    in order (-1: the tensor has no raw_data); None when ``data`` is below ``MIN_BYTES`` or holds
    something this walk does not follow (the caller then asks the parsed model)."""
    if len(data) < MIN_BYTES:
        return None
    sizes: List[int] = []
    try:
        for num, start, end in _fields(data, 0, len(data)):
            if num != _MODEL_GRAPH:
                continue
            for gnum, gstart, gend in _fields(data, start, end):   # (several graph fields merge: in order)
                if gnum != _GRAPH_INITIALIZER:
                    continue
                size = -1
                for tnum, tstart, tend in _fields(data, gstart, gend):
                    if tnum == _TENSOR_RAW_DATA:
                        size = tend - tstart   # the last occurrence wins, as in parsing
                sizes.append(size)
    except (Unreadable, IndexError):
        return None
    return sizes
