"""The native conv / FC kernel (``_native_conv.c``): built on first use, cached, optional.

The simulator's convolutions are GEMMs, and numpy's OpenBLAS plus a separate epilogue pass
leaves the simulator 2-5x slower than onnxruntime's MLAS (docs/simulator.md, Speed). The C
kernel is an implicit-GEMM NHWC conv (no im2col copy) with the whole epilogue -- bias, scale,
shift, activation, fp16 rounding, finiteness -- applied to the register tile before the store.

Like torch inductor's CPU backend, it is compiled by the system C compiler (``$CC``, else ``cc``
/ ``gcc``) with ``-O3 -march=native -ffp-contract=off`` the first time a process needs it; the
shared object is cached under ``__pycache__`` beside this file (else ``~/.cache/onnx_mrvl``),
keyed by the source (and the local headers it includes), the flags, the compiler and the CPU's
feature flags and the variant (``variant()``: AVX-512, or AVX2 + FMA + F16C, where
``_native_avx2.h`` gives each 512-bit operation as two 256-bit ones, lane for lane the same bits),
written to a temporary name and renamed into place. When anything is missing (no
compiler, a CPU with neither, a read-only cache, ``ONNX_MRVL_SIM_NATIVE=0``), ``lib()`` returns
None, says why once in the log, and the simulator uses the numba / numpy kernels, whose results it
matches (tests/test_sim_native.py).
"""
from __future__ import annotations

import ctypes
import logging
import mmap
import os
import platform
from typing import Optional

import numpy as np

from .. import native_build
from .native_loader import EMULATE, OnceLibrary, cpu_flags, cpu_has

log = logging.getLogger(__name__)
notice = logging.getLogger("onnx_mrvl.notice")     # one-line notices the CLI shows on a terminal
F32 = np.float32
NR = 32                         # output channels per packed weight block (the C kernel's NR)
KC = 512                        # k-values per block of the C kernel's conv tiles: its KC on AVX2, the
                                # smaller of the two builds' (AVX-512: 576), so K <= KC is one block in both
_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native_conv.c")
_FLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fPIC", "-shared", "-fno-math-errno"]
ENABLED = os.environ.get("ONNX_MRVL_SIM_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")

_P = ctypes.c_void_p
_L = ctypes.c_long


def why_disabled() -> str:
    """Empty when the native kernel is loaded (or not yet tried), else why it is not used."""
    return _LIBRARY.why


_compiler = native_build.compiler   # tests patch it


def variant() -> str:
    """Which build of ``_native_conv.c`` this CPU gets: ``"avx512"`` (F, DQ and VL), ``"avx2"``
    (AVX2 + FMA + F16C: the same kernels on pairs of 256-bit registers, the same bits), or ``""``
    (neither: the numba / numpy kernels run)."""
    if cpu_has("avx512f", "avx512dq", "avx512vl"):
        return "avx512"
    if cpu_has("avx2", "fma", "f16c"):
        return "avx2"
    return ""


