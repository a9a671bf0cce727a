"""A recurrent layer's timestep loop in C (``_native_rnn.c``): one call per direction instead of ~15
numpy calls a step (a BiLSTM of 39 steps spent ~90% of its 10 ms in them).

Numerics (docs/simulator.md "Recurrent layers"): ``h R^T`` sums each output's products in order of
k in float32 (``sequential_sum``, the order of the native FC / conv kernels) where the numpy path
calls numpy's matmul (OpenBLAS's order); the cell update is the numpy steps of ``recurrent.py``
operation by operation, with numpy's own float32 tanh loop (its address read from ``np.tanh``).
Checked once per process: LSTM (peepholes, clip), GRU (both ``linear_before_reset`` forms), RNN,
int8 scales and per-row lengths against the numpy loop with ``sequential_sum``, bit for bit; where
a bit differs the numpy loop runs, as before. Layers with other cell activations, a quantized state
or int8 Y codes (``recurrent_int8.py``'s options) run the numpy loop.
"""
from __future__ import annotations

import ctypes
import logging
import os
from typing import Optional

import numpy as np

from . import native, parallel
from .activations import sigmoid, tanh
from .native_loader import OnceLibrary
from ..errors import MrvlRuntimeError

log = logging.getLogger(__name__)
_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native_rnn.c")
F32 = np.float32
CELLS = {"LSTM": 0, "GRU": 1, "RNN": 2}
KINDS = {sigmoid: 0, tanh: 1}            # _native_rnn.c ACT_*: the bound functions activation_fns returns


def sequential_sum(h: np.ndarray, rt: np.ndarray) -> np.ndarray:
    """``h [B, K] @ rt [K, N]`` the native way: each product rounded to fp32, added in order of k from 0."""
    acc = np.zeros((h.shape[0], rt.shape[1]), F32)
    for k in range(h.shape[1]):
        acc += h[:, k:k + 1] * rt[k]
    return acc


def ufunc_loop(uf: np.ufunc):
    """(address, data) of ``uf``'s inner loop on float32 arguments, read from the public fields of
    numpy's PyUFuncObject (after the object header: nin, nout, nargs, identity, functions, data,
    ntypes, reserved1, name, types), or None when the fields do not describe ``uf``."""
    base, fnum = id(uf) + object.__basicsize__, np.dtype(F32).num
    ints = [ctypes.c_int.from_address(base + 4 * i).value for i in range(3)]
    ptr = lambda off: ctypes.c_void_p.from_address(base + off).value  # noqa: E731
    funcs, data, ntypes, name, types = ptr(16), ptr(24), ctypes.c_int.from_address(base + 32).value, ptr(40), ptr(48)
    if ints != [uf.nin, uf.nout, uf.nargs] or ntypes != uf.ntypes or not (funcs and name and types) \
            or ctypes.string_at(name) != uf.__name__.encode():
        return None
    nargs = uf.nargs
    for i in range(ntypes):
        if all(ctypes.c_ubyte.from_address(types + i * nargs + a).value == fnum for a in range(nargs)):
            fn = ctypes.c_void_p.from_address(funcs + 8 * i).value
            return (fn, ctypes.c_void_p.from_address(data + 8 * i).value if data else None) if fn else None
    return None


def _tanh_same(loop) -> bool:
    """np.tanh's loop called directly gives np.tanh's bits (specials, random values, short arrays)."""
    from .activations_native import probe_values
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(loop[0])
    x = probe_values()
    for part in (x, x[:1], x[5:12], x[40:57]):
        out = np.empty_like(part)
        args = (ctypes.c_void_p * 2)(part.ctypes.data, out.ctypes.data)
        dims, steps = (ctypes.c_ssize_t * 1)(part.size), (ctypes.c_ssize_t * 2)(4, 4)
        fn(args, dims, steps, loop[1])
        with np.errstate(all="ignore"):
            want = np.tanh(part)
        if not np.array_equal(np.isnan(want), np.isnan(out)) or \
                not np.array_equal(want[~np.isnan(want)].view(np.uint32), out[~np.isnan(out)].view(np.uint32)):
            return False
    return True


