"""Element-wise and data-movement kernels: Sum2D, Mul2D, Concat, Slice2D, Reshape, Resize, layout changes.

Sum2D / Mul2D compute in float32 (the sum or product of two fp16 values, then the activation) and
round to fp16; the data-movement kernels only move fp16 values, so they need no rounding.
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import jit, native
from .activations import make_activation
from .fp16 import round_fp16_, to_fp16_values
from .parallel import run_all, workers

F32 = np.float32

_PARALLEL_ELEMS = 1 << 18       # split a compiled element-wise pass over the workers from 256 K values
_LAYOUT_PERMS = {("NCHW", "NHWC"): (0, 2, 3, 1), ("NHWC", "NCHW"): (0, 3, 1, 2)}


def npc_dims(full: Tuple[int, ...], part: Tuple[int, ...]):
    """((N, P, C), (BN, BP, BC)) when a tensor of shape ``part`` broadcasts onto one of shape
    ``full`` as [N, P, C] against [N|1, P|1, C|1] (NHWC per-channel, per-image or SE-style
    operands, or the same shape); else None."""
    full, part = tuple(full), tuple(part)
    if not full or len(part) > len(full):
        return None
    pshape = (1,) * (len(full) - len(part)) + part
    if any(p not in (1, f) for p, f in zip(pshape, full)):
        return None
    n, c = (full[0], full[-1]) if len(full) > 1 else (1, full[0])
    mid = full[1:-1] if len(full) > 1 else ()
    pmid = pshape[1:-1] if len(full) > 1 else ()
    pm = int(np.prod(mid)) if mid else 1
    if all(d == 1 for d in pmid):
        bp = 1
    elif tuple(pmid) == tuple(mid):
        bp = pm
    else:
        return _grouped_npc(full, pshape)
    return (n, pm, c), (pshape[0] if len(full) > 1 else 1, bp, pshape[-1])


def _grouped_npc(full: Tuple[int, ...], pshape: Tuple[int, ...]):
    """npc_dims for other broadcasts: runs of consecutive axes the operand either has whole or
    broadcasts (axes of size 1 join either), at most three runs, as [N, P, C] (an attention mask
    [B, 1, S, S] onto the scores [B, H, S, S]: [B, H, S * S] against [B, 1, S * S]). C is then not
    the channel axis: a per-channel slope does not fit (``jit.act_args`` refuses it)."""
    runs = []                                    # [full size, operand size, operand whole]
    for f, p in zip(full, pshape):
        if f == 1:
            continue
        if runs and runs[-1][2] == (p == f):
            runs[-1][0] *= f
            runs[-1][1] *= p
        else:
            runs.append([f, p, p == f])
    if len(runs) > 3:
        return None
    runs = [[1, 1, True]] * (3 - len(runs)) + runs
    return tuple(r[0] for r in runs), tuple(r[1] for r in runs)


def _binary_views(a: np.ndarray, b: np.ndarray, act_spec):
    """(full operand as [N, P, C], other as [BN, BP, BC], activation args) for the one-pass
    kernels, or None when the shapes or the activation do not fit them."""
    if a.shape != np.broadcast_shapes(a.shape, b.shape):
        a, b = b, a                          # IEEE + and * commute bit for bit
    if a.dtype != F32 or a.shape != np.broadcast_shapes(a.shape, b.shape) or a.size == 0 \
            or not a.flags.c_contiguous:
        return None
    dims = npc_dims(a.shape, b.shape)
    if dims is None:
        return None
    spec = act_spec(dims[0][2])
    if spec is None:
        return None
    return a.reshape(dims[0]), np.ascontiguousarray(b, dtype=F32).reshape(dims[1]), spec


def _binary_jit(a: np.ndarray, b: np.ndarray, mul: bool, act_spec, act) -> Optional[Tuple[np.ndarray, bool]]:
    """The compiled one-pass form of a (+|*) b, activation, rounding; None when shapes don't fit."""
    views = _binary_views(a, b, act_spec)
    binary = None if views is None else jit.kernel("binary")   # compiled on first use
    if binary is None:
        return None
    a3, b3, (code, p0, p1, sl) = views
    out = np.empty(np.broadcast_shapes(a.shape, b.shape), dtype=F32)
    o3 = out.reshape(a3.shape)
    rows = a3.shape[1]
    parts = workers() if out.size >= _PARALLEL_ELEMS and rows >= 2 * workers() and a3.shape[0] == 1 else 1
    step = -(-rows // parts)

    def one(r0: int) -> bool:
        r1 = r0 + step
        bb = b3 if b3.shape[1] == 1 else b3[:, r0:r1]
        return bool(binary(a3[:, r0:r1], bb, o3[:, r0:r1], mul, code, p0, p1, sl))
    ok = all(run_all(one, list(range(0, rows, step))))
    if code < 0:                              # transcendental activation: finish in numpy
        r = act(out)
        if r is not out:
            out[...] = r
        ok = round_fp16_(out)
    return out, ok


def _binary_native(a: np.ndarray, b: np.ndarray, mul: bool, act_spec, act) -> Optional[Tuple[np.ndarray, bool]]:
    """The native one-pass form of a (+|*) b, activation, rounding; None when shapes don't fit."""
    views = _binary_views(a, b, act_spec)
    if views is None:
        return None
    a3, b3, (code, p0, p1, sl) = views
    slope = native.padded(sl, 16)
    out = native.empty(np.broadcast_shapes(a.shape, b.shape))
    ok = native.lib().binary_npc(a3.ctypes.data, b3.ctypes.data, out.ctypes.data, *a3.shape, *b3.shape,
                                 int(mul), slope.ctypes.data, int(code), float(p0), float(p1), workers())
    if code < 0:                              # transcendental activation: finish in numpy
        with np.errstate(over="ignore", invalid="ignore"):
            r = act(out)
        if r is not out:
            out[...] = r
        return out, round_fp16_(out)
    return out, ok == 1


def make_binary(op: str, operand=None, activation: str = "none",
                activation_params: Optional[Mapping] = None,
                slope=None) -> Callable[..., Tuple[np.ndarray, bool]]:
    """Prepared Sum2D ("add") / Mul2D ("mul"): f(a[, b]) -> (output, all finite).

    With one input, ``operand`` (fp16 values, broadcastable to ``a``) is the second operand.
    """
    ufunc = {"add": np.add, "mul": np.multiply}[op]
    const = None if operand is None else to_fp16_values(operand)
    act = make_activation(activation, activation_params, slope)
    specs = {}

    def act_spec(channels: int):
        """The compiled kernel's activation arguments; None (numpy path) for a slope that does
        not run along the last axis."""
        if channels not in specs:
            try:
                specs[channels] = jit.act_args(activation, activation_params, slope, channels)
            except ValueError:
                specs[channels] = None
        return specs[channels]

    def run(a: np.ndarray, b: Optional[np.ndarray] = None) -> Tuple[np.ndarray, bool]:
        other = b if b is not None else const
        if other is None:
            raise ValueError(f"{op} needs a second input or a constant operand")
        if native.on():
            done = _binary_native(np.asarray(a), np.asarray(other), op == "mul", act_spec, act)
            if done is not None:
                return done
        if jit.on():
            done = _binary_jit(np.asarray(a), np.asarray(other), op == "mul", act_spec, act)
            if done is not None:
                return done
        with np.errstate(over="ignore", invalid="ignore"):
            out = ufunc(a, other, dtype=F32)
            if not out.flags.c_contiguous:
                out = np.ascontiguousarray(out)
            if act is not None:
                r = act(out)
                if r is not out:
                    out[...] = r
            finite = round_fp16_(out)
        return out, finite
    return run


def sum2d(a, b=None, operand=None, activation="none", activation_params=None, slope=None):
    """a + b (numpy broadcasting) or a + operand, then the activation, rounded to fp16."""
    return make_binary("add", operand, activation, activation_params, slope)(
        to_fp16_values(a), None if b is None else to_fp16_values(b))[0]


def mul2d(a, b=None, operand=None, activation="none", activation_params=None, slope=None):
    """a * b (numpy broadcasting) or a * operand, then the activation, rounded to fp16."""
    return make_binary("mul", operand, activation, activation_params, slope)(
        to_fp16_values(a), None if b is None else to_fp16_values(b))[0]


def _into(out: Optional[np.ndarray], *xs: np.ndarray) -> bool:
    """``out`` given and apart from every input: a kernel may write its result there directly."""
    return out is not None and not any(np.may_share_memory(x, out) for x in xs)


def concat(xs: Sequence[np.ndarray], axis: int, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Concatenate along ``axis`` of the stored layout (3 = NHWC channels); into ``out`` when given
    (the static plan's buffer: no new array, one copy instead of two)."""
    xs = [np.asarray(x, dtype=F32) for x in xs]
    if _into(out, *xs):
        return np.concatenate(xs, axis=int(axis), out=out)
    return np.concatenate(xs, axis=int(axis))


def slice_channels(x: np.ndarray, axis: int, start: int, end: int, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Entries [start, end) of ``axis`` of the stored layout (3 = NHWC channels), step 1, as a
    contiguous copy (the values are already fp16: no rounding); into ``out`` when given."""
    axis = int(axis) % x.ndim
    part = x[(slice(None),) * axis + (slice(int(start), int(end)),)]
    if _into(out, x) and out.shape == part.shape:
        np.copyto(out, part)
        return out
    return np.array(part, dtype=F32, order="C", copy=True)


def reshape(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Row-major reshape of the stored tensor (``-1`` allowed once)."""
    return np.ascontiguousarray(x).reshape([int(d) for d in shape])


def resize_nearest(x: np.ndarray, scales: Sequence[int], out: Optional[np.ndarray] = None) -> np.ndarray:
    """Nearest-neighbour upsampling of NHWC by integer factors [sh, sw] (into ``out`` when given)."""
    sh, sw = (int(s) for s in scales)
    if sh < 1 or sw < 1:
        raise ValueError(f"resize scales must be integers >= 1, got {list(scales)}")
    if x.ndim != 4:
        raise ValueError(f"resize needs an NHWC tensor, got shape {list(x.shape)}")
    n, h, w, c = x.shape
    if _into(out, x) and out.shape == (n, h * sh, w * sw, c) and out.flags.c_contiguous:
        out.reshape(n, h, sh, w, sw, c)[...] = x[:, :, None, :, None, :]
        return out
    y = np.empty((n, h, sh, w, sw, c), dtype=F32)
    y[...] = x[:, :, None, :, None, :]
    return y.reshape(n, h * sh, w * sw, c)


def layout_transform(x: np.ndarray, src_layout: str, dst_layout: str) -> np.ndarray:
    """NCHW <-> NHWC as a contiguous copy (same layout: unchanged)."""
    src, dst = str(src_layout).upper(), str(dst_layout).upper()
    if src == dst:
        return np.ascontiguousarray(x, dtype=F32)
    perm = _LAYOUT_PERMS.get((src, dst))
    if perm is None:
        raise ValueError(f"layout_transform supports NCHW<->NHWC, not {src}->{dst}")
    if x.ndim != 4:
        raise ValueError(f"layout_transform {src}->{dst} needs a 4-D tensor, got shape {list(x.shape)}")
    if native.on() and x.size:
        x = np.ascontiguousarray(x, dtype=F32)
        n = x.shape[0]
        c, hw = (x.shape[1], x.shape[2] * x.shape[3]) if src == "NCHW" else (x.shape[3], x.shape[1] * x.shape[2])
        out = native.empty(tuple(x.shape[i] for i in perm))
        native.lib().transpose_layout(x.ctypes.data, out.ctypes.data, n, c, hw, int(src == "NCHW"), workers())
        return out
    return np.ascontiguousarray(x.transpose(perm), dtype=F32)
