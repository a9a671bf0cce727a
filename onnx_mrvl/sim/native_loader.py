"""Loading the native kernel libraries: once per process, thread-safe, with the reason when not.

``native.py`` (fp16 conv / FC / pools), ``int8_native.py`` (VNNI int8) and ``int8_float_native.py``
(onnxruntime's float path of unfused QDQ convs) each hold one ``OnceLibrary``: the first ``get()``
builds (``native.build_shared``) and loads the library; any failure leaves ``None`` and ``why``,
said once in the log, and the caller's numpy path runs instead (the same results).
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading
from typing import Callable, Optional

from ..errors import UsageError

# Testing only (docs/simulator.md, "AVX-512 under emulation"): ONNX_MRVL_NATIVE_EMULATE=avx512 (or
# avx512vbmi) reports these CPU flags too, and native.py then builds the AVX-512 kernels on SIMDe;
# ONNX_MRVL_NATIVE_EMULATE=avx2 hides an AVX-512 host's AVX-512 and VNNI flags, and native.py builds
# the AVX2 kernels (-mno-avx512f): what an AVX2 host runs, tested on this one.
EMULATE = os.environ.get("ONNX_MRVL_NATIVE_EMULATE", "").strip().lower()
_EMULATED_FLAGS = {"avx512": " avx512f avx512dq avx512vl avx512bw avx512_vnni",
                   "avx512vbmi": " avx512f avx512dq avx512vl avx512bw avx512_vnni avx512vbmi",
                   "avx2": ""}
_HIDDEN_BY_AVX2 = ("avx512", "avx_vnni", "amx")
if EMULATE and EMULATE not in _EMULATED_FLAGS:
    raise UsageError(f"ONNX_MRVL_NATIVE_EMULATE={EMULATE!r} is not a known emulation",
                     hint=f"set it to one of {sorted(_EMULATED_FLAGS)} (testing only) or unset it")


def cpu_flags() -> str:
    """The CPU's feature flags line (``/proc/cpuinfo``), empty where unknown (plus the emulated
    AVX-512 flags under ``ONNX_MRVL_NATIVE_EMULATE``, or without the AVX-512 ones under its ``avx2``)."""
    line = ""
    try:
        with open("/proc/cpuinfo") as f:
            line = next((ln for ln in f if ln.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    if EMULATE == "avx2":
        return " ".join(f for f in line.split() if not f.startswith(_HIDDEN_BY_AVX2)) + "\n"
    return line.rstrip("\n") + _EMULATED_FLAGS[EMULATE] + "\n" if EMULATE else line


def cpu_has(*flags: str) -> bool:
    """True when the CPU reports every one of ``flags`` (e.g. ``"avx512_vnni"``)."""
    have = set(cpu_flags().split())
    return all(f in have for f in flags)


class OnceLibrary:
    """A ctypes library loaded by ``load()`` on the first ``get()``; None (and ``why``) on failure."""

    def __init__(self, load: Callable[[], ctypes.CDLL], what: str, fallback: str, log: logging.Logger,
                 why: str = ""):
        self._load, self.what, self.fallback, self._log = load, what, fallback, log
        self._lock = threading.Lock()
        self._lib: Optional[ctypes.CDLL] = None
        self._tried = False
        self.why = why

    def reason(self) -> str:
        """Empty when the library is loaded (or not yet tried), else why it is not used."""
        return self.why

    def get(self) -> Optional[ctypes.CDLL]:
        """The loaded library, or None (``reason()`` says why)."""
        if self._tried:
            return self._lib
        with self._lock:
            if not self._tried:
                try:
                    self._lib = self._load()
                except Exception as exc:                # any failure: the caller's numpy path
                    self.why = f"{self.what} unavailable: {exc}"
                    self._log.info("%s; using %s", self.why, self.fallback)
                self._tried = True
            return self._lib