def _product_same(so) -> bool:
    """rnn_product against ``sequential_sum`` (times the int8 scale): fp32 sums bit for bit, on
    sizes with and without a tail block, one and two threads."""
    rng = np.random.default_rng(1)
    for hid, gates, batch in ((5, 4, 1), (37, 3, 2), (130, 4, 3), (64, 1, 1)):
        rt = (rng.standard_normal((hid, gates * hid)) * 0.3).astype(np.float16).astype(F32)
        h = rng.uniform(-1, 1, (batch, hid)).astype(np.float16).astype(F32)
        packed = pack(rt, gates, hid)
        for scale in (None, (rng.random(gates * hid) * 1e-2).astype(F32)):
            want = sequential_sum(h, rt) if scale is None else sequential_sum(h, rt) * scale
            for threads in (1, 2):
                got = np.empty((batch, gates * hid), F32)
                so.rnn_product(packed.ctypes.data, None if scale is None else scale.ctypes.data, h.ctypes.data,
                               got.ctypes.data, batch, hid, gates, 0, gates, threads)
                if not np.array_equal(want.view(np.uint32), got.view(np.uint32)):
                    return False
    return True


def _check_layers():
    """(layer, x, state inputs) covering every native branch, seeded."""
    from .recurrent import Recurrent, activation_fns
    from .recurrent_int8 import Int8Recurrent
    rng = np.random.default_rng(0)
    f16 = lambda *s: (rng.standard_normal(s) * 0.4).astype(np.float16).astype(F32)  # noqa: E731
    out = []
    for cell, g, kw in (("LSTM", 4, {}), ("LSTM", 4, {"peepholes": f16(6, 37), "clip": 2.5}),
                        ("GRU", 3, {}), ("GRU", 3, {"linear_before_reset": 1}), ("RNN", 1, {"clip": 1.5})):
        dirs, hid = 2, 37
        acts = activation_fns({"LSTM": ["sigmoid", "tanh", "tanh"], "GRU": ["sigmoid", "tanh"],
                               "RNN": ["tanh"]}[cell] * dirs, None, None)
        layer = Recurrent(cell, f16(dirs, g * hid, 7), f16(dirs, g * hid, hid), bias=f16(dirs, 2 * g * hid) * 4,
                          direction="bidirectional", activations=acts, **kw)
        out.append((layer, f16(9, 3, 7) * 3, {"initial_h": f16(dirs, 3, hid)}))
        out.append((layer, f16(9, 3, 7) * 3, {"sequence_lens": np.array([9, 0, 4], F32)}))
    acts = activation_fns(["sigmoid", "tanh", "tanh"], None, None)
    q = rng.integers(-128, 128, (1, 4 * 45, 45)).astype(np.int8)
    layer = Int8Recurrent("LSTM", rng.integers(-128, 128, (1, 180, 5)).astype(np.int8), q,
                          (rng.random(180) * 1e-2 + 1e-3).astype(F32), (rng.random(180) * 3e-3 + 1e-3).astype(F32),
                          (0.05, 128, "uint8"), recurrence_zero_point=np.full(180, -3), direction="reverse",
                          activations=acts)
    out.append((layer, f16(11, 2, 5) * 3, {}))
    return out


def _load() -> ctypes.CDLL:
    so = native.load_on_pool(_SRC, "rnn_set_runner")
    so.rnn_direction.restype = ctypes.c_int
    so.rnn_direction.argtypes = [ctypes.c_void_p]
    so.rnn_product.restype = None
    so.rnn_product.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long] * 5 + [ctypes.c_int]
    if not _product_same(so):
        raise RuntimeError("its h R^T differs from the sums in order of k")
    loop = ufunc_loop(np.tanh)
    if loop is None or not _tanh_same(loop):
        raise RuntimeError("np.tanh's float32 loop could not be called directly with the same bits")
    so.tanh_loop = loop
    with np.errstate(all="ignore"):
        for layer, x, state in _check_layers():
            layer.use_native, layer.hr_sum = False, sequential_sum
            want, ok_w = layer.apply(x, **state)
            layer.use_native, layer.hr_sum = so, np.matmul
            got, ok = layer.apply(x, **state)
            if ok != ok_w or not np.array_equal(want.view(np.uint32), got.view(np.uint32)):
                raise RuntimeError(f"its {layer.cell} differs from the numpy loop in order of k")
    return so


