"""The thread count of numpy's bundled OpenBLAS, which runs every simulator GEMM.

Measured on the 2-core CI machine (docs/simulator.md): with OpenBLAS's default 2 threads, ResNet-50
took 4.2 s against 0.70 s single-threaded, because each sgemm call synchronises its threads and
that collapses whenever the cores are shared (onnxruntime's own spinning intra-op threads, parallel
tests, other processes). So the first Simulator sets OpenBLAS to ``ONNX_MRVL_SIM_BLAS_THREADS``
threads (default 1) -- a process-wide setting -- unless the user chose a count already through
``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS``, or set ``ONNX_MRVL_SIM_BLAS_THREADS=0`` (leave it).
"""
from __future__ import annotations

import ctypes
import glob
import logging
import os
import threading
from typing import Optional

import numpy as np

log = logging.getLogger(__name__)
_lock = threading.Lock()
_done = False
_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
            "openblas_get_num_threads64_", "openblas_get_num_threads")


def _openblas():
    libdir = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libdir, "lib*openblas*.so*"))):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def _symbol(lib, names):
    for name in names:
        fn = getattr(lib, name, None) if lib is not None else None
        if fn is not None:
            return fn
    return None


def get_blas_threads() -> Optional[int]:
    """OpenBLAS's current thread count, or None when numpy's OpenBLAS cannot be reached."""
    fn = _symbol(_openblas(), _GETTERS)
    if fn is None:
        return None
    fn.restype = ctypes.c_int
    return int(fn())


def set_blas_threads(n: int) -> bool:
    """Set OpenBLAS's thread count for the whole process; False when it cannot be reached."""
    fn = _symbol(_openblas(), _SETTERS)
    if fn is None:
        return False
    fn.argtypes = [ctypes.c_int]
    fn(int(n))
    return True


def configure_once() -> None:
    """Apply the simulator's BLAS thread policy (see the module docstring) the first time only."""
    global _done
    with _lock:
        if _done:
            return
        _done = True
        want = os.environ.get("ONNX_MRVL_SIM_BLAS_THREADS")
        if want is None and (os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")):
            return
        try:
            n = 1 if want is None else int(want)
        except ValueError:
            log.warning("ONNX_MRVL_SIM_BLAS_THREADS=%r is not an integer; BLAS threads left alone", want)
            return
        if n <= 0:
            return
        if set_blas_threads(n):
            log.debug("numpy OpenBLAS set to %d thread(s) for the simulator", n)
