"""int8 Conv2D / FC that onnxruntime runs in float (``requant: "float"``, docs/simulator.md "int8 layers").

Where onnxruntime's QDQ transformer leaves ``DQ -> Conv -> Q`` unfused (an S8 input DQ shared by
other readers, for instance), it dequantizes the input, runs its float Conv (MLAS SGEMM on the
im2col columns, or on the input itself for a 1x1) on fp32 weights ``fp32(q_w * s_w)``, adds the
bias ``fp32(q_b * s_b)`` (the model's stored bias scale), applies Relu/Clip and quantizes. The sum
order decides near-ties, so this layer follows MLAS: per output a chain of fused multiply-adds
over k = (input channel, kernel row, kernel column) in order, in K blocks whose sums are added to
the output (MlasSgemmOperation's stride rule, ``mlas_stride_k``: 256 for a 1x1 conv of 64 pixels); each FMA is emulated as an exact float64 product plus
the fp32 accumulator rounded to fp32 (one rounding; a double rounding of the float64 sum is possible
in principle, never seen). A conv with one output channel per group (depthwise, or O = 1) is MLAS's
SGEMM with M = 1, which its M1 kernel computes instead (``m1_chain``: SgemmKernelM1Avx, products
``vmulps`` and sums ``vaddps`` in groups of 4 taps, then 2, then 1, each group's sum added to the
output; no FMA): onnxruntime's weights come from a DequantizeLinear, so its NCHWc depthwise kernel
never takes such a conv. A conv with one output pixel (squeeze-excite fc1 / fc2) is an SGEMM with N = 1,
which MLAS's M1 transposed-B kernel computes (``m1t_chain``: 8 lane sums per filter, reduced per block of
4 / 2 / 1 filters). Then ``q_y = sat(rne(fp32(y) / s_y) + z_y)`` clamped by the activation.
"""
from __future__ import annotations

import functools
import os
from typing import List, Optional, Tuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .int8 import F32, Int8Conv2D, Int8FC, quantize

STRIDE_K = 128   # MLAS_SGEMM_STRIDEK / STRIDEN: its SGEMM's K block (partial sums added to the output)
STRIDE_N = 128
# whose sums the layer follows: "conv" onnxruntime's float Conv (im2col, SGEMM of the filter rows; M1
# for one output per group); "conv_transpose" a phase of its float ConvTranspose with one kernel tap per
# output pixel (an SGEMM with A transposed: never M1, K blocks of STRIDE_K whatever N, col2im adds to 0)
GEMMS = ("conv", "conv_transpose")


def mlas_stride_k(n: int, k: int) -> int:
    """MlasSgemmOperation's K block for an N x K problem: it widens the K stride when N is small
    (and the N stride when K is small) to fill its B panel."""
    stride_n, stride_k = STRIDE_N, STRIDE_K
    if n >= k:
        while stride_k // 2 >= k:
            stride_n, stride_k = stride_n * 2, stride_k // 2
    else:
        while stride_n > 16 and stride_n // 2 >= n:
            stride_n, stride_k = stride_n // 2, stride_k * 2
    return stride_k


THREAD_COMPLEXITY = 64 * 1024   # MLAS_SGEMM_THREAD_COMPLEXITY: multiplies per extra thread
MAX_THREADS = 16                 # the platform's MLAS_MAXIMUM_THREAD_COUNT cap of that estimate
THREAD_ALIGN = 16                # MLAS_SGEMM_STRIDEN_THREAD_ALIGN: N is split in blocks of 16


def ort_threads() -> int:
    """onnxruntime's default intra-op threads (its MLAS thread pool's degree of parallelism): the
    physical cores (/proc/cpuinfo's distinct (physical id, core id)), else os.cpu_count();
    ``ONNX_MRVL_ORT_THREADS`` overrides (a session made with intra_op_num_threads)."""
    env = os.environ.get("ONNX_MRVL_ORT_THREADS")
    return max(1, int(env)) if env else _physical_cores()


@functools.lru_cache(maxsize=1)
def _physical_cores() -> int:
    cores = set()
    try:
        with open("/proc/cpuinfo") as f:
            phys = None
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key == "physical id":
                    phys = val.strip()
                elif key == "core id":
                    cores.add((phys, val.strip()))
    except OSError:
        pass
    return len(cores) or os.cpu_count() or 1


