"""The model binary container: ``pack(meta, weights) -> bytes`` and ``load(data) -> Binary``.

Layout (all integers little-endian; byte-by-byte description in docs/binary-format.md)::

    0   magic  b"MRVLBIN\\0"             8   u16 major, u16 minor
    12  u32 header_size (32)            16  u32 flags
    20  u32 section_count               24  u64 file_size
    32  section table: count x {4s tag, u32 reserved, u64 offset, u64 length}
        ZMET section (1.1, flag bit 0): u64 length of the meta JSON + its zlib stream, 8-aligned
        (META section in 1.0: the canonical JSON (sorted keys, compact, ASCII) uncompressed)
        WGHT section: weight blobs, each 64-byte aligned, zero padding, 64-byte aligned
        zero padding to 8 bytes
    -32 sha256 of every byte before it

This module holds the layout constants, :class:`Binary` and :func:`pack`; :func:`load` (in
reader.py) checks everything before trusting a byte and raises
:class:`~onnx_mrvl.errors.ArtifactError` on any problem. Nothing is executed on load.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, NoReturn, Optional, Tuple, Union

import numpy as np

from ..errors import ArtifactError
from .assemble import deferred, join_with_digest
from .io_quant import IO_QUANT_SINCE, has_io_quant
from .schema import WEIGHT_ALIGN, align_up, validate_meta

log = logging.getLogger(__name__)

MAGIC = b"MRVLBIN\0"
FORMAT_MAJOR = 1
FORMAT_MINOR = 2                          # the newest minor: what pack() writes by default
# 1.1: zlib meta (ZMET); 1.2: + boundary quantization of region inputs/outputs (io_quant.py)
# magic, major, minor, header_size, flags, section_count, file_size
HEADER = struct.Struct("<8sHHIIIQ")
SECTION = struct.Struct("<4sIQQ")         # tag, reserved, offset, length
DIGEST_SIZE = 32                          # sha256
SECTION_ALIGN = 8
MAX_SECTIONS = 64
MAX_HEADER_SIZE = 4096
REQUIRED_FLAGS = 0x0000FFFF               # flag bits a reader must understand to read the file
FLAG_META_ZLIB = 0x00000001               # 1.1: the meta is the zlib-compressed ZMET section
KNOWN_REQUIRED_FLAGS = FLAG_META_ZLIB     # the "must understand" bits this reader knows
TAG_META = b"META"
TAG_ZMETA = b"ZMET"
TAG_WEIGHTS = b"WGHT"
KNOWN_TAGS = {TAG_META: "meta", TAG_ZMETA: "compressed meta", TAG_WEIGHTS: "weights"}
TAGS_SINCE = {TAG_META: 0, TAG_WEIGHTS: 0, TAG_ZMETA: 1}   # the minor that defined each tag
ZMETA_HEAD = struct.Struct("<Q")          # ZMET: u64 length of the JSON, then one zlib stream
ZLIB_LEVEL = 9
MAX_META_SIZE = 64 << 20                  # refuse a meta that decompresses to more than 64 MiB
ZLIB_MAX_RATIO = 1032                     # deflate cannot expand 1 byte into more than ~1032
DEFAULT_MAX_SIZE = 1 << 32                # 4 GiB
MIN_SIZE = HEADER.size + DIGEST_SIZE
WEIGHT_DTYPES = {"float16": np.dtype("<f2"), "float32": np.dtype("<f4"),
                 "int8": np.dtype("i1"), "int32": np.dtype("<i4")}   # int8 layers: kernels, biases

Source = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]"]


def sha256_hex(data: Union[bytes, bytearray, memoryview]) -> str:
    """Hex sha256 of ``data`` (the digest the runtime compares with the Subgraph node attribute)."""
    return hashlib.sha256(data).hexdigest()


def canonical_json(obj: Any) -> bytes:
    """The one byte form of a meta dict: sorted keys, compact separators, ASCII, no NaN."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