_LIBRARY = OnceLibrary(_load, "native recurrent loop", "numpy", log)
lib, why_disabled = _LIBRARY.get, _LIBRARY.reason


def plan(layer) -> Optional[list]:
    """Per direction the keep-alive arrays of the native loop of ``layer`` (a ``recurrent.Recurrent``),
    or None when its cell activations, a quantized state or int8 Y codes keep it on numpy, or
    when R^T does not hold fp16 values (the packed operand)."""
    kinds = [KINDS.get(fn) for acts in layer.acts for fn in acts]
    if None in kinds or getattr(layer, "state_q", None) is not None or layer.keep_h32:
        return None
    out = []
    for d in range(layer.dirs):
        packed = pack(layer.rt[d], layer.gates, layer.hid)
        if packed is None:
            return None
        scale = None
        if hasattr(layer, "mh"):
            scale = np.ascontiguousarray(layer.mh[d], F32)
        peep = None if layer.peep is None else np.ascontiguousarray(layer.peep[d], F32)
        rbh = np.ascontiguousarray(layer.rb_h[d], F32) if layer.lbr else None
        out.append((packed, scale, peep, rbh, kinds[d * len(layer.acts[0]):(d + 1) * len(layer.acts[0])]))
    return out


def pack(rt: np.ndarray, gates: int, hid: int) -> Optional[np.ndarray]:
    """R^T [H, G*H] as the kernel reads it: fp16 [gate, ceil(H/8), k, 8], zeros past H; None when a
    value is not an fp16 value."""
    nb = -(-hid // 8)
    per_gate = rt.reshape(hid, gates, hid).transpose(1, 2, 0)           # [gate, o, k]
    p = np.zeros((gates, nb * 8, hid), np.float16)
    p[:, :hid] = per_gate
    if not np.array_equal(p[:, :hid].astype(F32), per_gate):
        return None
    return np.ascontiguousarray(p.reshape(gates, nb, 8, hid).transpose(0, 1, 3, 2))


def run(so, layer, prepared, d: int, xw: np.ndarray, h: np.ndarray, c, active, y: np.ndarray) -> bool:
    """Direction ``d`` of ``layer`` over every timestep: fills y[:T, d], leaves the final states in
    ``h`` / ``c`` (float32 [B, H], C-contiguous); True when every state is finite."""
    packed, scale, peep, rbh, kinds = prepared[d]
    steps, batch = xw.shape[0], xw.shape[1]
    kinds = kinds + [0] * (3 - len(kinds))
    act = None if active is None else np.ascontiguousarray(active.reshape(steps, batch), np.uint8)
    clip = int(np.array(layer.clip, F32).view(np.int32))
    addr = lambda a: 0 if a is None else a.ctypes.data  # noqa: E731
    desc = np.array([CELLS[layer.cell], steps, batch, layer.hid, int(layer.reverse or d == 1)] + kinds
                    + [clip, int(layer.lbr), xw.ctypes.data, packed.ctypes.data, addr(scale), addr(peep), addr(rbh),
                       h.ctypes.data, addr(c), addr(act), y.ctypes.data + 4 * d * batch * layer.hid,
                       layer.dirs * batch * layer.hid, so.tanh_loop[0], so.tanh_loop[1] or 0, parallel.workers()],
                    dtype=np.int64)
    ok = so.rnn_direction(desc.ctypes.data)
    if ok < 0:
        raise MrvlRuntimeError(f"the native {layer.cell} loop ran out of memory")
    return bool(ok)
