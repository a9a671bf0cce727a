"""Row-block parallelism for the GEMM kernels, with Python threads instead of BLAS threads.

numpy releases the GIL inside matmul and the big ufunc loops, so independent row blocks (im2col
copy + sgemm + epilogue on disjoint output rows) run in parallel on a small shared thread pool.
Unlike OpenBLAS's own threads (set to 1, see ``blas.py``), the workers never spin-wait for each
other: when a core is busy elsewhere, the other block simply finishes later.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_lock = threading.Lock()
_pool = None
_local = threading.local()


_CPUS = max(1, min(8, os.cpu_count() or 1))     # os.cpu_count() costs ~15 us: read it once


_ENV = getattr(os.environ, "_data", None)          # the raw bytes mapping behind os.environ
_ENV_KEY = os.environ.encodekey("ONNX_MRVL_SIM_THREADS") if hasattr(os.environ, "encodekey") else None


def workers() -> int:
    """Number of parallel row blocks: ONNX_MRVL_SIM_THREADS, else the CPU count (at most 8).

    Read on every kernel call (tests and benchmarks change it at run time), from os.environ's raw
    mapping when there is one: ``os.environ.get`` encodes the key each time (~4 us, ~40 calls a run)."""
    if _ENV is not None and _ENV_KEY is not None:
        raw = _ENV.get(_ENV_KEY)
        env = None if raw is None else os.environ.decodevalue(raw)
    else:
        env = os.environ.get("ONNX_MRVL_SIM_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    return _CPUS


def _forget_pool_in_child() -> None:
    """A forked child has none of the parent's worker threads: an inherited executor would queue
    work that no thread ever runs (a multiprocessing worker of a process that ran a batch split
    hung on its first parallel layer). The child starts its own pool on first use."""
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="mrvl-sim",
                                       initializer=_mark_worker)
        return _pool


def _mark_worker() -> None:
    _local.worker = True


def run_all(fn: Callable[[T], R], items: Sequence[T]) -> List[R]:
    """``[fn(i) for i in items]``, in parallel when there are several items (results in order).

    Called from a pool worker (nested use) it runs inline, so it can never deadlock the pool.
    """
    if len(items) <= 1 or getattr(_local, "worker", False) or workers() == 1:
        return [fn(i) for i in items]
    pool = _get_pool()
    futures = [pool.submit(fn, i) for i in items[1:]]
    first = fn(items[0])                 # the calling thread works too
    return [first] + [f.result() for f in futures]
