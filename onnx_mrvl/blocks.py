"""The conversion's second core: large work that releases the GIL (numpy casts and reductions,
onnxruntime's Cast kernel, hashlib, ``bytes.join``, file writes) split into blocks that run on a
small shared thread pool while the calling thread works too.

``workers()`` is the number of cores this process may run on (``os.sched_getaffinity``), or
``ONNX_MRVL_CONVERT_THREADS``; with one, everything runs inline in the calling thread, in order
(no thread, no slowdown on a 1-core machine). Results never depend on the number of workers.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, List, Optional, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")
MAX_WORKERS = 8

_lock = threading.Lock()
_pool: Optional[ThreadPoolExecutor] = None
_local = threading.local()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_CORES = max(1, _cores())


def workers() -> int:
    """Threads the conversion may keep busy: ``ONNX_MRVL_CONVERT_THREADS``, else this process's cores (at most 8)."""
    env = os.environ.get("ONNX_MRVL_CONVERT_THREADS", "").strip()
    if env:
        try:
            return max(1, min(MAX_WORKERS, int(env)))
        except ValueError:
            pass
    return min(MAX_WORKERS, _CORES)


def _forget_pool_in_child() -> None:
    """A forked child has none of the parent's threads: it starts its own pool on first use."""
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _mark_worker() -> None:
    _local.worker = True


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=MAX_WORKERS - 1, thread_name_prefix="onnx_mrvl-blocks",
                                       initializer=_mark_worker)
        return _pool


def _inline() -> bool:
    return workers() == 1 or getattr(_local, "worker", False)


def run_all(fn: Callable[[T], R], items: Sequence[T]) -> List[R]:
    """``[fn(i) for i in items]`` with up to ``workers()`` items at a time (results in order; the
    exception of the first failed item is raised, in parallel once every item has finished).
    Inline with one worker, one item, or when called from a pool thread (nested use cannot deadlock)."""
    items = list(items)
    n = min(workers(), len(items))
    if n <= 1 or _inline():
        return [fn(i) for i in items]

    def lane(part):
        out = []
        for i in part:
            try:
                out.append((True, fn(i)))
            except BaseException as exc:  # noqa: BLE001 - raised below, in item order
                out.append((False, exc))
        return out

    # the calling thread takes every n-th item, the pool the rest (n - 1 lanes)
    futures = [_get_pool().submit(lane, items[k::n]) for k in range(1, n)]
    done = [lane(items[0::n])] + [f.result() for f in futures]
    results = [None] * len(items)
    for k, part in enumerate(done):
        results[k::n] = part
    for ok, value in results:
        if not ok:
            raise value
    return [value for _, value in results]


def background(fn: Callable[..., R], *args) -> "Future[R]":
    """``fn(*args)`` on a pool thread while the caller goes on; with one worker (or nested) it has
    already run when this returns (its exception is then raised by ``result()``, as from a thread)."""
    if _inline():
        f: Future = Future()
        try:
            f.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to result(), like a pool thread's
            f.set_exception(exc)
        return f
    return _get_pool().submit(fn, *args)
