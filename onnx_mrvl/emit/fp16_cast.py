"""float32 -> float16 casts of large weights through onnxruntime's Cast kernel (MLAS: F16C/AVX-512
where the CPU has them), bit-identical to numpy's ``astype(np.float16)`` and about 3-10x cheaper than
numpy's scalar loop (VGG-19: 143M weights cast per conversion).

Identity is checked, not assumed: on first use the kernel casts a probe (float32 bit patterns spread
over the whole range, the ties between neighbouring float16 values and the float32 values either
side of each, subnormals, the overflow edge, infinities, NaN) and every result must equal numpy's
bit for bit (NaN: any NaN). Without onnxruntime, or
on any difference or error, every cast is numpy's. Arrays below ``MIN_SIZE`` elements and strided
views the kernel cannot read in row blocks are cast by numpy too.
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Callable, Optional, Sequence, Tuple

import numpy as np

from .. import file_weights
from .. import blocks

log = logging.getLogger(__name__)
MIN_SIZE = 1 << 16        # elements: smaller arrays are cast by numpy (a kernel call costs ~20 us)
BLOCK = 1 << 22           # elements cast per kernel call for a permuted view (row blocks)
_LOCK = threading.Lock()
_STATE = {"session": None, "checked": False}


def _make_session():
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], "fp16_cast",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = min(model.ir_version, 8)
    onnx.checker.check_model(file_weights.inline(model))
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(file_weights.serialized(model), options, providers=["CPUExecutionProvider"])


def _run(session, src: np.ndarray, out: np.ndarray) -> None:
    """Cast the contiguous 1-D float32 ``src`` into the contiguous float16 ``out`` (same size)."""
    io = session.io_binding()
    io.bind_cpu_input("x", src)
    io.bind_output("y", "cpu", 0, np.float16, [src.size], out.ctypes.data)
    session.run_with_iobinding(io)


def _probe() -> np.ndarray:
    """float32 values over the whole range (every exponent), the ties between neighbouring float16
    values and the float32 values either side of each tie (round to nearest even), and the edges."""
    spread = np.arange(0, 1 << 32, 65521, dtype=np.uint64).astype(np.uint32).view(np.float32)
    halves = np.arange(0, 1 << 16, 7, dtype=np.uint16).view(np.float16)
    halves = halves[np.isfinite(halves)]
    lo = halves.astype(np.float32)
    hi = np.nextafter(halves, np.where(np.signbit(halves), np.float16(-np.inf), np.float16(np.inf))).astype(np.float32)
    ties = (lo.astype(np.float64) + hi) / 2
    ties = ties[np.isfinite(ties)].astype(np.float32)
    edges = np.array([0.0, -0.0, 65504.0, 65519.99, 65520.0, -65520.0, 6.1035156e-05, 5.9604645e-08,
                      2.9802322e-08, 2.9802326e-08, 1.0 / 3, np.inf, -np.inf, np.nan], np.float32)
    return np.concatenate([spread, ties, np.nextafter(ties, np.float32(np.inf)),
                           np.nextafter(ties, np.float32(-np.inf)), edges])


def _session():
    """The checked Cast session, or None (numpy casts)."""
    if _STATE["checked"]:
        return _STATE["session"]
    with _LOCK:
        if not _STATE["checked"]:
            session = None
            try:
                session = _make_session()
                x = _probe()
                got = np.empty(x.size, np.float16)
                _run(session, x, got)
                with np.errstate(over="ignore", invalid="ignore"):
                    want = x.astype(np.float16)
                same = (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))
                if not same.all():
                    log.info("onnxruntime's float16 Cast differs from numpy on %d of %d probe values: numpy casts",
                             int((~same).sum()), x.size)
                    session = None
            except Exception as exc:  # noqa: BLE001 - no onnxruntime, or a kernel that fails: numpy casts
                log.info("onnxruntime's float16 Cast is not usable (%s: %s): numpy casts", type(exc).__name__, exc)
                session = None
            _STATE["session"], _STATE["checked"] = session, True
    return _STATE["session"]


def _flat_base(arr: np.ndarray):
    """(the flat float32 view of the C-contiguous memory ``arr`` is a view into, ``arr``'s offset in
    it in elements), or None."""
    base = arr
    while isinstance(base.base, np.ndarray):
        base = base.base
    if not base.flags.c_contiguous or base.nbytes % 4:
        return None
    offset = arr.ctypes.data - base.ctypes.data
    if offset < 0 or offset % 4:
        return None
    return base.reshape(-1).view(np.float32), offset // 4


def to_float16(arr: np.ndarray) -> np.ndarray:
    """``np.ascontiguousarray(arr, dtype=np.float16)`` of a float32 ``arr`` (any strides), the
    same bits (module docstring)."""
    return _cast(arr, False)[0]


def to_float16_checked(arr: np.ndarray) -> Tuple[np.ndarray, bool]:
    """(``to_float16(arr)``, whether every value of it is finite): for a float32 ``arr`` the same as
    ``-65520 < arr.min() and arr.max() < 65520`` (a float32 rounds to a finite float16 exactly when
    its magnitude is below 65520; NaN is not finite), checked on the float16 blocks as they are cast."""
    return _cast(arr, True)


def finite16(data: np.ndarray) -> bool:
    """No inf or NaN in the float16 array ``data`` (no value with every exponent bit set)."""
    if data.size == 0:
        return True
    bits = np.ascontiguousarray(data).reshape(-1).view(np.uint16)
    # +inf / +NaN are 0x7C00-0x7FFF, the largest as int16; -inf / -NaN 0xFC00-0xFFFF, the largest
    # as uint16: two reductions without a temporary array
    return int(bits.view(np.int16).max()) < 0x7C00 and int(bits.max()) < 0xFC00


def _whole(arr: np.ndarray, check: bool, out: Optional[np.ndarray] = None) -> Tuple[np.ndarray, bool]:
    if out is None:
        out = np.ascontiguousarray(arr, dtype=np.float16)
    else:
        np.copyto(out, arr, casting="unsafe")   # the same cast loop as astype
    return out, finite16(out) if check else True


def _cast(arr: np.ndarray, check: bool, out: Optional[np.ndarray] = None) -> Tuple[np.ndarray, bool]:
    """The cast in blocks of ``BLOCK`` elements, spread over the cores (onnxruntime's kernel and
    numpy's copies release the GIL: ``blocks.run_all``); each block checked as it is cast.
    ``out``: the C-contiguous float16 array of ``arr``'s shape written (else a new one)."""
    if arr.dtype != np.float32 or arr.size < MIN_SIZE or arr.ndim == 0:
        return _whole(arr, check, out)
    session = _session()
    if session is None:
        return _whole(arr, check, out)
    if out is None:
        out = np.empty(arr.shape, np.float16)
    if arr.flags.c_contiguous:
        src, dst = arr.reshape(-1), out.reshape(-1)

        def flat_block(i: int) -> bool:
            j = min(i + BLOCK, src.size)
            _run(session, src[i:j], dst[i:j])
            return finite16(dst[i:j]) if check else True

        return out, all(blocks.run_all(flat_block, range(0, src.size, BLOCK)))
    # a permuted view of contiguous memory whose first axis is the outermost (OIHW -> OHWI kernels,
    # NCHW-flatten FC columns): cast whole rows of the memory, then reorder them in float16
    strides, shape = arr.strides, arr.shape
    flat = _flat_base(arr)
    row = int(np.prod(shape[1:]))
    inner = sum((n - 1) * s for n, s in zip(shape[1:], strides[1:]))
    if (flat is None or any(s < 0 or s % 4 for s in strides) or strides[0] != row * 4
            or inner + 4 > strides[0] or flat[1] + shape[0] * row > flat[0].size):
        return _whole(arr, check, out)
    base, start = flat
    rows = max(1, BLOCK // row)
    half_strides = tuple(s // 2 for s in strides)
    starts = range(0, shape[0], rows)
    # one scratch block per thread at work, made here (memory a worker thread allocates stays in
    # its own malloc arena once freed) and handed from block to block
    scratch: "queue.SimpleQueue[np.ndarray]" = queue.SimpleQueue()
    for _ in range(min(blocks.workers(), len(starts))):
        scratch.put(np.empty(min(rows, shape[0]) * row, np.float16))

    def row_block(i: int) -> bool:
        j = min(i + rows, shape[0])
        buf = scratch.get()
        try:
            half = buf[:(j - i) * row]
            _run(session, base[start + i * row:start + j * row], half)
            out[i:j] = np.lib.stride_tricks.as_strided(half, (j - i,) + shape[1:], half_strides, writeable=False)
        finally:
            scratch.put(buf)
        return finite16(out[i:j]) if check else True

    return out, all(blocks.run_all(row_block, starts))


class Float16Cast:
    """The float16 cast of a float32 array over immutable memory (C order, then ``shape``), made where it is
    stored: ``write_into`` casts straight into the caller's memory (pack: the model binary's
    bytes), so no float16 copy is made first. The values are checked finite as they are cast;
    ``overflow()`` is called (it raises) when one is not. Looks like the array to ``pack``
    (``shape``, ``dtype``, ``nbytes``)."""

    __slots__ = ("src", "shape", "dtype", "nbytes", "overflow")

    def __init__(self, src: np.ndarray, shape: Optional[Sequence[int]], overflow: Callable[[], None]):
        self.src, self.overflow = src, overflow
        self.shape = tuple(int(d) for d in (src.shape if shape is None else shape))
        if int(np.prod(self.shape, dtype=np.int64)) != src.size:
            raise ValueError(f"cannot reshape array of size {src.size} into shape {self.shape}")
        self.dtype = np.dtype(np.float16)
        self.nbytes = src.size * 2

    def write_into(self, out: np.ndarray) -> None:
        """Cast into the uint8 array ``out`` (``nbytes`` long, C-contiguous)."""
        with np.errstate(over="ignore", invalid="ignore"):
            _, finite = _cast(self.src, True, out.view(np.float16).reshape(self.src.shape))
        if not finite:
            self.overflow()
