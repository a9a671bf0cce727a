"""Building the package's C sources into cached shared libraries (the simulator's kernels,
sim/native.py; emit's base64 encoder, emit/base64_native.py).

Like torch inductor's CPU backend: the system C compiler (``$CC``, else ``cc`` / ``gcc`` / ``clang``)
builds a source the first time a process needs it; the library is cached (``ONNX_MRVL_CACHE_DIR``,
else ``__pycache__`` beside the source, else ``~/.cache/onnx_mrvl``) under a key of the source and
the local headers it includes, the flags, the compiler and its version, and what the caller adds
(the CPU's flags for ``-march=native`` builds). Knows no ONNX: sim and emit both use it.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from typing import Iterator, Optional, Sequence

log = logging.getLogger(__name__)


def compiler() -> Optional[str]:
    """``$CC`` when it exists, else the first of cc / gcc / clang on PATH, else None."""
    cc = os.environ.get("CC")
    if cc and shutil.which(cc.split()[0]):
        return cc
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def cache_dirs(source: str) -> Iterator[str]:
    """Where a build of ``source`` is cached, in the order tried."""
    env = os.environ.get("ONNX_MRVL_CACHE_DIR")
    if env:
        yield env
    yield os.path.join(os.path.dirname(os.path.abspath(source)), "__pycache__")
    yield os.path.join(os.path.expanduser("~"), ".cache", "onnx_mrvl")


def source_bytes(source: str) -> bytes:
    """The text of ``source`` and of the local headers it includes (``#include "name"``, beside
    it, recursively): a changed header changes the cache key."""
    seen, parts, todo = set(), [], [os.path.abspath(source)]
    while todo:
        path = todo.pop(0)
        if path in seen or (parts and not os.path.exists(path)):   # not beside it: the compiler says
            continue
        seen.add(path)
        with open(path, "rb") as f:
            text = f.read()
        parts.append(text)
        for name in re.findall(rb'^\s*#\s*include\s+"([^"]+)"', text, re.M):
            todo.append(os.path.join(os.path.dirname(path), name.decode()))
    return b"\0".join(parts)


def build_shared(cc: str, source: str, flags: Sequence[str], key_extra: bytes = b"",
                 announce: Optional[logging.Logger] = None, what: str = "native code") -> str:
    """The cached shared object of the C file ``source`` built by ``cc`` with ``flags`` (built when
    not cached; older builds of the same stem are removed): its path. ``announce`` logs a notice
    before a build (``what`` names it)."""
    stem = os.path.splitext(os.path.basename(source))[0]
    try:
        version = subprocess.run(cc.split() + ["--version"], capture_output=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        version = b""
    key = hashlib.sha256(b"\0".join([source_bytes(source), " ".join(flags).encode(), cc.encode(), version,
                                     key_extra])).hexdigest()[:16]
    name = f"{stem}-{key}.so"
    errors = []
    for d in cache_dirs(source):
        path = os.path.join(d, name)
        if os.path.exists(path):
            return path
        try:
            os.makedirs(d, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".native-", suffix=".so", dir=d)
            os.close(fd)
        except OSError as exc:
            errors.append(f"{d}: {exc}")
            continue
        try:
            if announce is not None:
                announce.info("building %s for this CPU (first run on this machine, a few seconds; "
                              "cached in %s)...", what, d)
            t0 = time.perf_counter()
            r = subprocess.run(cc.split() + list(flags) + ["-o", tmp, source], capture_output=True, text=True,
                               timeout=1200)   # ~50 s of CPU for the AVX2 kernels; minutes on a loaded host
            if r.returncode != 0:
                raise RuntimeError(f"{cc} failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
            os.replace(tmp, path)            # atomic: a concurrent build of the same key is harmless
            log.debug("built %s in %.2f s", path, time.perf_counter() - t0)
            for old in os.listdir(d):        # builds of older sources (a loaded one stays mapped)
                if old.startswith(stem + "-") and old.endswith(".so") and old != name:
                    try:
                        os.unlink(os.path.join(d, old))
                    except OSError:
                        pass
            return path
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    raise RuntimeError("no writable cache directory (" + "; ".join(errors) + ")")
