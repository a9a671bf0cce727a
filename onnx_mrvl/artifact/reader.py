"""Loading a model binary: ``load(data_or_path) -> Binary``, validating every byte first.

Order of checks (docs/binary-format.md): size limit, magic, format version, file size, sha256
digest, header fields, section table, meta (zlib stream of 1.1 within its declared length, UTF-8,
JSON, schema, canonical form), weight padding. Reads formats 1.0 (uncompressed META) and 1.1.
Every failure raises :class:`~onnx_mrvl.errors.ArtifactError` naming the field, the value found
and what was expected. Nothing is executed and nothing larger than the file is allocated.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import stat
import zlib
from typing import Any, Dict, NoReturn, Optional, Tuple

import numpy as np

from ..errors import ArtifactError
from .format import (DEFAULT_MAX_SIZE, DIGEST_SIZE, FLAG_META_ZLIB, FORMAT_MAJOR, FORMAT_MINOR,
                     HEADER, KNOWN_REQUIRED_FLAGS, KNOWN_TAGS, MAGIC, MAX_HEADER_SIZE,
                     MAX_META_SIZE, MAX_SECTIONS, MIN_SIZE, REQUIRED_FLAGS, SECTION, SECTION_ALIGN,
                     TAG_META, TAG_WEIGHTS, TAG_ZMETA, TAGS_SINCE, WEIGHT_DTYPES, ZLIB_MAX_RATIO,
                     ZMETA_HEAD, Binary, Source, canonical_json)
from .schema import WEIGHT_ALIGN, align_up, validate_meta

log = logging.getLogger(__name__)
INFLATE_CHUNK = 1 << 20


class _Reader:
    """Raises ArtifactError messages prefixed with what is being read."""

    def __init__(self, label: str):
        self.label = label

    def fail(self, message: str, hint: Optional[str] = None) -> NoReturn:
        raise ArtifactError(f"{self.label}: {message}",
                            hint=hint or "recompile the model (onnx_mrvl convert) to regenerate "
                                         "the binary")


def _label(name: Optional[str], path: Optional[str]) -> str:
    if name and path:
        return f"model binary {name!r} ({path})"
    if name or path:
        return f"model binary {(name or path)!r}"
    return "model binary"


def _read_source(data: Any, max_size: int, name: Optional[str]) -> Tuple[memoryview, str]:
    if isinstance(data, (str, os.PathLike)):
        try:
            path = os.fspath(data)
        except TypeError as exc:
            raise ArtifactError(f"invalid model binary path {data!r}: {exc}") from exc
        r = _Reader(_label(name, str(path)))
        try:
            mode = os.stat(path).st_mode        # before open(): opening a FIFO would block
            if stat.S_ISDIR(mode):
                r.fail(f"is a directory, not a file: {path}", hint="pass the path of the .bin file")
            if not stat.S_ISREG(mode):
                r.fail(f"not a regular file: {path}", hint="pass the path of the .bin file")
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size > max_size:
                    r.fail(f"file has {size} bytes, more than max_size={max_size}",
                           hint="pass a larger max_size to load() if this file is trusted")
                raw = f.read(size + 1)          # +1: a file that grew is caught by the checks
        except FileNotFoundError:
            r.fail(f"file not found: {path}", hint="check the path, or recompile the model")
        except OSError as exc:
            r.fail(f"cannot read {path}: {exc.strerror or exc}", hint="check file permissions")
        return memoryview(raw), r.label
    label = _label(name, None)
    if isinstance(data, bytes):
        return memoryview(data), label
    if isinstance(data, (bytearray, memoryview)):
        mv = memoryview(data)
        if not mv.c_contiguous:
            _Reader(label).fail("buffer is not contiguous", hint="pass bytes")
        return mv.cast("B").toreadonly(), label
    raise ArtifactError(f"{label}: cannot load from a {type(data).__name__}; pass bytes, "
                        f"bytearray, memoryview, or a file path")


def load(data: Source, *, max_size: int = DEFAULT_MAX_SIZE, name: Optional[str] = None) -> Binary:
    """Load and validate a model binary from bytes-like data or a file path (read once).

    ``name`` (e.g. the region name) prefixes error messages. Files larger than ``max_size`` are
    refused before being read. Raises :class:`ArtifactError` for anything wrong; the returned
    weights are read-only views into the buffer (no copies). A mutable buffer (bytearray) passed
    in must not be modified afterwards: the views would see the change.
    """
    if not isinstance(max_size, int) or max_size < 0:
        raise ArtifactError(f"load(): max_size must be a non-negative int, got {max_size!r}")
    mv, label = _read_source(data, max_size, name)
    reader = _Reader(label)
    try:
        return _parse(mv, reader, max_size)
    except ArtifactError:
        raise
    except Exception as exc:  # defence in depth: the checks above should make this unreachable
        log.exception("unexpected error while validating %s", label)
        raise ArtifactError(f"{label}: unexpected error while validating "
                            f"({type(exc).__name__}: {exc})",
                            hint="the file is malformed; please report this as an onnx_mrvl "
                                 "bug") from exc


def _zero(mv: memoryview, start: int, end: int) -> bool:
    return end <= start or not np.frombuffer(mv, np.uint8, end - start, start).any()


def _header(mv: memoryview, r: _Reader, max_size: int) -> Tuple[int, int, int, int]:
    n = len(mv)
    if n > max_size:
        r.fail(f"{n} bytes, more than max_size={max_size}",
               hint="pass a larger max_size to load() if this file is trusted")
    if n == 0:
        r.fail("empty file (0 bytes)")
    if n < len(MAGIC) and MAGIC.startswith(bytes(mv)):
        r.fail(f"truncated: {n} bytes, shorter than the {HEADER.size}-byte header")
    if bytes(mv[:8]) != MAGIC:
        r.fail(f"bad magic {bytes(mv[:8])!r}, expected {MAGIC!r}: not an onnx_mrvl model binary",
               hint="pass the .bin file written by onnx_mrvl")
    if n < HEADER.size:
        r.fail(f"truncated: {n} bytes, shorter than the {HEADER.size}-byte header")
    _, major, minor, hsize, flags, count, fsize = HEADER.unpack_from(mv, 0)
    if major > FORMAT_MAJOR:
        r.fail(f"format version {major}.{minor} was written by a newer onnx_mrvl (this reader "
               f"supports {FORMAT_MAJOR}.x), upgrade onnx_mrvl",
               hint="upgrade onnx_mrvl, or recompile the model with this version")
    if major < FORMAT_MAJOR:
        r.fail(f"format version {major}.{minor} is not supported (this reader supports "
               f"{FORMAT_MAJOR}.x)")
    if fsize > n:
        r.fail(f"truncated: the header says the file has {fsize} bytes but it has {n}")
    if fsize < n:
        r.fail(f"{n - fsize} unexpected bytes after the end of the file: the header says the file "
               f"has {fsize} bytes but it has {n}")
    if n < MIN_SIZE:
        r.fail(f"truncated: {n} bytes, shorter than header + digest ({MIN_SIZE} bytes)")
    return minor, hsize, flags, count


def _sections(mv: memoryview, r: _Reader, minor: int, hsize: int, flags: int,
              count: int) -> Dict[bytes, Tuple[int, int]]:
    n = len(mv)
    body_end = n - DIGEST_SIZE
    newer = minor > FORMAT_MINOR
    if hsize < HEADER.size or hsize > MAX_HEADER_SIZE or hsize % SECTION_ALIGN:
        r.fail(f"header_size {hsize} is invalid (expected a multiple of {SECTION_ALIGN} between "
               f"{HEADER.size} and {MAX_HEADER_SIZE})")
    if hsize != HEADER.size and not newer:
        r.fail(f"header_size {hsize}, expected {HEADER.size} for format 1.{minor}")
    if flags & REQUIRED_FLAGS & ~KNOWN_REQUIRED_FLAGS:
        r.fail(f"flags 0x{flags:08x} ask for features this reader does not know: written by a "
               f"newer onnx_mrvl, upgrade", hint="upgrade onnx_mrvl")
    zmeta = bool(flags & FLAG_META_ZLIB)
    if minor == 0 and flags:
        r.fail(f"flags 0x{flags:08x}, expected 0 for format 1.0")
    if minor >= 1 and not zmeta and not newer:
        r.fail(f"flags 0x{flags:08x}: format 1.{minor} stores the meta compressed (flag bit 0 and a "
               f"ZMET section); a file with an uncompressed meta is format 1.0")
    if flags & ~REQUIRED_FLAGS and not newer:
        r.fail(f"flags 0x{flags:08x}: optional bits 16-31 are set, expected 0 for format "
               f"1.{minor}")
    meta_tag = TAG_ZMETA if zmeta else TAG_META
    other_meta = TAG_META if zmeta else TAG_ZMETA
    if count < 1 or count > MAX_SECTIONS:
        r.fail(f"section count {count} is out of range (expected 1..{MAX_SECTIONS})")
    table_end = hsize + count * SECTION.size
    if table_end > body_end:
        r.fail(f"truncated: the section table ({count} entries) ends at byte {table_end} but the "
               f"data ends at byte {body_end}")
    if not _zero(mv, HEADER.size, hsize):
        r.fail("unknown header extension bytes are not zero")
    found: Dict[bytes, Tuple[int, int]] = {}
    spans = []
    for i in range(count):
        tag, reserved, off, length = SECTION.unpack_from(mv, hsize + i * SECTION.size)
        what = f"section {i} {KNOWN_TAGS.get(tag, tag.decode('latin-1'))!r}"
        if TAGS_SINCE.get(tag, minor + 1) > minor and not newer:
            r.fail(f"{what}: unknown section tag {tag!r} (format 1.{minor} defines "
                   f"{sorted(t.decode() for t, v in TAGS_SINCE.items() if v <= minor)})")
        if tag == other_meta:
            r.fail(f"{what}: flag bit 0 is {int(zmeta)}, so the meta must be in a {meta_tag!r} "
                   f"section, not {tag!r}")
        if tag in found:
            r.fail(f"{what}: duplicate section tag {tag!r}")
        if reserved:
            r.fail(f"{what}: reserved field is {reserved}, expected 0")
        if off > body_end or length > body_end - off:
            r.fail(f"truncated: {what} claims {length} bytes at offset {off} but the file has "
                   f"{n} bytes ({body_end} before the digest)")
        align = WEIGHT_ALIGN if tag == TAG_WEIGHTS else SECTION_ALIGN
        if off % align:
            r.fail(f"{what}: offset {off} is not {align}-byte aligned")
        if off < table_end:
            r.fail(f"{what}: offset {off} overlaps the header and section table (which end at "
                   f"byte {table_end})")
        if tag == TAG_WEIGHTS and meta_tag not in found:
            r.fail(f"{what}: the meta section must be listed before the weights section")
        found[tag] = (off, length)
        spans.append((off, length, align, what))
    for tag in (meta_tag, TAG_WEIGHTS):
        if tag not in found:
            r.fail(f"missing required section {tag!r} ({KNOWN_TAGS[tag]})")
    prev_start, prev_end, prev_what = 0, table_end, "the section table"
    for off, length, align, what in spans:  # table order must be file order
        if off < prev_start:
            r.fail(f"{what} at offset {off} is listed after {prev_what} at offset {prev_start}: "
                   f"the section table must list sections in file order")
        if off < prev_end:
            r.fail(f"{what} [{off}, {off + length}) overlaps {prev_what} which ends at byte "
                   f"{prev_end}")
        if off - prev_end >= align:
            r.fail(f"{what}: {off - prev_end} bytes of gap before offset {off} (expected less "
                   f"than {align} bytes of alignment padding)")
        if not _zero(mv, prev_end, off):
            r.fail(f"padding before {what} is not zero")
        prev_start, prev_end, prev_what = off, off + length, what
    if body_end != align_up(prev_end, SECTION_ALIGN):
        r.fail(f"{body_end - prev_end} bytes between the last section (ends at {prev_end}) and "
               f"the digest at {body_end}, expected padding to the next {SECTION_ALIGN}-byte "
               f"boundary")
    if not _zero(mv, prev_end, body_end):
        r.fail("padding before the digest is not zero")
    return found


def _inflate(mv: memoryview, r: _Reader, off: int, length: int) -> bytes:
    """The meta JSON bytes of a ZMET section: u64 declared length, then exactly one zlib stream.

    Bomb limits: the declared length is at most MAX_META_SIZE and what the stream's size can
    hold; zlib never produces more than declared + 1 bytes; every zlib error is ArtifactError.
    """
    what = "compressed meta (ZMET section)"
    if length < ZMETA_HEAD.size + 2:
        r.fail(f"{what} has {length} bytes, too short for its {ZMETA_HEAD.size}-byte length "
               f"field and a zlib stream")
    declared, = ZMETA_HEAD.unpack_from(mv, off)
    stream = mv[off + ZMETA_HEAD.size:off + length]
    if declared > MAX_META_SIZE:
        r.fail(f"{what} declares {declared} bytes of JSON, more than the limit of "
               f"{MAX_META_SIZE} bytes (a decompression bomb?)")
    if declared > ZLIB_MAX_RATIO * len(stream):
        r.fail(f"{what} declares {declared} bytes of JSON, more than {len(stream)} bytes of zlib "
               f"data can hold")
    d = zlib.decompressobj(wbits=15)            # zlib format: header + adler32, no gzip, no raw
    chunks, total = [], 0
    while not d.eof:                            # in chunks: a bomb stops at declared + 1 bytes
        try:
            out = d.decompress(stream, min(INFLATE_CHUNK, declared + 1 - total))
        except zlib.error as exc:
            r.fail(f"{what} is not valid zlib data ({exc})")
        chunks.append(out)
        total += len(out)
        if total > declared:
            r.fail(f"{what} decompresses to more than the {declared} bytes it declares")
        if not out and len(d.unconsumed_tail) == len(stream):
            break                               # input used up, the stream has not ended
        stream = d.unconsumed_tail
    if not d.eof:
        r.fail(f"{what} is truncated: the zlib stream does not end ({total} of {declared} "
               f"bytes decompressed)")
    if d.unused_data:
        r.fail(f"{what}: {len(d.unused_data)} bytes after the end of the zlib stream")
    if total != declared:
        r.fail(f"{what} decompresses to {total} bytes but declares {declared}")
    return b"".join(chunks)


def _meta(raw: bytes, r: _Reader) -> dict:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        r.fail(f"meta is not valid UTF-8 (byte {exc.start} of the meta section: {exc.reason})")

    def pairs(items):
        obj = {}
        for k, v in items:
            if k in obj:
                raise ValueError(f"duplicate key {k!r}")
            obj[k] = v
        return obj

    def constant(word):
        raise ValueError(f"{word} is not allowed")

    def number(word):
        value = float(word)
        if not math.isfinite(value):
            raise ValueError(f"number {word[:20]} is out of range")
        return value

    try:
        meta = json.loads(text, object_pairs_hook=pairs, parse_constant=constant,
                          parse_float=number)
    except json.JSONDecodeError as exc:
        r.fail(f"meta is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    except ValueError as exc:
        r.fail(f"meta is not valid JSON: {exc}")
    except RecursionError:
        r.fail("meta JSON is nested too deeply")
    if not isinstance(meta, dict):
        r.fail(f"meta must be a JSON object, got {type(meta).__name__}")
    return meta


def _parse(mv: memoryview, r: _Reader, max_size: int) -> Binary:
    minor, hsize, flags, count = _header(mv, r, max_size)
    n = len(mv)
    body = hashlib.sha256(mv[:n - DIGEST_SIZE])
    stored = bytes(mv[n - DIGEST_SIZE:])
    if body.digest() != stored:
        r.fail(f"sha256 digest mismatch (stored {stored.hex()[:16]}..., computed "
               f"{body.hexdigest()[:16]}...): the file is corrupted or was modified")
    whole = body.copy()
    whole.update(stored)
    found = _sections(mv, r, minor, hsize, flags, count)
    woff, wlen = found[TAG_WEIGHTS]
    if TAG_ZMETA in found:
        raw = _inflate(mv, r, *found[TAG_ZMETA])
    else:
        moff, mlen = found[TAG_META]
        raw = bytes(mv[moff:moff + mlen])
    meta = _meta(raw, r)
    slots = validate_meta(meta, wlen, lambda msg: r.fail(msg), min(minor, FORMAT_MINOR))
    try:
        canonical = canonical_json(meta)
    except (ValueError, RecursionError) as exc:
        r.fail(f"meta cannot be re-serialised: {exc}")
    if canonical != raw:
        r.fail("meta JSON is not in canonical form (sorted keys, compact separators, ASCII)")
    weights: Dict[str, np.ndarray] = {}
    prev_end = 0
    for wname, dtype, shape, off, nbytes in slots:
        if not _zero(mv, woff + prev_end, woff + off):
            r.fail(f"padding before weight {wname!r} in the weight section is not zero")
        dt = WEIGHT_DTYPES[dtype]
        arr = np.frombuffer(mv, dt, nbytes // dt.itemsize, woff + off).reshape(shape)
        if arr.flags.writeable:
            arr.flags.writeable = False
        weights[wname] = arr
        prev_end = off + nbytes
    return Binary(meta=meta, weights=weights, digest=whole.hexdigest(),
                  version=(FORMAT_MAJOR, minor), size=n)

