"""A model binary's bytes from ``pack``'s parts, with the sha256 the format puts in its trailer.

The trailer (the file's last 32 bytes) is the sha256 of everything before it, so ``b"".join`` of
the parts had to wait for the hash: both passes over the weights (VGG-19: 287 MB) ran one after
the other on one core. Here the new ``bytes`` object is made empty (CPython's
``PyBytes_FromStringAndSize(NULL, n)``, the way C code builds one), the parts are copied into it in
blocks over the cores while the hash reads them on another thread, and the digest goes last; the
object is handed out only once full. A deferred part (a weight cast straight into the bytes: no
float16 copy of the weights is made first) is hashed there once written. Elsewhere than CPython,
or for a small file, ``b"".join``.
"""
from __future__ import annotations

import ctypes
import hashlib
import queue
import sys
import threading
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from .. import blocks

DIGEST_SIZE = 32
PARALLEL_MIN = 1 << 24   # bytes: smaller files are joined (the hand-offs cost more than they save)
COPY_BLOCK = 1 << 24     # bytes copied per block
_API: List[Any] = []


def _api():
    """(PyBytes_FromStringAndSize, PyBytes_AsString) through ctypes, or None off CPython."""
    if not _API:
        fns = None
        if sys.implementation.name == "cpython":
            try:
                new = ctypes.pythonapi.PyBytes_FromStringAndSize
                new.argtypes, new.restype = [ctypes.c_char_p, ctypes.c_ssize_t], ctypes.py_object
                address = ctypes.pythonapi.PyBytes_AsString
                address.argtypes, address.restype = [ctypes.py_object], ctypes.c_void_p
                fns = (new, address)
            except (AttributeError, OSError):
                fns = None
        _API.append(fns)
    return _API[0]


def _empty_bytes(size: int) -> Optional[Tuple[bytes, np.ndarray]]:
    """A new ``bytes`` object of ``size`` bytes not yet written, and a writable view of its memory
    (to be dropped before the object is handed out); None where this cannot be done."""
    api = _api()
    if api is None or size < 2:   # sizes 0 and 1 are shared singletons
        return None
    new, address = api
    data = new(None, size)
    if type(data) is not bytes or len(data) != size:
        return None
    memory = (ctypes.c_char * size).from_address(address(data))
    return data, np.frombuffer(memory, np.uint8)


def deferred(part: Any) -> bool:
    """Whether ``part`` is a deferred part: an object with ``nbytes``, ``shape``, ``dtype`` and
    ``write_into(out)`` that fills the C-contiguous uint8 array ``out`` of ``nbytes`` (a weight cast
    straight into the file: emit/fp16_cast.py ``Float16Cast``; it may raise)."""
    return not isinstance(part, (bytes, bytearray, np.ndarray)) and callable(getattr(part, "write_into", None))


def _made(part: Any) -> Any:
    """A deferred part written into a new array; any other part as it is."""
    if not deferred(part):
        return part
    out = np.empty(part.nbytes, np.uint8)
    part.write_into(out)
    return out


def join_with_digest(parts: Sequence[Any]) -> Tuple[bytes, str]:
    """(``b"".join(parts) + d``, the sha256 hex digest of those bytes), where ``d`` is the sha256
    digest of ``b"".join(parts)``. ``parts``: bytes, contiguous uint8 arrays (read only), or
    deferred parts (:func:`deferred`), written straight into the new bytes and hashed there."""
    h = hashlib.sha256()
    size = sum(p.nbytes if deferred(p) or isinstance(p, np.ndarray) else len(p) for p in parts) + DIGEST_SIZE
    made = _empty_bytes(size) if size >= PARALLEL_MIN and blocks.workers() > 1 else None
    if made is None:
        parts = [_made(p) for p in parts]
        for p in parts:
            h.update(p)
        digest = h.digest()
        h.update(digest)
        return b"".join([*parts, digest]), h.hexdigest()
    data, out = made
    # the hash reads, in file order, each given part at once and each deferred part once written
    # (a thread of its own: the copies and casts below may use every pool thread)
    ready: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
    failed: List[BaseException] = []

    def hash_parts() -> None:
        while True:
            p = ready.get()
            if p is None:
                return
            if not failed:
                try:
                    h.update(p)
                except BaseException as exc:  # noqa: BLE001 - raised by the caller
                    failed.append(exc)

    hashing = threading.Thread(target=hash_parts, name="onnx_mrvl-pack-sha256", daemon=True)
    hashing.start()
    spans: List[Tuple[int, np.ndarray]] = []

    def copy(span) -> None:
        at, src = span
        out[at:at + src.size] = src

    offset = 0
    try:
        for p in parts:
            if deferred(p):
                blocks.run_all(copy, spans)   # the given parts before it (hashed already)
                spans = []
                p.write_into(out[offset:offset + p.nbytes])
                ready.put(out[offset:offset + p.nbytes])
                offset += p.nbytes
                continue
            src = np.frombuffer(p, np.uint8) if isinstance(p, (bytes, bytearray)) else p.reshape(-1).view(np.uint8)
            ready.put(src)
            for start in range(0, src.size, COPY_BLOCK):
                spans.append((offset + start, src[start:start + COPY_BLOCK]))
            offset += src.size
        blocks.run_all(copy, spans)
    finally:
        ready.put(None)
        hashing.join()
    if failed:
        raise failed[0]
    digest = h.digest()
    out[offset:] = np.frombuffer(digest, np.uint8)
    h.update(digest)
    return data, h.hexdigest()   # (the view of its memory goes with this frame; the bytes live on)
