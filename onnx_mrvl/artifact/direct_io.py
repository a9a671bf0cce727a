"""Large files of a save written past the page cache (Linux ``O_DIRECT``).

A buffered write of N bytes costs the writing process the kernel's copy into new page-cache pages
and, at the writeback the fsync forces, the file system's block allocation: on the 2-core machine
1.8-3 ms of system CPU per MB (VGG-19's 766 MB Constants-JSON and 287 MB binary: 0.4-2.5 s, more the
more loaded the machine), against ~0.07 ms per MB with ``O_DIRECT``, where the device reads the
process's buffer itself (docs/benchmarks.md). ``direct(f)`` turns an opened, still empty file into
a :class:`DirectFile` that gathers what is written into a page-aligned buffer and hands it to the
disk in ``BLOCK`` writes; ``finish()`` writes the tail (shorter than a block) with ``O_DIRECT``
cleared. The bytes on disk are the same; the fsync before the folder swap is still made (it now
waits for the file's metadata only). Where the file system refuses ``O_DIRECT`` (``fcntl`` or the
first write fails with EINVAL: tmpfs before Linux 6.6, some FUSE file systems), or off Linux, the
file is written as before. ``ONNX_MRVL_DIRECT_IO=0`` turns it off. A file written so is not in the
page cache afterwards: its first reader reads it from the disk.
"""
from __future__ import annotations

import errno
import mmap
import os
import sys
from typing import BinaryIO, Optional

try:
    import fcntl
except ImportError:     # not on Windows
    fcntl = None

BLOCK = 8 << 20          # bytes handed to the disk per write: a multiple of any device's block size
MIN_SIZE = 32 << 20      # files expected below this are written through the page cache


def enabled() -> bool:
    return (sys.platform.startswith("linux") and hasattr(os, "O_DIRECT") and fcntl is not None
            and os.environ.get("ONNX_MRVL_DIRECT_IO", "1") != "0")


def direct(f: BinaryIO) -> Optional["DirectFile"]:
    """A :class:`DirectFile` writing into the opened empty file ``f`` (which keeps owning the
    descriptor: close ``f`` as before, after ``finish()``), or None where O_DIRECT is not available."""
    if not enabled():
        return None
    try:
        fd = f.fileno()
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
    except (OSError, ValueError, AttributeError):   # not a file of the system (io.BytesIO), or refused
        return None
    return DirectFile(fd, flags)


class DirectFile:
    """``write`` / ``flush`` / ``fileno`` of a file written in ``BLOCK`` pieces with O_DIRECT from
    a page-aligned buffer (see the module doc); ``finish()`` writes the rest and frees the buffer."""

    def __init__(self, fd: int, flags: int):
        self.fd, self.flags = fd, flags
        self.buf = mmap.mmap(-1, BLOCK)    # anonymous: page-aligned, as O_DIRECT wants
        self.view = memoryview(self.buf)
        self.used = 0
        self.direct = True

    def fileno(self) -> int:
        return self.fd

    def write(self, data) -> int:
        src = memoryview(data).cast("B")
        n = len(src)
        while len(src):
            take = min(len(src), BLOCK - self.used)
            self.view[self.used:self.used + take] = src[:take]
            self.used += take
            src = src[take:]
            if self.used == BLOCK:
                self._out(BLOCK)
        return n

    def flush(self) -> None:
        """Nothing: only whole blocks go out before ``finish``."""

    def _out(self, n: int) -> None:
        view = self.view[:n]
        while len(view):
            try:
                done = os.write(self.fd, view)
            except OSError as exc:
                if exc.errno != errno.EINVAL or not self.direct:
                    raise
                self._buffered()       # alignment the device refuses: the rest through the page cache
                continue
            view = view[done:]
            if len(view) and done % 4096:
                self._buffered()       # a short write left the offset unaligned
        self.used = 0

    def _buffered(self) -> None:
        if self.direct:
            fcntl.fcntl(self.fd, fcntl.F_SETFL, self.flags)
            self.direct = False

    def finish(self) -> None:
        """Write what is gathered (the tail through the page cache) and free the buffer."""
        try:
            whole = self.used - self.used % 4096
            if whole:
                tail = bytes(self.view[whole:self.used])
                self._out(whole)
                self.view[:len(tail)] = tail
                self.used = len(tail)
            self._buffered()
            if self.used:
                self._out(self.used)
        finally:
            self.close()

    def close(self) -> None:
        """Free the buffer (what is gathered and not written is dropped: the save failed)."""
        if not self.buf.closed:
            self.view.release()
            self.buf.close()