def emulation_flags() -> list:
    """Testing only: the extra compiler flags of an AVX-512 build on SIMDe (``ONNX_MRVL_NATIVE_EMULATE``,
    headers under ``ONNX_MRVL_SIMDE_DIR``, default /usr/include; ``_native_simde.h``), of the AVX2
    build on an AVX-512 host (``=avx2``), else []."""
    if not EMULATE:
        return []
    if EMULATE == "avx2":
        return ["-mno-avx512f"]
    inc = os.environ.get("ONNX_MRVL_SIMDE_DIR", "/usr/include")
    if not os.path.exists(os.path.join(inc, "simde", "x86", "avx512.h")):
        raise RuntimeError(f"ONNX_MRVL_NATIVE_EMULATE={EMULATE}: no SIMDe headers under {inc} (ONNX_MRVL_SIMDE_DIR)")
    return (["-Wno-psabi", "-I" + inc, "-include", os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native_simde.h")]
            + (["-DMRVL_EMULATE_VBMI"] if EMULATE == "avx512vbmi" else []))


def build_shared(cc: str, source: Optional[str] = None) -> str:
    """The cached shared object of the C file ``source`` (default ``_native_conv.c``; built by
    ``cc`` when not cached, ``-march=native``: the key holds the CPU's flags): its path.
    sim/int8_native.py builds ``_native_int8.c`` with it."""
    extra = emulation_flags()
    simde = len(extra) > 3
    shim = native_build.source_bytes(extra[3]) if simde else b""
    if extra:
        log.warning("ONNX_MRVL_NATIVE_EMULATE=%s: %s as its %s (testing only)", EMULATE,
                    os.path.basename(source or _SRC), "AVX-512 build on SIMDe, slow" if simde else "AVX2 build")
    return native_build.build_shared(cc, source or _SRC, _FLAGS + extra,
                                     key_extra=b"\0".join([cpu_flags().encode(), platform.machine().encode(),
                                                               variant().encode(), shim]),
                                     announce=notice, what="the simulator's native kernels")


def prebuild() -> list:
    """Build every native kernel library of the simulator into the cache without loading any (a
    harness calls it before forking workers, so no worker compiles inside a timed case; loading
    stays with each process). The built paths; nothing when native kernels are off or no
    compiler is found (each library then says why when first asked for)."""
    cc = _compiler()
    if not ENABLED or cc is None:
        return []
    here = os.path.dirname(_SRC)
    out = []
    for name in sorted(os.listdir(here)):
        if name.startswith("_native") and name.endswith(".c"):
            try:
                out.append(build_shared(cc, os.path.join(here, name)))
            except Exception as exc:  # noqa: BLE001 - the library's own load reports it
                log.info("prebuild of %s failed: %s", name, exc)
    return out


def load_on_pool(source: str, set_runner: str) -> ctypes.CDLL:
    """The C file ``source`` (a kernel library beside this one: ``_native_int8.c``,
    ``_native_i8float.c``) built, loaded, and its ``set_runner`` handed this library's worker pool
    (``mrvl_run_parts``), on which its parallel parts then run."""
    if not on():
        raise RuntimeError(why_disabled() or "native kernels off")
    so = ctypes.CDLL(build_shared(compiler(), source))
    fn = getattr(so, set_runner)
    fn.restype, fn.argtypes = None, [ctypes.c_void_p]
    fn(ctypes.cast(lib().mrvl_run_parts, ctypes.c_void_p).value)
    return so


def _build(cc: str) -> str:
    return build_shared(cc)


def _load() -> ctypes.CDLL:
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC)")
    if not variant():
        raise RuntimeError("the CPU has neither AVX-512 (F/DQ/VL) nor AVX2 + FMA + F16C")
    so = ctypes.CDLL(build_shared(cc))
    so.binary_npc.restype = ctypes.c_int
    so.binary_npc.argtypes = ([_P, _P, _P] + [_L] * 6 + [ctypes.c_int, _P, ctypes.c_int,
                                                        ctypes.c_float, ctypes.c_float, ctypes.c_int])
    so.conv_desc.restype = so.depthwise_desc.restype = ctypes.c_int
    so.conv_desc.argtypes = [_P, _P, _P, _P, ctypes.c_int]
    so.depthwise_desc.argtypes = [_P, _P, _P, ctypes.c_int]
    so.pool_desc.restype = ctypes.c_int
    so.pool_desc.argtypes = [_P, _P, _P, _P, ctypes.c_int]
    so.transpose_layout.restype = None
    so.transpose_layout.argtypes = [_P, _P, _L, _L, _L, ctypes.c_int, ctypes.c_int]
    so.gemv_desc.restype = ctypes.c_int
    so.gemv_desc.argtypes = [_P, _P, _P, ctypes.c_int]
    so.transpose_round.restype = ctypes.c_int
    so.transpose_round.argtypes = [_P, _P, _L, _L, _L, ctypes.c_int]
    so.global_avgpool.restype = so.copy_round.restype = ctypes.c_int
    so.global_avgpool.argtypes = [_P, _P, _L, _L, _L, ctypes.c_int]
    so.copy_round.argtypes = [_P, _P, _L]
    so.copy_blocks.restype = ctypes.c_int
    so.copy_blocks.argtypes = [_P, _L, ctypes.c_int]
    so.run_steps.restype = so.run_steps_profiled.restype = None
    so.run_steps.argtypes = [_P, _L, _P, ctypes.c_int]
    so.run_steps_profiled.argtypes = [_P, _L, _P, ctypes.c_int, _P]   # + [count, 2] int64 (ns)
    so.run_steps_parts.restype = None
    so.run_steps_parts.argtypes = [_P, _L, _P, ctypes.c_int, _P, _P, _L, _P]   # + part log, its capacity, counts
    so.round_fp16.restype = None
    so.round_fp16.argtypes = [_P, _L]
    so.mrvl_run_parts.restype = None          # the worker pool, for sim/int8_native.py
    return so