@dataclass(frozen=True, repr=False, eq=False)  # compare binaries by .digest
class Binary:
    """A loaded, fully validated model binary; ``weights`` are read-only views into its bytes."""

    meta: Dict[str, Any]
    weights: Dict[str, np.ndarray]
    digest: str                       # hex sha256 of the whole file
    version: Tuple[int, int]          # container format (major, minor)
    size: int                         # bytes

    @property
    def name(self) -> str:
        return self.meta["name"]

    def __repr__(self) -> str:
        return (f"Binary(name={self.name!r}, version={self.version[0]}.{self.version[1]}, "
                f"size={self.size}, layers={len(self.meta['layers'])}, "
                f"weights={len(self.weights)}, digest={self.digest[:16]}...)")


# ----------------------------------------------------------------------------------------- pack
def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray) and obj.dtype.kind in "biuf":
        return obj.tolist()
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serialisable")


def _pack_fail(name: str, message: str) -> NoReturn:
    raise ArtifactError(f"cannot pack program {name!r}: {message}",
                        hint="fix the compile step that produced this program")


def _check_array(name: str, wname: Any, arr: Any) -> np.ndarray:
    if not isinstance(wname, str) or not wname:
        _pack_fail(name, f"weight names must be non-empty strings, got {wname!r}")
    if isinstance(arr, np.generic):
        arr = np.asarray(arr)
    if not isinstance(arr, np.ndarray) and not deferred(arr):
        _pack_fail(name, f"weight {wname!r} is a {type(arr).__name__}, expected a numpy array")
    if arr.dtype.name not in WEIGHT_DTYPES:
        _pack_fail(name, f"weight {wname!r} has dtype {arr.dtype}, only float16, float32, int8 and "
                         f"int32 are stored")
    if arr.dtype != WEIGHT_DTYPES[arr.dtype.name]:
        _pack_fail(name, f"weight {wname!r} is big-endian; convert it with .astype('<f2'/'<f4'/'<i4')")
    return arr


def compress_meta(meta_bytes: bytes) -> bytes:
    """The ZMET section of canonical JSON ``meta_bytes``: u64 length + zlib stream (level 9)."""
    return ZMETA_HEAD.pack(len(meta_bytes)) + zlib.compress(meta_bytes, ZLIB_LEVEL)


def pack(meta: Mapping[str, Any], weights: Mapping[str, np.ndarray], *,
         format_minor: Optional[int] = None) -> bytes:
    """The model-binary bytes of ``meta`` + ``weights``: :func:`pack_sha256` without the digest."""
    return pack_sha256(meta, weights, format_minor=format_minor)[0]