def gemm_segments(m: int, n: int, k: int, threads: Optional[int] = None) -> List[Tuple[int, int, int]]:
    """``[(n0, n1, stride_k)]``: how MLAS's threaded SGEMM (MlasGemm of an M x N x K problem, the
    1x1 conv's filters x pixels x channels) splits N among its threads, and each part's K block.
    Threads: ``M N K / 64K + 1`` (at most 16), at most the pool's (``ort_threads``); with N > M the
    16-aligned blocks of N are partitioned among them (MlasPartitionWork: the first ones get one
    block more), each part an MlasSgemmOperation of its own N (``mlas_stride_k``); else M is split
    and N stays whole."""
    threads = ort_threads() if threads is None else threads
    work = m * n * k
    t = int(work / THREAD_COMPLEXITY) + 1 if work < THREAD_COMPLEXITY * MAX_THREADS else MAX_THREADS
    t = min(t, threads)
    if n <= m or t <= 1:
        return [(0, n, mlas_stride_k(n, k))]
    blocks = -(-n // THREAD_ALIGN)
    t = min(t, blocks)
    per, extra = divmod(blocks, t)
    parts, b0 = [], 0
    for i in range(t):
        nb = per + (1 if i < extra else 0)
        n0, n1 = b0 * THREAD_ALIGN, min(n, (b0 + nb) * THREAD_ALIGN)
        if n1 > n0:
            parts.append((n0, n1, mlas_stride_k(n1 - n0, k)))
        b0 += nb
    return parts


def fc_segments(m: int, n: int, k: int, threads: Optional[int] = None) -> List[Tuple[int, int, int]]:
    """The column parts and K blocks of a float-path FC's sums: onnxruntime's float MatMul of
    ``[M, K] x [K, N]`` (leading axes of A folded into M) is one threaded MlasGemm, ``gemm_segments``
    with the MatMul's own M and N (with more output features than rows each thread sums a
    16-aligned part of the columns with the K block of its own N: Swin's patch-merging reduction,
    64 rows x 128 features at K = 256, is two parts of 64 columns with K blocks of 256, not 128)."""
    return gemm_segments(m, n, k, threads)


def segmented_parts(m: int, n: int, k: int, threads: Optional[int] = None) -> List[Tuple[int, int, int]]:
    """``[(n0, n1, stride_k)]``: MlasConvPrepare's ExpandThenGemmSegmented split of one image's N
    pixels (M filters, K taps): ``M N K / 64K + 1`` threads (at most 16, at most the pool's), a thread
    stride of ``ceil(N / t)`` pixels rounded up to 16 (one segment when that covers N); each segment
    an MlasConvOperation whose K block follows its own pixel count (``mlas_stride_k``): a 3x3 conv of
    32 filters on 8 x 8 pixels, K = 288, is one block of 288 per 32-pixel half on 2 threads, two
    blocks (256 + 32) on 1."""
    threads = ort_threads() if threads is None else threads
    work = m * n * k
    t = int(work / THREAD_COMPLEXITY) + 1 if work < THREAD_COMPLEXITY * MAX_THREADS else MAX_THREADS
    t = min(t, threads)
    stride = -(-n // t)
    if t > 1:
        stride = -(-stride // THREAD_ALIGN) * THREAD_ALIGN
    if stride >= n:
        return [(0, n, mlas_stride_k(n, k))]
    return [(n0, min(n, n0 + stride), mlas_stride_k(min(n, n0 + stride) - n0, k)) for n0 in range(0, n, stride)]


def conv_segments(layer, n: int, oh: int, ow: int, threads: Optional[int] = None) -> List[Tuple[int, int, int]]:
    """The pixel parts and K blocks of a float-path conv's sums, as MlasConv runs it: a pointwise
    conv (1x1, stride 1, no padding: GemmDirect) or one with more filters than pixels
    (ExpandThenGemm) of one image and one group is a threaded MlasGemm (``gemm_segments`` with
    M = filters, N = pixels); another conv of one image and one group is the segmented im2col path
    (``segmented_parts``: the pool's threads take parts of the pixels); a batch or groups (one
    image-group per thread) one part of all pixels, ``mlas_stride_k(pixels, K)``."""
    k, pixels = layer.ig * layer.kh * layer.kw, oh * ow
    pointwise = k == layer.ig and tuple(layer.strides) == (1, 1) and not any(layer.padding)
    if n == 1 and layer.groups == 1 and (pointwise or layer.o > pixels):
        return gemm_segments(layer.o, pixels, k, threads)
    if n == 1 and layer.groups == 1:
        return segmented_parts(layer.o, pixels, k, threads)
    return [(0, pixels, mlas_stride_k(pixels, k))]


def fma_chain(cols: np.ndarray, w: np.ndarray, stride_k: int = STRIDE_K, init=None) -> np.ndarray:
    """[..., M, K] x [..., K, O] in fp32 as MLAS's SGEMM kernel sums each matrix: k in order, FMA
    into one accumulator per output, per K block; the blocks' sums added to the output in order
    (``init``: the output's values before the first block, a Gemm's C that onnxruntime copies into
    Y before its SGEMM with beta 1)."""
    m, k = cols.shape[-2:]
    shape = np.broadcast_shapes(cols.shape[:-2], w.shape[:-2]) + (m, w.shape[-1])
    out = None if init is None else np.broadcast_to(np.asarray(init, F32), shape).astype(F32)
    for k0 in range(0, k, stride_k):
        acc = np.zeros(shape, np.float64)
        for j in range(k0, min(k, k0 + stride_k)):
            acc += cols[..., j:j + 1].astype(np.float64) * w[..., j:j + 1, :].astype(np.float64)
            acc = acc.astype(F32).astype(np.float64)
        out = acc.astype(F32) if out is None else (out + acc.astype(F32)).astype(F32)
    return out if out is not None else np.zeros(shape, F32)


def m1_chain(cols: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``sum_k cols[..., k] * w[..., k]`` in fp32 as MLAS's SgemmKernelM1Avx sums one row of A against
    B (an SGEMM with M = 1): the K taps in groups of 4, then one of 2, then 1; a group's products
    (each rounded) summed left to right, the group's sum added to the output (0 before the first)."""
    k = cols.shape[-1]
    prods = (cols * w).astype(F32)            # [..., K], vmulps: one rounding each
    out, k0 = None, 0
    for size in (4,) * (k // 4) + ((2,) if k % 4 >= 2 else ()) + ((1,) if k % 2 else ()):
        t = prods[..., k0]
        for j in range(1, size):
            t = (t + prods[..., k0 + j]).astype(F32)
        out = t if out is None else (t + out).astype(F32)
        k0 += size
    return out if out is not None else np.zeros(cols.shape[:-1], F32)


def m_parts(m: int, n: int, k: int, threads: Optional[int] = None) -> List[Tuple[int, int]]:
    """``[(m0, m1)]``: the row ranges MLAS's threaded SGEMM gives its threads when M >= N (the thread
    count of ``gemm_segments``, at most M; MlasPartitionWork: the first ``M % t`` threads one row more)."""
    threads = ort_threads() if threads is None else threads
    work = m * n * k
    t = int(work / THREAD_COMPLEXITY) + 1 if work < THREAD_COMPLEXITY * MAX_THREADS else MAX_THREADS
    t = max(1, min(t, threads, m))
    per, extra = divmod(m, t)
    parts, m0 = [], 0
    for i in range(t):
        m1 = m0 + per + (1 if i < extra else 0)
        parts.append((m0, m1))
        m0 = m1
    return parts


def m1t_chain(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x [..., K] @ w [K, M]`` in fp32 as MLAS's SgemmKernelM1TransposeBAvx computes an SGEMM with
    N = 1 (a conv whose output is one pixel, handed to it with A and B swapped): per output row 8
    lane accumulators (lane j sums the products of k = j, j + 8, ... in order; ``vmulps`` then
    ``vaddps``, no FMA), reduced by the kernel's row block: rows in blocks of 4 (lanes
    ``((l0 + l1) + l2) + l3`` per half, the halves added), then one of 2 (``((l0 + l2) + (l4 + l6)) +
    ((l1 + l3) + (l5 + l7))``), then 1 (``((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))``), the
    blocks counted from the first row of ``w`` (one thread's part)."""
    k, m = w.shape
    prods = (x[..., :, None].astype(F32) * w.astype(F32)).astype(F32)       # [..., K, M]
    lanes = np.zeros(prods.shape[:-2] + (8, m), F32)
    for k0 in range(0, k, 8):
        blk = prods[..., k0:k0 + 8, :]
        lanes[..., :blk.shape[-2], :] = (lanes[..., :blk.shape[-2], :] + blk).astype(F32)
    lv = [lanes[..., j, :] for j in range(8)]

    def add(a, b):
        return (a + b).astype(F32)
    four = add(add(add(add(lv[0], lv[1]), lv[2]), lv[3]), add(add(add(lv[4], lv[5]), lv[6]), lv[7]))
    two = add(add(add(lv[0], lv[2]), add(lv[4], lv[6])), add(add(lv[1], lv[3]), add(lv[5], lv[7])))
    one = add(add(add(lv[0], lv[1]), add(lv[2], lv[3])), add(add(lv[4], lv[5]), add(lv[6], lv[7])))
    n4 = m // 4 * 4
    out = four.copy()
    if m % 4 >= 2:
        out[..., n4:n4 + 2] = two[..., n4:n4 + 2]
    if m % 2:
        out[..., m - 1] = one[..., m - 1]
    return out


class FloatPathConv2D(Int8Conv2D):
    float_path = True    # int8_native.prepare: the fp32 kernel (int8_float_native.py), not the VNNI one

    def __init__(self, kernel, bias, weight_scale, params, strides, padding, dilation, groups,
                 activation="none", activation_params=None, bias_scale=None, weight_zero_point=None,
                 gemm="conv"):
        super().__init__(kernel, bias, weight_scale, params, strides, padding, dilation, groups,
                         activation, activation_params, weight_zero_point)
        if gemm not in GEMMS:
            raise ValueError(f"float-path gemm {gemm!r} ({' or '.join(GEMMS)})")
        self.gemm = gemm
        ws = np.asarray(weight_scale, F32).reshape(-1)
        o, kh, kw, ig = kernel.shape
        # fp32 weights in im2col order (input channel, kernel row, kernel column): [K, O], as
        # DequantizeLinear computes them: fp32(q_w - z_w) * s_w
        codes = kernel.astype(np.int64) - (0 if self.weight_zp is None else self.weight_zp.reshape(-1, 1, 1, 1))
        wd = (codes.astype(F32) * ws.reshape(-1, 1, 1, 1)).astype(F32)
        self.wd = np.ascontiguousarray(wd.transpose(0, 3, 1, 2).reshape(o, ig * kh * kw).T)
        if bias is not None:
            if bias_scale is None or np.asarray(bias_scale).size != o:
                raise ValueError("a float-path int8 Conv2D with a bias needs its bias scales")
            self.bd = (np.asarray(bias).astype(F32) * np.asarray(bias_scale, F32).reshape(-1)).astype(F32)
        else:
            self.bd = np.zeros(o, F32)

    def sums(self, x: np.ndarray, stride_k: Optional[int] = None) -> np.ndarray:
        """y = fp32(conv + bias) [N, OH, OW, O], before the output quantization (``stride_k``:
        MLAS's K block, ``mlas_stride_k`` unless given)."""
        n, h, w, c = x.shape
        if c != self.ig * self.groups:
            raise ValueError(f"input has {c} channels, the kernel takes {self.ig} x {self.groups} groups")
        s, z, dt = self.in_q
        xd = ((quantize(x, s, z, dt) - z).astype(F32) * F32(s)).astype(F32)   # DequantizeLinear
        pt, pl, pb, pr = self.padding
        xp = np.pad(xd, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
        (sh, sw), (dh, dw) = self.strides, self.dilation
        win = sliding_window_view(xp, ((self.kh - 1) * dh + 1, (self.kw - 1) * dw + 1), axis=(1, 2))
        win = win[:, ::sh, ::sw, :, ::dh, ::dw]                 # [N, OH, OW, C, KH, KW]
        oh, ow = win.shape[1], win.shape[2]
        og = self.o // self.groups
        y = np.empty((n * oh * ow, self.o), F32)
        if og == 1 and self.gemm == "conv":   # SGEMM with M = 1 per group: MLAS's M1 kernel, all groups at once
            kk = self.ig * self.kh * self.kw
            cols = win.reshape(n * oh * ow, self.groups, kk)
            y[:] = m1_chain(cols, self.wd.T.reshape(self.groups, kk))
            return (y + self.bd).astype(F32).reshape(n, oh, ow, self.o)
        if oh * ow == 1 and self.gemm == "conv" and stride_k is None:   # SGEMM with N = 1: M1 transposed-B kernel
            kk = self.ig * self.kh * self.kw
            parts = m_parts(og, 1, kk) if n == 1 and self.groups == 1 else [(0, og)]
            for gi in range(self.groups):
                cols = win[:, :, :, gi * self.ig:(gi + 1) * self.ig].reshape(n, kk)
                for m0, m1 in parts:
                    y[:, gi * og + m0:gi * og + m1] = m1t_chain(cols, self.wd[:, gi * og + m0:gi * og + m1])
            return (y + self.bd).astype(F32).reshape(n, oh, ow, self.o)
        if stride_k is None and self.gemm != "conv":   # onnxruntime's ConvTranspose SGEMM: one K block size
            stride_k = STRIDE_K
        parts = conv_segments(self, n, oh, ow) if stride_k is None else [(0, oh * ow, stride_k)]
        if len(parts) > 1:       # one image, one group (conv_segments): its threads' pixel parts
            cols = np.ascontiguousarray(win.reshape(oh * ow, self.ig * self.kh * self.kw))
            for p0, p1, sk in parts:
                y[p0:p1] = fma_chain(cols[p0:p1], self.wd, sk)
            return (y + self.bd).astype(F32).reshape(n, oh, ow, self.o)
        sk = parts[0][2]
        for gi in range(self.groups):
            cols = win[:, :, :, gi * self.ig:(gi + 1) * self.ig].reshape(n * oh * ow, self.ig * self.kh * self.kw)
            y[:, gi * og:(gi + 1) * og] = fma_chain(np.ascontiguousarray(cols), self.wd[:, gi * og:(gi + 1) * og], sk)
        return (y + self.bd).astype(F32).reshape(n, oh, ow, self.o)

    def apply(self, x: np.ndarray) -> Tuple[np.ndarray, bool]:
        y = self.sums(x)
        so, zo, _ = self.out_q
        q = np.clip(np.rint((y / F32(so)).astype(F32)) + zo, self.lo, self.hi)   # Relu/Clip: clamps of q
        return ((q - zo).astype(F32) * F32(so)).astype(F32), True


class FloatPathFC(Int8FC):
    """An int8 FC onnxruntime runs as a float MatMul between DQ and Q (an S8 input whose DQ other
    nodes read, BERT's Q/K/V projections): ``[M, K] x [K, N]`` by MLAS's SGEMM on the dequantized
    input and ``fp32(fp32(q_w - z_w) s_w)`` weights, K blocks of ``mlas_stride_k(N, K)`` per
    thread part (``fc_segments``: a MatMul's N is its output features, a conv's its pixels), then
    ``q_y = sat(rne(y / s_y) + z_y)``. A MatMul has no bias (the quantizer leaves its bias Add a
    separate layer); a Gemm onnxruntime runs as its float Gemm (``bias_scale``: the stored scales of
    its DQ'd int32 bias C) starts each output at ``fp32(q_b s_b)`` and adds the K blocks' sums to it
    (its Gemm copies C into Y, then SGEMM with beta 1): the numpy path."""
    float_path = True    # int8_native.prepare: not the VNNI integer kernel

    def __init__(self, kernel, bias, weight_scale, params, activation="none", activation_params=None,
                 weight_zero_point=None, bias_scale=None):
        super().__init__(kernel, bias, weight_scale, params, activation, activation_params, weight_zero_point)
        self.c = None
        if bias is not None:
            if bias_scale is None or np.asarray(bias_scale).size != kernel.shape[0]:
                raise ValueError("a float-path int8 FC has no bias without its bias scales (a float Gemm's C: "
                                 "bias_scale; onnxruntime's MatMul adds none)")
            self.c = (np.asarray(bias).reshape(-1).astype(F32) * np.asarray(bias_scale, F32).reshape(-1)).astype(F32)
        o = kernel.shape[0]
        # the same sums as a 1x1 float-path conv over the rows (the native kernel, int8_float_native.py)
        self.conv = FloatPathConv2D(kernel.reshape(o, 1, 1, -1), None, weight_scale, params, [1, 1], [0, 0, 0, 0],
                                    [1, 1], 1, activation, activation_params, weight_zero_point=weight_zero_point)
        self.wd = self.conv.wd   # [K, O] fp32(q_w s_w)

    def sums(self, x: np.ndarray) -> np.ndarray:
        """y = fp32(x_dq @ w_dq) [M, N], before the output quantization."""
        if x.ndim != 2 or x.shape[1] != self.wd.shape[0]:
            raise ValueError(f"input of shape {list(x.shape)} does not fit the kernel K={self.wd.shape[0]}")
        s, z, dt = self.in_q
        xd = np.ascontiguousarray(((quantize(x, s, z, dt) - z).astype(F32) * F32(s)).astype(F32))   # DequantizeLinear
        k, n = self.wd.shape
        parts = fc_segments(x.shape[0], n, k)
        c = self.c
        if len(parts) == 1:
            return fma_chain(xd, self.wd, parts[0][2], c)
        y = np.empty((x.shape[0], n), F32)
        for n0, n1, sk in parts:     # MLAS's threads' column parts, each with its own K block
            y[:, n0:n1] = fma_chain(xd, np.ascontiguousarray(self.wd[:, n0:n1]), sk, None if c is None else c[n0:n1])
        return y

    def apply(self, x: np.ndarray) -> Tuple[np.ndarray, bool]:
        y = self.sums(x)
        so, zo, _ = self.out_q
        q = np.clip(np.rint((y / F32(so)).astype(F32)) + zo, self.lo, self.hi)
        return ((q - zo).astype(F32) * F32(so)).astype(F32), True
