"""Base64 of large weights in C (``_base64.c``: AVX2 where the CPU has it, ~10 GB/s, against
~0.5 GB/s for ``binascii``, which also holds the GIL), the same bytes as
``binascii.b2a_base64(data, newline=False)``.

The Constants-JSON of VGG-19 is 767 MB of base64: ``binascii`` spent about a second of every save
on it. Like the simulator's native kernels (sim/native.py), the library is built by the system C
compiler the first time a process needs it and cached (onnx_mrvl/native_build.py, keyed by the
source, the flags and the compiler). Identity is checked, not assumed: on first use
the library encodes a probe (every length up to 100 and a few large ones, random bytes, every byte
value) through each of its paths, and every result must equal ``binascii``'s. Without a compiler,
on any difference or error, or with ``ONNX_MRVL_NATIVE_BASE64=0``, every encoding is ``binascii``'s.
Data below ``MIN_SIZE`` bytes is always encoded by ``binascii`` (a ctypes call costs more).
"""
from __future__ import annotations

import binascii
import ctypes
import logging
import os
import threading

import numpy as np

from .. import native_build

log = logging.getLogger(__name__)
MIN_SIZE = 4096                 # bytes: smaller inputs are encoded by binascii
ENABLED = os.environ.get("ONNX_MRVL_NATIVE_BASE64", "1").strip().lower() not in ("0", "false", "no", "off")
_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_base64.c")
_FLAGS = ["-O2", "-fPIC", "-shared"]
_LOCK = threading.Lock()
_STATE = {"lib": None, "vector": 0, "checked": False, "why": ""}


_compiler = native_build.compiler   # tests patch it


def _build() -> str:
    """The cached shared object of ``_base64.c`` (built when not cached): its path."""
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler (set $CC, or install cc / gcc / clang)")
    return native_build.build_shared(cc, _SRC, _FLAGS)


def _load():
    lib = ctypes.CDLL(_build())
    lib.b64_encode.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int]
    lib.b64_encode.restype = ctypes.c_size_t
    lib.b64_vector.argtypes = []
    lib.b64_vector.restype = ctypes.c_int
    return lib


def _probe() -> list:
    rng = np.random.default_rng(20)
    cases = [rng.integers(0, 256, n, dtype=np.uint8) for n in range(101)]
    cases += [np.arange(256 * 12, dtype=np.uint32).astype(np.uint8)]
    cases += [rng.integers(0, 256, n, dtype=np.uint8) for n in (4095, 4096, 65536 + 1, 3 << 18, (3 << 18) + 2)]
    return cases


def _encode_with(lib, vector: int, raw: np.ndarray) -> bytes:
    out = np.empty(encoded_size(raw.size), np.uint8)
    n = lib.b64_encode(raw.ctypes.data, raw.size, out.ctypes.data, vector)
    return out[:n].tobytes()


def _library():
    """(the checked library, its vector flag), or (None, 0): binascii encodes."""
    if _STATE["checked"]:
        return _STATE["lib"], _STATE["vector"]
    with _LOCK:
        if not _STATE["checked"]:
            lib, vector, why = None, 0, ""
            if not ENABLED:
                why = "ONNX_MRVL_NATIVE_BASE64=0"
            else:
                try:
                    lib = _load()
                    vector = int(lib.b64_vector())
                    for raw in _probe():
                        want = binascii.b2a_base64(raw.tobytes(), newline=False)
                        for v in sorted({0, vector}):
                            if _encode_with(lib, v, raw) != want:
                                raise RuntimeError(f"differs from binascii on {raw.size} bytes (path {v})")
                except Exception as exc:  # noqa: BLE001 - no compiler, a failed build or a difference: binascii
                    lib, vector, why = None, 0, f"{type(exc).__name__}: {exc}"
            if why:
                log.info("native base64 is not used (%s): binascii encodes", why)
            _STATE.update(lib=lib, vector=vector, why=why, checked=True)
    return _STATE["lib"], _STATE["vector"]


def why_not_used() -> str:
    """Empty when the native encoder is used (after the first large encoding), else why not."""
    _library()
    return _STATE["why"]


def encoded_size(nbytes: int) -> int:
    return (nbytes + 2) // 3 * 4


def encode_into(raw: np.ndarray, out: np.ndarray) -> int:
    """Write the base64 text of the contiguous uint8 array ``raw`` into the uint8 array ``out``
    (at least ``encoded_size(raw.size)`` long); returns the characters written. The GIL is
    released while the native encoder runs."""
    lib, vector = _library() if raw.size >= MIN_SIZE else (None, 0)
    if lib is None:
        text = binascii.b2a_base64(raw, newline=False)
        out[:len(text)] = np.frombuffer(text, np.uint8)
        return len(text)
    if not (raw.flags.c_contiguous and out.flags.c_contiguous and out.flags.writeable
            and raw.dtype == np.uint8 and out.dtype == np.uint8 and out.size >= encoded_size(raw.size)):
        raise ValueError("encode_into needs a contiguous uint8 input and a large enough writable uint8 output")
    return int(lib.b64_encode(raw.ctypes.data, raw.size, out.ctypes.data, vector))


def encode(raw: np.ndarray) -> bytes:
    """``binascii.b2a_base64(raw, newline=False)`` of the contiguous uint8 array ``raw``."""
    lib, vector = _library() if raw.size >= MIN_SIZE else (None, 0)
    if lib is None:
        return binascii.b2a_base64(raw, newline=False)
    return _encode_with(lib, vector, np.ascontiguousarray(raw))


def text(raw: np.ndarray) -> str:
    """``binascii.b2a_base64(raw, newline=False).decode("ascii")`` of a contiguous uint8 array."""
    out = np.empty(encoded_size(raw.size), np.uint8)
    return str(memoryview(out[:encode_into(raw, out)]), "ascii")