_LIBRARY = OnceLibrary(_load, "native conv kernel", "the numba / numpy kernels", log,
                       why="" if ENABLED else "disabled by ONNX_MRVL_SIM_NATIVE=0")


def lib():
    """The loaded kernel library, or None (see ``why_disabled()``); builds it on the first call."""
    return _LIBRARY.get() if ENABLED else None


def compiler() -> Optional[str]:
    """The C compiler the native kernels are built with, or None."""
    return _compiler()


def on() -> bool:
    """True when the native kernel is to be used (building it on the first call)."""
    return ENABLED and lib() is not None


def descriptor(geometry, weights: np.ndarray, vectors, code: int, p0: float, p1: float,
               fused=(0, 0.0, 0.0, None), groups: int = 1, lanes: int = 0) -> np.ndarray:
    """The int64 layer descriptor of ``conv_desc`` / ``depthwise_desc`` (see _native_conv.c);
    ``fused``: (code, p0, p1, padded slope) of a Sum2D fused into a conv; ``groups``: a grouped
    conv's (weights: each group's packed blocks in turn, or with ``lanes`` > 0 the tiles of
    ``pack_weights_lanes``). The caller keeps ``weights``,
    ``vectors`` and the slope alive as long as the descriptor."""
    code2, q0, q1, slope2 = fused
    bits = np.array([p0, p1, q0, q1], F32).view(np.uint32).astype(np.int64)
    return np.array(list(geometry) + [weights.ctypes.data] + [0 if v is None else v.ctypes.data for v in vectors]
                    + [code, bits[0], bits[1], code2, bits[2], bits[3],
                       0 if slope2 is None else slope2.ctypes.data, int(groups), int(lanes)], dtype=np.int64)


