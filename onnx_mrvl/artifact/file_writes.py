"""The files of an output folder written into its staging folder (``artifact/folder.py``): each
hashed as it is written, fsynced on a thread while the next is made, and a region binary (a bytes
object whose write releases the GIL) written on a thread of its own beside the others."""
from __future__ import annotations

import ctypes
import hashlib
import os
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO, Callable, Dict, List, Optional, Sequence, Tuple

from .. import blocks
from . import direct_io

Writer = Callable[[BinaryIO], object]


class HashingFile:
    """A binary file that also hashes and counts what is written through it. Large immutable chunks
    (``bytes``, or a read-only ``memoryview`` whose memory its producer never writes again: the
    Constants-JSON's base64 slices, emit/const_entry.py) are hashed on ``pool``'s thread while this
    one writes them and makes the next (hashlib and file writes release the GIL); a writer that
    knows its digest (``write.sha256``, e.g. a region binary, whose digest pack computed) is not
    hashed again. Every ``WRITEBACK`` bytes the disk writes of what is written so far are started
    on ``syncs``' thread (Linux ``sync_file_range``), so the fsync before the swap waits for the
    last part only (a buffered file: large ones are written with O_DIRECT, ``direct_io.py``)."""

    PARALLEL = 1 << 20      # bytes of a chunk hashed on the pool's thread
    WRITEBACK = 64 << 20    # bytes written between two starts of the disk writeback (``syncs``)

    def __init__(self, f: BinaryIO, known: Optional[str] = None, pool: Optional[ThreadPoolExecutor] = None,
                 syncs: Optional[ThreadPoolExecutor] = None):
        self.f, self.size, self.known, self.pool, self.syncs = f, 0, known, pool, syncs
        self.h = None if known else hashlib.sha256()
        self.pending: Optional[Future] = None
        self.started = 0        # bytes whose writeback was started

    def write(self, data) -> int:
        self.size += len(data)
        if self.h is not None:
            self.wait()                           # chunks are hashed in order
            if self.pool is not None and len(data) >= self.PARALLEL and (
                    type(data) is bytes or type(data) is memoryview and data.readonly):
                self.pending = self.pool.submit(self.h.update, data)
            else:
                self.h.update(data)
        n = self.f.write(data)
        if self.syncs is not None and self.size - self.started >= self.WRITEBACK and start_writeback():
            # the disk writes what is written so far while the rest is made: the fsync before the
            # swap then waits for the last part only
            self.f.flush()
            self.syncs.submit(start_writeback(), self.f.fileno(), self.started, self.size - self.started)
            self.started = self.size
        return n

    def wait(self) -> None:
        """Until the hash has read every chunk written so far."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.result()

    def hexdigest(self) -> str:
        self.wait()
        return self.known if self.h is None else self.h.hexdigest()


_WRITEBACK: list = []


def start_writeback():
    """Linux ``sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE)``: starts the disk writes
    of a file's range without waiting for them (the fsync still waits for all); None elsewhere."""
    if not _WRITEBACK:
        fn = None
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fn = libc.sync_file_range
                fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
                fn.restype = ctypes.c_int
            except (OSError, AttributeError):
                fn = None
        _WRITEBACK.append(None if fn is None else (lambda fd, offset, n: fn(fd, offset, n, 2)))
    return _WRITEBACK[0]


def _sync_close(f: BinaryIO) -> None:
    try:
        os.fsync(f.fileno())
    finally:
        f.close()


def _write_one(f: BinaryIO, write: Writer, pool: Optional[ThreadPoolExecutor],
               syncs: ThreadPoolExecutor) -> Tuple[Future, int, str, float]:
    """Write one opened file (hashing it); its fsync + close is left to ``syncs``. A writer marked
    ``direct`` (a large file) is written past the page cache where the system allows it
    (``direct_io.py``). (that future, size, sha256, seconds)."""
    t0 = time.perf_counter()
    fast = direct_io.direct(f) if getattr(write, "direct", False) else None   # a large file: past the page cache
    out = HashingFile(fast or f, getattr(write, "sha256", None), pool, None if fast else syncs)
    try:
        try:
            write(out)
        finally:
            out.wait()   # no hash still reading this file's chunks past here
        if fast is not None:
            fast.finish()
        f.flush()
    except BaseException:
        if fast is not None:
            fast.close()
        f.close()
        raise
    # fsynced on a thread while the next file is made; all before the folder is swapped in
    return syncs.submit(_sync_close, f), out.size, out.hexdigest(), time.perf_counter() - t0


def write_files(staging: str, files: Sequence[Tuple[str, Writer]], create: Callable[[str], BinaryIO],
                on_file: Optional[Callable[[str, int, float], None]] = None) -> Dict[str, dict]:
    """Write ``files`` ((name, write(binary file))) into the folder ``staging``, each file made by
    ``create(path)`` (all of them first, in order); returns {name: {"size", "sha256"}} in the order
    of ``files``, every file fsynced and closed. A writer marked ``gil_free`` (it hands bytes to the
    file and nothing else: a region binary) is written on a thread of its own from the start while
    this thread writes the others in order (with one core, all here, in order); ``on_file(name,
    bytes, seconds)`` is called in the order of ``files``. On a failure every file is closed."""
    opened: List[BinaryIO] = []
    try:
        for name, _ in files:
            opened.append(create(os.path.join(staging, name)))
    except BaseException:
        for f in opened:
            f.close()
        raise
    results: Dict[int, object] = {}
    reported = 0

    def report(block: bool) -> None:
        nonlocal reported
        while reported < len(files) and reported in results:
            got = results[reported]
            if isinstance(got, Future):
                if not block and not got.done():
                    return
                got = results[reported] = got.result()
            if on_file is not None:
                on_file(files[reported][0], got[1], got[3])
            reported += 1

    handed = 0   # files before this index are closed by their writer (or queued to be)
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="onnx_mrvl-sha256") as pool, \
                ThreadPoolExecutor(max_workers=1, thread_name_prefix="onnx_mrvl-fsync") as syncs, \
                ThreadPoolExecutor(max_workers=1, thread_name_prefix="onnx_mrvl-write") as aside:
            if blocks.workers() > 1:
                for i, (_, write) in enumerate(files):
                    if getattr(write, "gil_free", False):
                        results[i] = aside.submit(_write_one, opened[i], write, None, syncs)
            for i, (_, write) in enumerate(files):
                handed = i
                if i not in results:
                    results[i] = _write_one(opened[i], write, pool, syncs)
                    report(False)
            handed = len(files)
            report(True)
            for got in results.values():
                got[0].result()
    except BaseException:
        for i, f in enumerate(opened):
            if i >= handed and i not in results:
                f.close()
        raise
    return {name: {"size": results[i][1], "sha256": results[i][2]} for i, (name, _) in enumerate(files)}
