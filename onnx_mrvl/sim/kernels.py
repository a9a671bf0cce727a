"""Conv2D and FC kernels: NHWC, numpy only, fp16 values in float32 containers.

Numeric model (docs/simulator.md): inputs and weights hold fp16 values; the products are exact in
float32 and accumulate in float32 (one sgemm); bias, scale, shift and the activation are applied
in float32; the output is rounded to fp16 (round to nearest even, overflow to inf).

``Conv2D`` / ``FC`` lay the weights out once and are then called per input (``apply`` also
returns whether every output is finite); ``conv2d`` / ``fc`` are the one-shot forms (they also
round their inputs to fp16 first).
The pooling and element-wise kernels live in ``pooling.py`` and ``tensor_ops.py``, ``FC`` in
``fc.py``, the shared bias / scale / activation epilogue in ``epilogue.py``; they are re-exported
here so ``kernels`` is the one namespace of every kernel.
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence, Tuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import jit, native
from .activations import make_activation
from .epilogue import F32, make_epilogue
from .fp16 import fp16_source, round_fp16_, to_fp16_values
from .parallel import run_all, workers
from .pooling import (avgpool2d, global_avgpool2d, global_maxpool2d, maxpool2d,  # noqa: F401
                      pool_output_size)
from .tensor_ops import concat, layout_transform, mul2d, reshape, resize_nearest, sum2d  # noqa: F401

_COLS_BLOCK = 1 << 21       # im2col elements per GEMM call (8 MB): few BLAS calls, bounded memory
_PARALLEL_MACS = 1 << 23    # split a conv into one row block per worker from ~8 M MACs on
                            # (a thread handoff costs ms when the cores are oversubscribed)
_PARALLEL_DW_MACS = 1 << 19  # the same for the (compiled) depthwise conv (~0.2 ms single-threaded)
_COLUMN_SPLIT_ROWS = 512     # below this many output pixels a parallel GEMM splits its output
                             # channels instead (a 25-row sgemm wastes most of the kernel)
_GEMM_PARTS = 4              # a parallel numpy GEMM's parts: a function of the shape alone, never of
                             # the worker count, as BLAS sums a matrix's edge rows / columns in another
                             # order than its interior (OpenBLAS on AVX2), so the bits follow the split


def conv_output_size(size: int, k: int, stride: int, pad_lo: int, pad_hi: int, dilation: int) -> int:
    return (size + pad_lo + pad_hi - dilation * (k - 1) - 1) // stride + 1


def _pad_nhwc(x: np.ndarray, pads: Sequence[int], value: float = 0.0) -> np.ndarray:
    t, l, b, r = (int(p) for p in pads)
    if not (t or l or b or r):
        return x
    n, h, w, c = x.shape
    out = np.full((n, h + t + b, w + l + r, c), value, dtype=x.dtype)
    out[:, t:t + h, l:l + w, :] = x
    return out


def _windows(xp: np.ndarray, oh: int, ow: int, kh: int, kw: int, sh: int, sw: int,
             dh: int, dw: int) -> np.ndarray:
    """Read-only view [N, OH, OW, KH, KW, C] of the windows of the padded NHWC input."""
    sn, sy, sx, sc = xp.strides
    return as_strided(xp, shape=(xp.shape[0], oh, ow, kh, kw, xp.shape[3]),
                      strides=(sn, sy * sh, sx * sw, sy * dh, sx * dw, sc), writeable=False)


class Conv2D:
    """A prepared Conv2D: weights laid out once as the sgemm right-hand side."""

    def __init__(self, kernel: np.ndarray, bias=None, scale=None, shift=None,
                 strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups: int = 1,
                 activation: str = "none", activation_params: Optional[Mapping] = None,
                 slope=None):
        k = np.asarray(kernel)
        if k.ndim != 4:
            raise ValueError(f"conv kernel must be OHWI [O,KH,KW,I/groups], got shape {list(k.shape)}")
        self.out_channels, self.kh, self.kw, self.cin_g = (int(d) for d in k.shape)
        self.groups = int(groups)
        if self.groups < 1 or self.out_channels % self.groups:
            raise ValueError(f"{self.out_channels} output channels do not split into {self.groups} groups")
        self.strides = tuple(int(s) for s in strides)
        self.padding = tuple(int(p) for p in padding)
        self.dilation = tuple(int(d) for d in dilation)
        if len(self.strides) != 2 or len(self.dilation) != 2 or len(self.padding) != 4:
            raise ValueError("strides and dilation need 2 values, padding 4 [top,left,bottom,right]")
        if min(self.strides + self.dilation) < 1 or min(self.padding) < 0:
            raise ValueError("strides and dilation must be >= 1 and padding >= 0")
        self.og = self.out_channels // self.groups
        self.depthwise = self.cin_g == 1 and self.groups > 1 and self.og >= 1
        if self.depthwise:
            kf = to_fp16_values(k)
            # [KH*KW, O]: one per-channel weight row per tap
            self.w_taps = np.ascontiguousarray(kf.reshape(self.out_channels, self.kh * self.kw).T)
            self._tiled = {}                    # output width -> tap weights tiled over it
            self._w_hwc = np.ascontiguousarray(self.w_taps.reshape(self.kh, self.kw, self.out_channels))
        else:
            # the kernel as float16 (the binary's array itself when it is one): the native GEMM packs
            # it directly; the float32 layouts of the numpy paths are built on their first use
            self._k16 = fp16_source(k)
            self._w_mats = None
            self._w_stack = None
            self._w_columns = {}                # part count -> weight column slices (small-M GEMMs)
        self.epilogue = make_epilogue(self.out_channels, bias, scale, shift, activation, activation_params, slope)
        self._plans = {}                        # input shape -> native kernel plan (``_plan``)
        self._packed = None                     # weights packed for the native GEMM
        self._epi_args = (bias, scale, shift, activation, activation_params, slope)

    def _mat_views(self):
        """Per group: the [KH*KW*I/g, O/g] weight matrix (float16 view), rows in (kh, kw, c) order,
        matching the im2col columns."""
        wg = self._k16.reshape(self.groups, self.og, self.kh * self.kw * self.cin_g)
        return [wg[g].T for g in range(self.groups)]

    @property
    def w_mats(self):
        """Per group: the float32 [KH*KW*I/g, O/g] weight matrix (numpy paths; built on first use)."""
        if self._w_mats is None:
            self._w_mats = [np.ascontiguousarray(m, dtype=F32) for m in self._mat_views()]
        return self._w_mats

    @property
    def w_stack(self) -> np.ndarray:
        """``w_mats`` stacked [G, KH*KW*I/g, O/g] (the numpy grouped GEMM; built on first use)."""
        if self._w_stack is None:
            self._w_stack = np.ascontiguousarray(np.stack(self.w_mats))
        return self._w_stack

    def output_shape(self, in_shape: Sequence[int]) -> Tuple[int, int, int, int]:
        n, h, w, _ = in_shape
        (sh, sw), (dh, dw), (t, l, b, r) = self.strides, self.dilation, self.padding
        return (int(n), conv_output_size(h, self.kh, sh, t, b, dh),
                conv_output_size(w, self.kw, sw, l, r, dw), self.out_channels)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.apply(x)[0]

    def apply(self, x: np.ndarray) -> Tuple[np.ndarray, bool]:
        """Run on fp16-valued float32 NHWC ``x``; returns (output, every output value finite)."""
        if x.ndim != 4 or x.shape[3] != self.cin_g * self.groups:
            raise ValueError(f"conv input must be NHWC with {self.cin_g * self.groups} channels, "
                             f"got shape {list(x.shape)}")
        plan = self._plans.get(x.shape)
        if plan is not None:                       # native kernel, this input shape seen before
            return self._run_plan(plan, x)
        n, oh, ow, o = self.output_shape(x.shape)
        if oh < 1 or ow < 1:
            raise ValueError(f"conv output would be empty for input shape {list(x.shape)}")
        if native.on():
            plan = self._plans[x.shape] = self._plan(x.shape, oh, ow)
            return self._run_plan(plan, x)
        with np.errstate(over="ignore", invalid="ignore"):
            if self.depthwise:
                return self._depthwise(x, n, oh, ow)
            return self._gemm(x, n, oh, ow)

    def _native_vectors(self, multiple: int, extra: int = 0):
        """(epilogue vectors padded to ``multiple`` (+ ``extra``), code, p0, p1, numpy activation for code < 0)."""
        bias, scale, shift, activation, params, slope = self._epi_args
        o = self.out_channels
        code, p0, p1, sl = jit.act_args(activation, params, slope, o)
        # absent bias / scale / shift: NULL, and the kernel skips the operation, as numpy does
        vecs = [None if v is None else native.padded(jit.channel_vector(v, o, 0.0), multiple, extra)
                for v in (bias, scale, shift)] + [native.padded(np.broadcast_to(sl, (o,)), multiple, extra)]
        act = make_activation(activation, params, slope) if code < 0 else None
        return vecs, int(code), float(p0), float(p1), act

    def fusable_sum(self, shape) -> bool:
        """Whether ``apply_with_residual`` can run on inputs of ``shape``: native dense conv whose
        activation the kernel finishes itself (not a transcendental one)."""
        if self.groups != 1 or not native.on():
            return False
        return self._native_vectors(native.NR)[1] >= 0

    def apply_with_residual(self, x: np.ndarray, res: np.ndarray, sum_act) -> Tuple[np.ndarray, bool, bool]:
        """This conv followed by a Sum2D with ``res`` (same shape as the conv output), in one pass:
        y = act2(fp16(conv(x)) + res) rounded to fp16, without storing the conv output. ``sum_act``
        is the Sum2D's (code >= 0, p0, p1, slope) of ``jit.act_args``. Returns (y, every conv value
        finite, every sum value finite) -- the values of the two layers run one after the other."""
        key = (x.shape, "sum", sum_act[0], float(sum_act[1]), float(sum_act[2]))
        plan = self._plans.get(key)
        if plan is None:
            n, oh, ow, _ = self.output_shape(x.shape)
            plan = self._plans[key] = self._plan(x.shape, oh, ow, sum_act)
        if res.shape != plan[3]:
            raise ValueError(f"Sum2D operand of shape {list(res.shape)} does not match the conv output {list(plan[3])}")
        if not x.flags.c_contiguous or x.dtype != F32:
            x = np.ascontiguousarray(x, dtype=F32)
        if not res.flags.c_contiguous or res.dtype != F32:
            res = np.ascontiguousarray(res, dtype=F32)
        out = native.empty(plan[3])
        ok = plan[0](plan[2], x.ctypes.data, out.ctypes.data, res.ctypes.data, workers())
        return out, bool(ok & 1), bool(ok & 2)

    def _plan(self, shape, oh: int, ow: int, sum_act=None):
        """Native kernel plan for one input shape: (entry point, descriptor, its address, output
        shape, channel multiplier, numpy activation for code < 0, the arrays the descriptor points
        into). ``sum_act``: the activation of a fused Sum2D (``apply_with_residual``)."""
        n, h, w, c = (int(d) for d in shape)
        o = self.out_channels
        (sh, sw), (dh, dw), (t, l, _, _) = self.strides, self.dilation, self.padding
        if self.depthwise:
            wts = native.empty((self.kh * self.kw, -(-o // 64) * 64))
            wts[...] = 0
            wts[:, :o] = self.w_taps
            vecs, code, p0, p1, act = self._native_vectors(64)
            width, fn, c = wts.shape[1], native.lib().depthwise_desc, o
        else:                                       # dense, or grouped: each group's blocks in turn
            wts = self._packed
            lanes = native.lane_groups(self.og) if self.groups > 1 else 0
            if wts is None:
                mats = self._mat_views()
                wts = native.pack_weights(mats[0]) if self.groups == 1 else \
                    native.pack_weights_lanes(mats, lanes) if lanes else \
                    native.stack_aligned([native.pack_weights(m) for m in mats])
            self._packed = wts                      # shared by every plan of this conv
            vecs, code, p0, p1, act = self._native_vectors(native.NR, 0 if self.groups == 1 else native.NR)
            width, fn = o, native.lib().conv_desc
        fused = (0, 0.0, 0.0, None)
        if sum_act is not None:
            fused = (int(sum_act[0]), float(sum_act[1]), float(sum_act[2]), native.padded(sum_act[3]))
        desc = native.descriptor((n, h, w, c, oh, ow, self.kh, self.kw, sh, sw, dh, dw, t, l, width),
                                 wts, vecs, code, p0, p1, fused, 1 if self.depthwise else self.groups,
                                 0 if self.depthwise else lanes)
        return fn, desc, desc.ctypes.data, (n, oh, ow, o), self.og if self.depthwise else 1, act, (wts, vecs, fused)

    def _run_plan(self, plan, x: np.ndarray) -> Tuple[np.ndarray, bool]:
        fn, _, desc, shape, mult, act, _ = plan
        if mult > 1:
            x = np.repeat(x, mult, axis=3)
        if not x.flags.c_contiguous or x.dtype != F32:
            x = np.ascontiguousarray(x, dtype=F32)
        out = native.empty(shape)
        if self.depthwise:
            ok = fn(desc, x.ctypes.data, out.ctypes.data, workers())
        else:
            ok = fn(desc, x.ctypes.data, out.ctypes.data, None, workers())
        return self._native_finish(out, ok, act)

    @staticmethod
    def _native_finish(out: np.ndarray, ok: int, act) -> Tuple[np.ndarray, bool]:
        if act is None:
            return out, bool(ok & 1)
        y = out.reshape(-1, out.shape[-1])
        with np.errstate(over="ignore", invalid="ignore"):
            r = act(y)                           # transcendental activation: numpy finishes it
        if r is not y:
            y[...] = r
        return out, round_fp16_(y)

    def _gemm(self, x: np.ndarray, n: int, oh: int, ow: int) -> Tuple[np.ndarray, bool]:
        kh, kw, (sh, sw), (dh, dw) = self.kh, self.kw, self.strides, self.dilation
        c, o = x.shape[3], self.out_channels
        out = np.empty((n, oh, ow, o), dtype=F32)
        nw = _GEMM_PARTS                # blocks by the shape, not the worker count: the same bits
        rows, kk = n * oh * ow, kh * kw * self.cin_g
        if (self.groups == 1 and rows < _COLUMN_SPLIT_ROWS and o >= 128
                and rows * kk * o >= 4 * _PARALLEL_MACS):
            return self._gemm_column_split(x, out, max(2, min(nw, o // 64)))
        if kh == kw == 1 and self.padding == (0, 0, 0, 0) and self.groups == 1:
            src = x if sh == sw == 1 else x[:, ::sh, ::sw, :][:, :oh, :ow, :]
            src = np.ascontiguousarray(src).reshape(-1, c)
            o2 = out.reshape(-1, o)
            parts = nw if rows * c * o >= _PARALLEL_MACS and rows >= 2 * nw else 1
            step = -(-rows // parts)

            def one(p0: int) -> bool:
                blk = o2[p0:p0 + step]
                np.matmul(src[p0:p0 + step], self.w_mats[0], out=blk)
                return self.epilogue(blk)
            return out, all(run_all(one, list(range(0, rows, step))))
        xp = _pad_nhwc(x, self.padding)
        cg, g, og = self.cin_g, self.groups, self.og
        win = _windows(xp, oh, ow, kh, kw, sh, sw, dh, dw)
        rows_oh = max(1, _COLS_BLOCK // (kk * g * ow))
        if n * oh * ow * kk * o >= _PARALLEL_MACS * g and n * oh >= 2 * nw:
            rows_oh = min(rows_oh, -(-(n * oh) // nw))       # at least _GEMM_PARTS blocks
        blocks = [(b, y0, min(oh, y0 + rows_oh)) for b in range(n) for y0 in range(0, oh, rows_oh)]

        def one(block) -> bool:
            b, y0, y1 = block
            rows = (y1 - y0) * ow
            blk = out[b, y0:y1].reshape(rows, o)
            if g == 1:
                cols = win[b, y0:y1].reshape(rows, kk)                  # the one im2col copy
                np.matmul(cols, self.w_mats[0], out=blk)
            else:                                                       # [G, rows, KH*KW*I/g] copy
                v = win[b, y0:y1].reshape(y1 - y0, ow, kh, kw, g, cg).transpose(4, 0, 1, 2, 3, 5)
                cols = np.ascontiguousarray(v).reshape(g, rows, kk)
                res = np.matmul(cols, self.w_stack)                     # [G, rows, O/g]
                blk.reshape(rows, g, og)[...] = res.transpose(1, 0, 2)
            return self.epilogue(blk)
        return out, all(run_all(one, blocks))

    def _gemm_column_split(self, x: np.ndarray, out: np.ndarray, parts_n: int) -> Tuple[np.ndarray, bool]:
        """Few output pixels, many channels: one im2col, then each of ``parts_n`` parts multiplies it by
        its own contiguous slice of the weight columns; the epilogue runs once on the assembled rows."""
        n, oh, ow, o = out.shape
        kh, kw, (sh, sw), (dh, dw) = self.kh, self.kw, self.strides, self.dilation
        win = _windows(_pad_nhwc(x, self.padding), oh, ow, kh, kw, sh, sw, dh, dw)
        cols = np.ascontiguousarray(win).reshape(n * oh * ow, kh * kw * self.cin_g)
        parts = self._w_columns.get(parts_n)
        if parts is None:                   # benign race: every thread computes the same slices
            bounds = np.linspace(0, o, parts_n + 1).astype(int)
            parts = self._w_columns[parts_n] = [(int(a), int(b), np.ascontiguousarray(self.w_mats[0][:, a:b]))
                                                for a, b in zip(bounds[:-1], bounds[1:])]
        o2 = out.reshape(-1, o)

        def one(part) -> None:
            a, b, w = part
            o2[:, a:b] = np.matmul(cols, w)
        run_all(one, parts)
        return out, self.epilogue(o2)

    def _depthwise(self, x: np.ndarray, n: int, oh: int, ow: int) -> Tuple[np.ndarray, bool]:
        """Depthwise conv: the compiled kernel when ``jit.on()``, else (numpy) per-channel taps as
        one einsum over a strided window view (no im2col copy).

        Output columns and channels merge into one contiguous axis of length OW*O (the einsum's
        inner loop) against the tap weights tiled over OW; a width stride > 1 reads each tap
        column from a contiguous phase copy of the input (one einsum per tap column).
        """
        kh, kw, (sh, sw), (dh, dw) = self.kh, self.kw, self.strides, self.dilation
        mult = self.og
        xs = x if mult == 1 else np.repeat(x, mult, axis=3)
        compiled = jit.kernel("depthwise")             # compiled on first use, None if off
        if compiled is not None:
            return self._depthwise_jit(compiled, np.ascontiguousarray(xs), n, oh, ow)
        xp = np.ascontiguousarray(_pad_nhwc(xs, self.padding))
        o = self.out_channels
        wt = self._tiled.get(ow)
        if wt is None:
            wt = np.ascontiguousarray(np.tile(self.w_taps.reshape(kh, kw, o), (1, 1, ow)))
            self._tiled[ow] = wt                # benign race: every thread computes the same array
        if sw == 1:
            sn, sy, sx, sc = xp.strides
            view = as_strided(xp, shape=(n, oh, kh, kw, ow * o), strides=(sn, sy * sh, sy * dh, sx * dw, sc),
                              writeable=False)
            out = np.einsum("nhijm,ijm->nhm", view, wt)
        else:
            # column ow*sw + j*dw lives in phase p = (j*dw) % sw at column ow + (j*dw) // sw, and each
            # phase (every sw-th column, copied once) is contiguous over (columns, channels)
            phases = {}
            out = None
            for j in range(kw):
                p, q = (j * dw) % sw, (j * dw) // sw
                ph = phases.get(p)
                if ph is None:
                    ph = phases[p] = np.ascontiguousarray(xp[:, :, p::sw, :])
                sn, sy, _, sc = ph.strides
                view = as_strided(ph[:, :, q:, :], shape=(n, oh, kh, ow * o), strides=(sn, sy * sh, sy * dh, sc),
                                  writeable=False)
                part = np.einsum("nhim,im->nhm", view, wt[:, j])
                if out is None:
                    out = part
                else:
                    out += part
        out = np.ascontiguousarray(out.reshape(n, oh, ow, o), dtype=F32)
        return out, self.epilogue(out.reshape(-1, o))

    def _depthwise_jit(self, depthwise, xs: np.ndarray, n: int, oh: int, ow: int
                       ) -> Tuple[np.ndarray, bool]:
        """Per row block: the compiled tap sums (``depthwise``), then the compiled epilogue."""
        o, w = self.out_channels, self._w_hwc
        out = np.empty((n, oh, ow, o), dtype=F32)
        (sh, sw), (dh, dw), (t, l, _, _) = self.strides, self.dilation, self.padding
        nw = workers()
        parts = nw if n * oh * ow * o * self.kh * self.kw >= _PARALLEL_DW_MACS and oh >= 2 * nw else 1
        step = -(-oh // parts)

        def one(y0: int) -> bool:
            y1 = min(oh, y0 + step)
            depthwise(xs, w, out, y0, y1, sh, sw, t, l, dh, dw)
            return all([self.epilogue(out[b, y0:y1].reshape(-1, o)) for b in range(n)])
        return out, all(run_all(one, list(range(0, oh, step))))


def prepare_conv2d(kernel, **kw) -> Conv2D:
    return Conv2D(kernel, **kw)


def conv2d(x, kernel, bias=None, scale=None, shift=None, strides=(1, 1), padding=(0, 0, 0, 0),
           dilation=(1, 1), groups=1, activation="none", activation_params=None, slope=None):
    """One-shot NHWC conv: x [N,H,W,C], kernel OHWI [O,KH,KW,C/groups] -> fp16 values [N,OH,OW,O]."""
    conv = Conv2D(kernel, bias=bias, scale=scale, shift=shift, strides=strides, padding=padding,
                  dilation=dilation, groups=groups, activation=activation,
                  activation_params=activation_params, slope=slope)
    return conv(to_fp16_values(x))


from .fc import FC, GEMV_ROWS, fc  # noqa: E402,F401 - the facade (fc.py imports Conv2D lazily)

__all__ = ["Conv2D", "FC", "GEMV_ROWS", "conv2d", "fc", "prepare_conv2d", "conv_output_size", "maxpool2d", "avgpool2d",
           "global_avgpool2d", "global_maxpool2d", "pool_output_size", "sum2d", "mul2d", "concat", "reshape",
           "resize_nearest", "layout_transform"]