def pack_sha256(meta: Mapping[str, Any], weights: Mapping[str, np.ndarray], *,
                format_minor: Optional[int] = None) -> Tuple[bytes, str]:
    """(the model-binary bytes, the sha256 hex digest of those bytes), the digest taken from the
    hash pack computes for the file's trailer anyway (save's manifest needs no second pass).

    Serialise a program (``meta`` + named float16/float32 arrays) into model-binary bytes. A
    weight may also be a deferred one (``assemble.deferred``: e.g. emit's ``Float16Cast``), written
    straight into the file's bytes.

    By default the oldest format that holds the meta: 1.2 when a region input or output carries
    boundary quantization (io_quant.py), else 1.1 (readers older than 1.2 load it); both store the
    meta JSON zlib-compressed. ``format_minor`` forces one: 2, 1 (refused when the meta has
    boundary quantization) or 0 (a 1.0 file, uncompressed META, that readers older than 1.1 load).
    Deterministic: identical inputs give identical bytes (with the same zlib build). Weights are written in the order of
    ``meta["weights"]`` (built from ``weights`` in insertion order when absent); each entry gets
    ``offset`` and ``nbytes`` relative to the weight section. ``meta`` is not modified. Numpy
    scalars and int/float arrays inside meta are stored as plain numbers / lists. Raises
    :class:`ArtifactError` when the meta is invalid (same checks as :func:`load`) or a weight is
    missing, extra, mis-shaped or of another dtype.
    """
    pname = meta.get("name", "?") if isinstance(meta, Mapping) else "?"
    if format_minor is None:
        format_minor = IO_QUANT_SINCE if isinstance(meta, Mapping) and has_io_quant(meta) else 1
    if format_minor not in (0, 1, 2):
        _pack_fail(pname, f"format_minor must be 0, 1 or 2 (this writer knows 1.0, 1.1 and 1.2), "
                          f"got {format_minor!r}")
    if not isinstance(meta, Mapping):
        _pack_fail(pname, f"meta must be a dict, got {type(meta).__name__}")
    if not isinstance(weights, Mapping):
        _pack_fail(pname, f"weights must be a mapping name -> array, got {type(weights).__name__}")
    try:  # deep copy through JSON: the caller's dict is never modified
        meta = json.loads(json.dumps(meta, allow_nan=False, default=_json_default))
    except (TypeError, ValueError, RecursionError) as exc:
        _pack_fail(pname, f"meta is not JSON-serialisable: {exc}")
    arrays = {k: _check_array(pname, k, v) for k, v in weights.items()}
    entries = meta.get("weights")
    if entries is None:
        entries = meta["weights"] = [{"name": k, "shape": list(a.shape), "dtype": a.dtype.name}
                                     for k, a in arrays.items()]
    if not isinstance(entries, list):
        _pack_fail(pname, f"meta['weights'] must be a list, got {type(entries).__name__}")
    blobs: List[Tuple[int, np.ndarray]] = []
    listed = set()
    offset = 0
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            _pack_fail(pname, f"meta['weights'][{i}] must be an object with a string 'name'")
        wname = entry["name"]
        if wname not in arrays:
            _pack_fail(pname, f"meta['weights'][{i}] names weight {wname!r} but no array was given")
        if wname in listed:
            _pack_fail(pname, f"meta['weights'][{i}]: duplicate weight name {wname!r}")
        listed.add(wname)
        arr = arrays[wname]
        entry.setdefault("shape", list(arr.shape))
        entry.setdefault("dtype", arr.dtype.name)
        if entry["shape"] != list(arr.shape) or entry["dtype"] != arr.dtype.name:
            _pack_fail(pname, f"weight {wname!r}: meta says shape {entry['shape']} dtype "
                              f"{entry['dtype']}, array has shape {list(arr.shape)} dtype "
                              f"{arr.dtype}")
        offset = align_up(offset, WEIGHT_ALIGN)
        entry["offset"], entry["nbytes"] = offset, int(arr.nbytes)
        blobs.append((offset, arr))
        offset += int(arr.nbytes)
    extra = [k for k in arrays if k not in listed]
    if extra:
        _pack_fail(pname, f"weights {extra} are not listed in meta['weights']")
    wsize = offset
    validate_meta(meta, wsize, lambda msg: _pack_fail(pname, msg), format_minor)
    meta_json = canonical_json(meta)
    if format_minor >= 1:
        meta_tag, flags, meta_bytes = TAG_ZMETA, FLAG_META_ZLIB, compress_meta(meta_json)
    else:
        meta_tag, flags, meta_bytes = TAG_META, 0, meta_json

    count = 2
    meta_off = HEADER.size + count * SECTION.size
    wght_off = align_up(meta_off + len(meta_bytes), WEIGHT_ALIGN)
    trailer = align_up(wght_off + wsize, SECTION_ALIGN)
    file_size = trailer + DIGEST_SIZE
    parts: List[Any] = [
        HEADER.pack(MAGIC, FORMAT_MAJOR, format_minor, HEADER.size, flags, count, file_size),
        SECTION.pack(meta_tag, 0, meta_off, len(meta_bytes)),
        SECTION.pack(TAG_WEIGHTS, 0, wght_off, wsize),
        meta_bytes, bytes(wght_off - meta_off - len(meta_bytes)),
    ]
    pos = wght_off
    for off, arr in blobs:
        parts.append(bytes(wght_off + off - pos))
        parts.append(arr if deferred(arr) else np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
        pos = wght_off + off + arr.nbytes
    parts.append(bytes(trailer - pos))
    # the trailer is the sha256 of the parts; the returned digest, the whole file's (the same hash
    # run on over the trailer); the copy and the hash run side by side (assemble.py)
    data, digest = join_with_digest(parts)
    assert len(data) == file_size
    log.debug("packed program %r: format 1.%d, %d bytes (meta %d, %d as JSON; weights %d)",
              pname, format_minor, file_size, len(meta_bytes), len(meta_json), wsize)
    return data, digest


def __getattr__(attr: str) -> Any:  # ``format.load`` lives in reader.py (kept apart for size)
    if attr == "load":
        from .reader import load
        return load
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")