def pack_weights(w: np.ndarray) -> np.ndarray:
    """[K, O] weight matrix -> [ceil(O/NR), K, NR] blocks (zero columns past O), contiguous."""
    k, o = w.shape
    nb, full = -(-o // NR), o // NR
    out = empty((nb, k, NR))
    if full:          # whole blocks straight from w (any strides and float dtype; float16 converts exactly)
        out[:full] = w.T[:full * NR].reshape(full, NR, k).transpose(0, 2, 1)
    if full < nb:
        out[full] = 0
        out[full, :, :o - full * NR] = w[:, full * NR:]
    return out


def address(a: np.ndarray) -> int:
    """The address of ``a``'s first element: through a ctypes view of its buffer when it is writable
    (~1 us; ``a.ctypes.data`` builds a helper object, 2-6 us), else ``a.ctypes.data``."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


_stagger = 0
HUGE_PAGE = 2 << 20
# ONNX_MRVL_SIM_HUGE_PAGES=0: every array from numpy's allocator (A/B runs)
_HUGE = hasattr(mmap, "MADV_HUGEPAGE") and os.environ.get("ONNX_MRVL_SIM_HUGE_PAGES", "1").strip().lower() not in (
    "0", "false", "no", "off")


def _huge_bytes(nbytes: int) -> np.ndarray:
    """``nbytes`` bytes (uint8) of a fresh anonymous mapping, starting on a 2 MB boundary, its whole
    2 MB stretches advised as transparent huge pages (the tail stays on 4 KB pages, so at most the
    untouched head is wasted, and only as address space)."""
    m = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = np.frombuffer(m, np.uint8)              # keeps the mapping alive
    head = -raw.ctypes.data % HUGE_PAGE
    whole = nbytes // HUGE_PAGE * HUGE_PAGE
    try:
        m.madvise(mmap.MADV_HUGEPAGE, head, whole)
    except OSError:                               # a kernel without THP: 4 KB pages, as numpy's
        pass
    return raw[head:head + nbytes]


def _buffer(count: int, dtype) -> np.ndarray:
    """``count`` uninitialised values of ``dtype``: on huge pages (_huge_bytes) from 2 MB up, else numpy's."""
    nbytes = count * np.dtype(dtype).itemsize
    return _huge_bytes(nbytes).view(dtype) if _HUGE and nbytes >= HUGE_PAGE else np.empty(count, dtype)


def empty(shape) -> np.ndarray:
    """An uninitialised float32 array whose data starts on a 64-byte boundary.

    numpy's own arrays are 16-byte aligned, and a 64-byte vector load or store that straddles two
    cache lines costs two (measured ~10% on the depthwise kernel). Successive large arrays start
    at different offsets within a page, so one layer's input and output do not alias in the
    cache (4 KB aliasing). An array of at least 2 MB (packed weights, a static plan's arena) lies
    on transparent huge pages where Linux offers them (madvise mode): a model's weights are streamed
    from memory once per image, 4 KB pages at a time a TLB miss each (ResNet-50's ~100 MB of packed
    weights, 25 K pages): ResNet-50 at batch 1 and 8 and ResNet-18 -1.1 to -1.4% a run (two
    simulators in one process, runs alternated), MobileNetV2 unchanged (its layers' weights are
    under 2 MB). ``ONNX_MRVL_SIM_HUGE_PAGES=0`` turns it off."""
    global _stagger
    n = 1
    for d in shape:
        n *= int(d)
    _stagger = (_stagger + 5) % 64
    buf = _buffer(n + 16 + 16 * 64, F32)
    off = (-buf.ctypes.data % 64) // 4 + 16 * (_stagger if n >= 1024 else 0)
    return buf[off:off + n].reshape(shape)


def pack_weights_f16(w: np.ndarray) -> np.ndarray:
    """[K, O] matrix of fp16 values -> float16 [ceil(O/16), K, 16] blocks (zeros past O), 64-byte
    aligned, for ``gemv_desc``."""
    k, o = w.shape
    nb = -(-o // 16)
    wp = np.zeros((k, nb * 16), np.float16)
    wp[:, :o] = w
    # a large FC's weights (VGG's first: 205 MB) stream from memory every run: on huge pages too
    # (_buffer; an 8192 x 4096 GEMV -2 to -3%)
    buf = _buffer(nb * k * 16 + 32, np.float16)
    off = (-buf.ctypes.data % 64) // 2
    out = buf[off:off + nb * k * 16].reshape(nb, k, 16)
    out[...] = wp.reshape(k, nb, 16).transpose(1, 0, 2)
    return out


def lane_groups(og: int) -> int:
    """Groups per 16-lane vector of a grouped conv with ``og`` output channels per group (1, 2, 4,
    8 or 16: the C kernel's conv_lanes_range), else 0 (each group its own blocks of NR channels)."""
    return 16 // og if og in (1, 2, 4, 8, 16) else 0


def pack_weights_lanes(w_mats, lanes: int) -> np.ndarray:
    """Per-group [K, og] matrices -> [ceil(G/lanes), K, 16] tiles, lane i * lanes + j holding
    output channel i of group j of the tile (zeros for the groups past G), 64-byte aligned."""
    g = len(w_mats)
    k, og = w_mats[0].shape
    tiles = -(-g // lanes)
    wl = np.zeros((tiles * lanes, k, og), F32)
    wl[:g] = np.stack(w_mats)
    out = empty((tiles, k, 16))
    out[...] = wl.reshape(tiles, lanes, k, og).transpose(0, 2, 3, 1).reshape(tiles, k, 16)
    return out


def stack_aligned(parts) -> np.ndarray:
    """Equal-shaped arrays stacked into one 64-byte aligned array (a grouped conv's packed weights)."""
    out = empty((len(parts),) + tuple(parts[0].shape))
    for i, p in enumerate(parts):
        out[i] = p
    return out


def padded(v: np.ndarray, multiple: int = NR, extra: int = 0) -> np.ndarray:
    """A per-channel vector zero-padded to a multiple of ``multiple`` plus ``extra`` zeros (the
    kernels read whole blocks; a grouped conv's last group reads up to NR past its offset)."""
    v = np.asarray(v, F32).reshape(-1)
    out = empty((-(-v.size // multiple) * multiple + extra,))
    out[:] = 0
    out[:v.size] = v
    return out
