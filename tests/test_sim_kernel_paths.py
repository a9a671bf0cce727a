"""The native kernel paths of the MobileNet pass against the code before them, bit for bit
(``kernel_paths(mask)`` in _native_conv.c turns each off): each sums the same products in the same
order per value, so the results, finiteness flags and overflow reports must be the same, on one
and two threads.

* depthwise blocks of 4 pixels (maps whose interior row is 4-7 pixels wide: 7x7, 14x14 / 2), which
  ran pixel by pixel; also inside the fused depthwise + 1x1 pass (``dw_pw``);
* conv tiles of at most 16 output columns (O <= 16, the last 16 of O = 48, 80, ...) two at a time
  as one tile of 24 or 25 rows (``micro_one``), with and without a fused Sum2D, in place and packed;
* a stem's whole panel (12 pixels of one output row, windows inside the input, kernel rows of at
  most 32 floats) packed row by row without per-pixel bookkeeping;
* a stem of at most 32 output channels reading 24 (12) pixels' windows in place, unpacked;
* a stem of one channel block tiled along its output rows (``stem_rows``): tiles of 4-24 pixels,
  the last one of a row overlapping the one before, padded borders read from zero-filled strips;
* a depthwise output row of 4-8 pixels whole in registers (``dw_row3``);
* an in-place 1x1 conv of at most 8 output channels in 256-bit tiles of 24 pixels (``range8``);
* a 3-channel stride-2 stem of more than 32 output channels tiled along rows block by block;
* in-place 1x1 tiles whose epilogue runs inside the next tile's FMA loop (``direct_pipe``);
* AVX2 hosts: tiles of at most 24 columns (8-column, 24-row pairs) in 12-ymm blocks, depthwise 3x3
  stride-1 blocks in 8-lane halves; every host: the depthwise blocks' short epilogue (bias, then
  none / relu / clamp);
* AVX2 hosts: a packed block's whole channel blocks swept 6 rows x 16 lanes at a time over k
  slices of 128 (``sweep_block``), the sums kept in the output between slices;
* AVX2 hosts: the short epilogue of whole 32-column tiles 8 lanes at a time, one finiteness test
  per tile (``store_full8``); a 13-row tile's FMAs as 5 + 4 + 4 rows (``fma_rows``)."""
import numpy as np
import pytest

from onnx_mrvl.sim import jit, native
from onnx_mrvl.sim import kernels as K
from test_sim_native import _buildable, f16

pytestmark = pytest.mark.skipif(not _buildable(), reason="no C compiler, or neither AVX-512 nor AVX2 + FMA + F16C here")
DW4, ONE_PAIRS, PANEL_PACK, WINDOWS, STEM_ROWS, DW_ROW, EIGHT, STEM_BLOCKS, PIPE = 1, 2, 4, 8, 16, 32, 64, 128, 256
HALF, MAX_CHAIN = 512, 1024     # tests/test_sim_kernel_paths_half.py, tests/test_sim_maxpool_chain.py
AVX2_TILES, SWEEP, LANES6, STORE8, ROWS13, DW_TAPS8 = 2048, 4096, 8192, 16384, 32768, 65536
ALL = 2097151


def _both(path, build):
    """(with ``path``, without it) of ``build()``"""
    lib = native.lib()
    try:
        lib.kernel_paths(ALL & ~path)
        old = build()
        lib.kernel_paths(ALL)
        new = build()
    finally:
        lib.kernel_paths(ALL)
    return new, old


def _same(new, old):
    for a, b in zip(new, old):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
        else:
            assert a == b


def _conv_and_sum_same(path, w, conv, x, rng, acts, sum_required=False):
    """``K.Conv2D(w, **conv)`` on ``x`` with and without ``path``, then, where the conv can fuse a
    Sum2D (``sum_required``: it must), with a residual (fp16 overflows in it) under each of ``acts``."""
    _same(*_both(path, lambda: K.Conv2D(w, **conv).apply(x)))
    c = K.Conv2D(w, **conv)
    y, _ = c.apply(x)
    assert c.fusable_sum(x.shape) or not sum_required
    if not c.fusable_sum(x.shape):
        return
    res = f16(rng.standard_normal(y.shape) * 2)
    res.reshape(-1)[::53] = 65000.0
    for act in acts:
        _same(*_both(path, lambda: K.Conv2D(w, **conv).apply_with_residual(x, res, act)))


def _dwpw_block_same(path, monkeypatch, h, w, c, e, seeds, scale=1.0, threads=None, spike=False):
    """A MobileNetV2-like block (c -> e -> depthwise -> c, residual) through a Simulator's static
    plan, whose depthwise + projection pair runs as one banded pass (dw_pw): same bits, same report
    with and without ``path`` (``spike``: some fp16 overflows in the input)."""
    import test_sim_dwpw as D
    from onnx_mrvl.sim import Simulator
    if threads is not None:
        monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
    monkeypatch.setattr(D, "RNG", np.random.default_rng(seeds[0]))
    sim = Simulator.from_program(*D.block_program(1, h, w, c=c, e=e, out=c, residual=True))
    assert sim._static.dwpw_fused == 1
    x = f16(np.random.default_rng(seeds[1]).standard_normal((1, h, w, c)) * scale)
    if spike:
        x.reshape(-1)[::211] = 30000.0
    _same(*_both(path, lambda: (sim.run([x])[0], sim.last_overflow)))


@pytest.mark.parametrize("h, w, c, k, stride, pads", [
    (7, 7, 960, 3, 1, 1), (7, 7, 17, 3, 1, 1), (14, 14, 576, 3, 2, 1), (9, 6, 40, 3, 1, 1),
    (8, 10, 33, 3, 1, 1), (5, 9, 64, 3, 1, 0), (11, 12, 48, 5, 1, 2), (15, 15, 24, 3, 2, 1),
    (6, 13, 16, 3, 2, 0), (9, 9, 100, 3, 1, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise_blocks_of_4(monkeypatch, h, w, c, k, stride, pads, threads):
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng([h, w, c, k, stride])
    x = f16(rng.standard_normal((2, h, w, c)) * 3)
    x.reshape(-1)[::97] = 30000.0                  # some sums overflow fp16: the flags must agree
    wt = f16(rng.standard_normal((c, k, k, 1)) * 0.5)
    conv = dict(bias=rng.standard_normal(c), scale=rng.standard_normal(c), strides=(stride, stride),
                padding=(pads,) * 4, groups=c, activation="clamp", activation_params={"min": -1.0, "max": 6.0})
    _same(*_both(DW4, lambda: K.Conv2D(wt, **conv).apply(x)))


@pytest.mark.parametrize("threads", ["1", "2"])
def test_depthwise_blocks_of_4_in_a_fused_depthwise_and_1x1(monkeypatch, threads):
    """MobileNetV2's last blocks at 7x7 (480 channels, residual) through a Simulator's static plan,
    whose depthwise + projection pair runs as one banded pass (dw_pw): same bits, same report."""
    _dwpw_block_same(DW4, monkeypatch, 7, 7, 80, 480, (3, 5), threads=threads)   # seeds: its tests' data stays theirs


@pytest.mark.parametrize("shape, o, k, stride", [
    ((1, 56, 56, 96), 16, 1, 1), ((1, 112, 9, 16), 8, 1, 1), ((2, 7, 7, 80), 16, 1, 1),
    ((1, 5, 5, 300), 13, 1, 1), ((1, 14, 14, 1024), 16, 1, 1), ((1, 9, 11, 24), 48, 1, 1),
    ((1, 30, 30, 3), 16, 3, 2), ((1, 13, 13, 40), 1, 3, 1), ((1, 1, 37, 20), 80, 1, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_conv_tiles_of_16_columns_in_pairs(monkeypatch, shape, o, k, stride, threads):
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng([o, k, stride, shape[1], shape[3]])
    x = f16(rng.standard_normal(shape))
    x.reshape(-1)[::89] = 20000.0
    w = f16(rng.standard_normal((o, k, k, shape[3])) * 0.3)
    conv = dict(bias=rng.standard_normal(o), strides=(stride, stride), padding=(k // 2,) * 4,
                activation="clamp", activation_params={"min": -1.0, "max": 6.0})
    _conv_and_sum_same(ONE_PAIRS, w, conv, x, rng, [jit.act_args("relu", None, None, o)], sum_required=True)


@pytest.mark.parametrize("shape, o, k, stride, pad", [
    ((1, 224, 224, 3), 16, 3, 2, 1), ((1, 61, 77, 3), 32, 3, 2, 1), ((2, 40, 50, 3), 64, 7, 2, 3),
    ((1, 30, 43, 1), 8, 5, 1, 2), ((1, 29, 31, 5), 24, 3, 1, 0), ((1, 26, 26, 3), 40, 3, 1, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_stem_panels_packed_row_by_row(monkeypatch, shape, o, k, stride, pad, threads):
    """(the image's last pixels: their windows' vector loads would pass its end, so they take the
    per-pixel path; a batch of 2: the first image's last panel reads inside the second)"""
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng([o, k, stride, shape[1], shape[3]])
    x = f16(rng.standard_normal(shape))
    x.reshape(-1)[::101] = 30000.0
    w = f16(rng.standard_normal((o, k, k, shape[3])) * 0.3)
    conv = dict(bias=rng.standard_normal(o), strides=(stride, stride), padding=(pad,) * 4, activation="relu")
    _same(*_both(PANEL_PACK, lambda: K.Conv2D(w, **conv).apply(x)))


@pytest.mark.parametrize("shape, o, k, stride, pad, dil", [
    ((1, 224, 224, 3), 16, 3, 2, 1, 1), ((1, 224, 224, 3), 32, 3, 2, 1, 1), ((2, 50, 61, 3), 8, 3, 2, 1, 1),
    ((1, 40, 53, 3), 24, 3, 1, 1, 1), ((1, 33, 70, 1), 13, 5, 1, 2, 1), ((1, 30, 76, 4), 32, 3, 2, 0, 1),
    ((2, 29, 60, 3), 17, 3, 1, 1, 2), ((1, 40, 50, 3), 64, 7, 2, 3, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_stem_windows_read_in_place(monkeypatch, shape, o, k, stride, pad, dil, threads):
    """(o = 64: two channel blocks, packed as before; the paths must still agree)"""
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng([o, k, stride, shape[1], shape[3], dil])
    x = f16(rng.standard_normal(shape))
    x.reshape(-1)[::103] = 30000.0
    w = f16(rng.standard_normal((o, k, k, shape[3])) * 0.3)
    conv = dict(bias=rng.standard_normal(o), strides=(stride, stride), padding=(pad,) * 4, dilation=(dil, 1),
                activation="clamp", activation_params={"min": 0.0, "max": 6.0})
    _same(*_both(WINDOWS, lambda: K.Conv2D(w, **conv).apply(x)))


@pytest.mark.parametrize("shape, o, k, stride, pad, dil", [
    ((1, 224, 224, 3), 16, 3, 2, 1, 1), ((1, 224, 224, 3), 32, 3, 2, 1, 1), ((2, 50, 61, 3), 8, 3, 2, 1, 1),
    ((1, 40, 53, 3), 24, 3, 1, 1, 1), ((1, 33, 70, 1), 13, 5, 1, 2, 1), ((1, 30, 76, 4), 32, 3, 2, 0, 1),
    ((2, 29, 60, 3), 17, 3, 1, 1, 2), ((3, 27, 27, 3), 16, 3, 2, 1, 1), ((1, 23, 47, 3), 4, 3, 2, (0, 1, 2, 0), 1),
    ((1, 60, 25, 3), 16, 3, 2, 1, 1), ((1, 19, 9, 3), 16, 3, 1, 1, 1), ((1, 45, 101, 3), 11, 7, 2, 3, 1),
    ((2, 31, 90, 3), 32, 3, 2, (1, 0, 0, 1), 1), ((1, 21, 33, 2), 16, 1, 2, 0, 1), ((1, 17, 130, 3), 16, 3, 2, 1, 3)])
@pytest.mark.parametrize("threads", [1, 2])
def test_stem_tiled_along_rows(monkeypatch, shape, o, k, stride, pad, dil, threads):
    """Rows of 112 pixels (24-pixel tiles and a 16-pixel rest), rows narrower than a tile (13-23,
    fewer than 12 pixels: packed), 3 images, asymmetric pads, stride 1 (a run-time step), dilation
    along y, a 1x1 strided conv and 17-32 channels (12-pixel tiles of two vectors); the thread
    splits cut rows into pieces."""
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng([o, k, stride, shape[1], shape[2], shape[3], dil])
    x = f16(rng.standard_normal(shape))
    x.reshape(-1)[::103] = 30000.0
    w = f16(rng.standard_normal((o, k, k, shape[3])) * 0.3)
    pads = (pad,) * 4 if isinstance(pad, int) else pad
    for act, params in (("clamp", {"min": 0.0, "max": 6.0}), ("leaky_relu", {"alpha": 0.1})):
        conv = dict(bias=rng.standard_normal(o), strides=(stride, stride), padding=pads, dilation=(dil, 1),
                    activation=act, activation_params=params)
        _same(*_both(STEM_ROWS, lambda: K.Conv2D(w, **conv).apply(x)))


@pytest.mark.parametrize("h, w, c, kh, stride, pads, dil", [
    (7, 7, 960, 3, 1, (1, 1, 1, 1), 1), (7, 7, 17, 3, 1, (1, 1, 1, 1), 1), (14, 14, 576, 3, 2, (1, 1, 1, 1), 1),
    (9, 4, 40, 3, 1, (1, 1, 1, 1), 1), (8, 5, 33, 3, 1, (0, 1, 2, 1), 1), (6, 6, 64, 3, 1, (2, 1, 0, 1), 1),
    (10, 8, 48, 5, 1, (2, 1, 2, 1), 1), (15, 15, 24, 3, 2, (1, 1, 1, 1), 1), (16, 16, 100, 3, 2, (1, 1, 1, 1), 1),
    (13, 13, 16, 3, 2, (1, 1, 1, 0), 1), (7, 9, 30, 3, 1, (1, 1, 1, 0), 1), (9, 7, 20, 3, 1, (3, 1, 3, 1), 2),
    (3, 7, 16, 3, 1, (4, 1, 0, 1), 1), (12, 12, 8, 3, 2, (1, 1, 1, 1), 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise_whole_rows(monkeypatch, h, w, c, kh, stride, pads, dil, threads):
    """Rows of 4-8 pixels: stride 1 and 2, the last pixel's right tap in the padding or not (no
    right padding, odd and even widths at stride 2), padded rows above and below (4 pads of a
    3-high kernel: rows with no tap in range), a 5x3 kernel, dilation along y, channel counts off
    the 16 lanes, 2 images, -0.0 inputs, fp16 overflows."""
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng([h, w, c, kh, stride, dil] + list(pads))
    x = f16(rng.standard_normal((2, h, w, c)) * 3)
    x.reshape(-1)[::97] = 30000.0
    x.reshape(-1)[5::211] = -0.0
    wt = f16(rng.standard_normal((c, kh, 3, 1)) * 0.5)
    conv = dict(bias=rng.standard_normal(c), scale=rng.standard_normal(c), strides=(stride, stride),
                padding=pads, dilation=(dil, 1), groups=c, activation="clamp",
                activation_params={"min": -1.0, "max": 6.0})
    ow = (w + pads[1] + pads[3] - 3) // stride + 1
    assert 4 <= ow <= 8
    _same(*_both(DW_ROW, lambda: K.Conv2D(wt, **conv).apply(x)))


@pytest.mark.parametrize("threads", ["1", "2"])
def test_depthwise_whole_rows_in_a_fused_depthwise_and_1x1(monkeypatch, threads):
    _dwpw_block_same(DW_ROW, monkeypatch, 7, 7, 80, 480, (4, 6), threads=threads)


@pytest.mark.parametrize("shape, o, groups", [
    ((1, 112, 112, 16), 8, 1), ((1, 37, 29, 16), 8, 1), ((2, 13, 11, 32), 5, 1), ((1, 9, 7, 24), 8, 1),
    ((1, 5, 5, 3), 1, 1), ((3, 7, 7, 40), 7, 1), ((1, 1, 23, 512), 8, 1), ((1, 11, 13, 520), 8, 1),
    ((1, 17, 19, 48), 12, 2), ((2, 6, 9, 36), 18, 3), ((1, 3, 3, 16), 8, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_conv_of_at_most_8_columns_in_256_bit_tiles(monkeypatch, shape, o, groups, threads):
    """Rows 16, 32 (compiled strides) and 24, 40, 3, 512 floats apart (run time), pixel counts that
    leave a partial last tile (odd ones: a pair's second row missing), 1-8 columns, K at KC = 512
    and past it (520: not this path, must agree anyway), grouped 1x1 convs of 6 output channels
    per group (rows ldc = 12 / 18 floats apart: two 8-lane stores per pair) and a map smaller than
    one tile; the short epilogue, the general one (scale, leaky_relu, prelu), a fused Sum2D, fp16
    overflows and NaN inputs."""
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng([o, groups, threads] + list(shape))
    x = f16(rng.standard_normal(shape))
    x.reshape(-1)[::89] = 20000.0
    x.reshape(-1)[7::4001] = np.nan
    w = f16(rng.standard_normal((o, 1, 1, shape[3] // groups)) * 0.3)
    convs = [dict(bias=rng.standard_normal(o), groups=groups),
             dict(bias=rng.standard_normal(o), groups=groups, activation="clamp", activation_params={"min": -1.0, "max": 6.0}),
             dict(bias=rng.standard_normal(o), scale=rng.standard_normal(o), groups=groups, activation="leaky_relu",
                  activation_params={"alpha": 0.1}),
             dict(shift=rng.standard_normal(o), groups=groups, activation="prelu", slope=rng.standard_normal(o))]
    for conv in convs:
        _conv_and_sum_same(EIGHT, w, conv, x, rng, (jit.act_args("relu", None, None, o),
                                                    jit.act_args("leaky_relu", {"alpha": 0.2}, None, o)))


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("h, w", [(56, 56), (37, 29)])
def test_conv_of_8_columns_in_a_fused_depthwise_and_1x1(monkeypatch, threads, h, w):
    """A MobileNetV2 0.5-like block (8 -> 16 -> depthwise -> 8, residual) through a Simulator's
    static plan: the projection runs inside dw_pw's bands, its residual fused."""
    _dwpw_block_same(EIGHT, monkeypatch, h, w, 8, 16, (8, 9), scale=4, threads=threads, spike=True)


@pytest.mark.parametrize("shape, o, k, pad", [
    ((1, 224, 224, 3), 64, 7, 3), ((1, 100, 48, 3), 64, 7, 3), ((2, 40, 47, 3), 96, 7, 3), ((1, 61, 77, 3), 64, 3, 1),
    ((3, 27, 49, 3), 40, 3, (1, 0, 0, 1)), ((1, 19, 25, 3), 64, 5, 2), ((2, 40, 50, 3), 96, 7, 3)])
@pytest.mark.parametrize("threads", [1, 2])
def test_stem_of_several_channel_blocks_tiled_along_rows(monkeypatch, shape, o, k, pad, threads):
    """ResNet's 7x7/2 stem and others of 40-96 channels (a 8-channel last block for 40), rows of 24-112
    pixels (a row's rest of 0 or 4 pixels; 25 pixels: not this path, must agree anyway), asymmetric
    pads, 3 images; the two-thread split cuts rows and channel blocks."""
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng([o, k, threads] + list(shape))
    x = f16(rng.standard_normal(shape))
    x.reshape(-1)[::103] = 30000.0
    w = f16(rng.standard_normal((o, k, k, 3)) * 0.3)
    pads = (pad,) * 4 if isinstance(pad, int) else pad
    for act, params in (("relu", None), ("leaky_relu", {"alpha": 0.1})):
        conv = dict(bias=rng.standard_normal(o), strides=(2, 2), padding=pads, activation=act, activation_params=params)
        _same(*_both(STEM_BLOCKS, lambda: K.Conv2D(w, **conv).apply(x)))


@pytest.mark.parametrize("shape, o, k, stride, groups, dil", [
    ((1, 56, 56, 16), 8, 3, 1, 1, 1), ((1, 57, 31, 24), 5, 3, 2, 1, 1), ((2, 19, 23, 40), 8, 1, 2, 1, 1),
    ((1, 30, 30, 32), 8, 3, 1, 1, 2), ((1, 25, 29, 20), 12, 3, 1, 2, 1), ((1, 14, 14, 64), 8, 3, 1, 1, 1),
    ((1, 9, 9, 8), 3, 5, 1, 1, 1), ((1, 1, 60, 24), 40, 3, 1, 1, 1), ((1, 17, 21, 16), 72, 3, 1, 1, 2)])
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_conv_of_at_most_8_columns_in_256_bit_tiles(monkeypatch, shape, o, k, stride, groups, dil, threads):
    """Packed convs (3x3, 5x5, strided 1x1, dilated, grouped with 6 channels per group) of at most 8
    output channels, or whose last channel block has 8 (40, 72: its epilogue vectors at column 32 /
    64), K = 72-576 (576: two k blocks, not this path), with a fused Sum2D where one applies; two
    packed panels run as one 24-pixel 8-column tile."""
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng([o, k, stride, groups, dil, threads] + list(shape))
    x = f16(rng.standard_normal(shape))
    x.reshape(-1)[::97] = 20000.0
    x.reshape(-1)[11::4999] = np.nan
    w = f16(rng.standard_normal((o, k, k, shape[3] // groups)) * 0.2)
    for conv in (dict(bias=rng.standard_normal(o)),
                 dict(bias=rng.standard_normal(o), scale=rng.standard_normal(o), activation="clamp",
                      activation_params={"min": -1.0, "max": 6.0})):
        conv.update(strides=(stride, stride), padding=(k // 2 * dil,) * 4, dilation=(dil, dil), groups=groups)
        _conv_and_sum_same(EIGHT, w, conv, x, rng, [jit.act_args("relu", None, None, o)])


@pytest.mark.parametrize("shape, o", [
    ((1, 56, 56, 64), 256), ((1, 28, 28, 128), 96), ((1, 14, 14, 256), 64), ((1, 7, 7, 512), 64),
    ((2, 9, 11, 24), 64), ((1, 5, 29, 40), 32), ((1, 3, 4, 64), 64), ((1, 5, 5, 48), 80), ((1, 1, 25, 16), 32),
    ((1, 7, 7, 128), 256), ((1, 11, 12, 96), 128)])
@pytest.mark.parametrize("threads", [1, 2])
def test_in_place_1x1_tiles_pipelined(monkeypatch, shape, o, threads):
    """ResNet's bottleneck expansions (rows 64 .. 512 floats apart: compiled strides) and run-time
    strides (24, 40, 48, 16); K from 16 (fewer k than epilogue vectors: the rest after the loop) to
    512; maps whose pixels end in a partial tile (packed), a merged 13-row tile (7x7, 5x29) or fill
    fewer than two tiles (3x4, 1x25); K <= 128 with several channel blocks (tile by tile, blocks
    inner), on two threads split by rows or (7x7x128 -> 256) by channel blocks, and a map of exactly
    11 tiles (11x12); O = 80 (a last block of 16 columns: not this path); the
    short epilogue (bias, bias + relu, bias + clamp) with and without a fused Sum2D (relu, clamp,
    none), and the general one (scale: not this path); fp16 overflows and NaN inputs."""
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng([o, threads] + list(shape))
    x = f16(rng.standard_normal(shape))
    x.reshape(-1)[::97] = 9000.0
    x.reshape(-1)[5::3001] = np.nan
    w = f16(rng.standard_normal((o, 1, 1, shape[3])) * 0.3)
    convs = [dict(bias=rng.standard_normal(o)),
             dict(bias=rng.standard_normal(o), activation="relu"),
             dict(bias=rng.standard_normal(o), activation="clamp", activation_params={"min": -1.0, "max": 6.0}),
             dict(bias=rng.standard_normal(o), scale=rng.standard_normal(o), activation="relu")]
    for conv in convs:
        _conv_and_sum_same(PIPE, w, conv, x, rng, (jit.act_args("relu", None, None, o),
                                                   jit.act_args("clamp", {"min": 0.0, "max": 6.0}, None, o),
                                                   jit.act_args("none", None, None, o)), sum_required=True)


def test_all_is_every_path_bit_of_the_source():
    """ALL (what _both turns back on) is every PATH_ bit the C source defines: with a bit missing, _both
    would run the code before a path twice, compare it with itself, and leave that path off."""
    import re
    src = open(native._SRC).read()
    bits = [int(v) for v in re.findall(r"^#define PATH_\w+\s+(\d+)", src, re.M)]
    assert bits and sum(bits) == ALL and len(set(bits)) == len(bits)


@pytest.mark.parametrize("shape, o, k, stride, groups", [
    ((2, 9, 21, 40), 40, 3, 1, 40),      # depthwise 3x3: blocks of 8, a channel tail of 8 lanes
    ((2, 8, 9, 20), 20, 3, 1, 20),       # blocks of 4 (interior 7 wide), a tail of 4 lanes
    ((2, 11, 23, 24), 24, 3, 2, 24),     # stride 2: tap by tap
    ((1, 7, 7, 48), 48, 3, 1, 48),       # whole rows (dw_row3)
    ((2, 9, 11, 40), 16, 1, 1, 1),       # 1x1 of 16 columns: pairs of tiles (micro_one)
    ((2, 9, 11, 40), 24, 1, 1, 1),       # 17-24 columns
    ((2, 9, 11, 40), 8, 1, 1, 1),        # at most 8 columns (range8)
    ((1, 5, 5, 33), 40, 1, 1, 1)])       # a last block of 8 columns (micro_lda's <= 16)
@pytest.mark.parametrize("act", ["none", "relu", "clamp"])
@pytest.mark.parametrize("threads", [1, 2])
def test_avx2_tiles_and_short_depthwise_epilogue(monkeypatch, shape, o, k, stride, groups, act, threads):
    """Bias-only convs (the short epilogue) with fp16 overflows in interior pixels (the borders'
    per-pixel code would set the layer's one flag anyway): the same bits and finiteness flags with
    and without AVX2_TILES (and with a fused residual where the conv takes one)."""
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng(list(shape) + [o, k, stride, len(act)])
    x = f16(rng.standard_normal(shape) * 3)
    x[0, shape[1] // 2, shape[2] // 2] = 65000.0     # overflows in interior (block) pixels only
    x.reshape(-1)[5::211] = -0.0
    w = f16(rng.standard_normal((o, k, k, shape[3] // groups)) * 2)
    conv = dict(bias=rng.standard_normal(o), strides=(stride, stride), padding=((k - 1) // 2,) * 4, groups=groups,
                activation=act, activation_params={"min": -1.0, "max": 6.0} if act == "clamp" else None)
    y, ok = K.Conv2D(w, **conv).apply(x)
    assert ok == (act == "clamp") and np.isinf(y).any() != ok     # fp16 overflows, except under the clamp
    _conv_and_sum_same(AVX2_TILES, w, conv, x, rng, [jit.act_args(a, None, None, o) for a in ("relu", "none")])


@pytest.mark.parametrize("shape, k, stride, dil", [
    ((2, 11, 23, 24), 3, 2, 1),          # stride 2, a channel tail of 8 lanes
    ((1, 19, 37, 40), 3, 2, 1),          # blocks of 8 and an overlapping last block, a tail of 8
    ((1, 13, 17, 20), 5, 1, 1),          # 5 wide (tap by tap at stride 1), a tail of 4 lanes
    ((1, 15, 30, 16), 3, 1, 2),          # dilation 2
    ((2, 9, 14, 35), 3, 2, 1)])          # a tail of 3 lanes (masked loads in both halves' first)
@pytest.mark.parametrize("act", ["clamp", "hard_swish", "prelu"])
@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise_taps_in_halves(monkeypatch, shape, k, stride, dil, act, threads):
    """Depthwise blocks summed tap by tap in 8-lane halves (DW_TAPS8, AVX2): the same bits and
    finiteness flags as the 16-lane blocks, for the short epilogue (clamp) and the general one
    (hard_swish, a per-channel prelu slope), with fp16 overflows, -0 and NaN in interior pixels."""
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng(list(shape) + [k, stride, dil, len(act)])
    c = shape[3]
    x = f16(rng.standard_normal(shape) * 3)
    x[0, shape[1] // 2, shape[2] // 2] = 65000.0
    x[-1, shape[1] // 2 + 1, shape[2] // 2 - 2, :3] = np.nan
    x.reshape(-1)[5::211] = -0.0
    w = f16(rng.standard_normal((c, k, k, 1)) * 2)
    pad = dil * (k - 1) // 2
    conv = dict(bias=rng.standard_normal(c), strides=(stride, stride), padding=(pad,) * 4, dilation=(dil, dil),
                groups=c, activation=act, activation_params={"min": -1.0, "max": 6.0} if act == "clamp" else None,
                slope=rng.standard_normal(c).astype(np.float32) * 0.2 if act == "prelu" else None)
    new, old = _both(DW_TAPS8, lambda: K.Conv2D(w, **conv).apply(x))
    _same(new, old)
    assert new[1] is False                                   # the NaN (and the overflow) flagged


@pytest.mark.parametrize("shape, o, k, stride, groups", [
    ((2, 7, 9, 40), 72, 3, 1, 1),        # K = 360 (one k block, slices 128, 128, 104), 126 rows: 120 + 6
    ((1, 7, 7, 72), 64, 3, 1, 1),        # K = 648: k blocks 512 + 136; 49 rows in 9 groups of 5-6
    ((1, 5, 5, 60), 96, 3, 2, 1),        # stride 2, 9 rows: groups of 4-5; the padded borders packed
    ((1, 3, 5, 1024), 40, 1, 1, 1),      # 1x1 whose rows are 4 KB apart (packed, not in place): 15 rows
    ((1, 6, 6, 64), 64, 3, 1, 2)])       # grouped: 32 channels a group, one whole block each
@pytest.mark.parametrize("act", ["none", "relu"])
@pytest.mark.parametrize("threads", [1, 2])
def test_sweep_blocks(monkeypatch, shape, o, k, stride, groups, act, threads):
    """Packed convs with whole 32-column blocks (and a last partial one, which keeps the tiles): the
    same bits and finiteness flags with and without SWEEP, with fp16 overflows, NaN and -0 in the
    input, a scale (the general epilogue) or not, and a fused residual where the conv takes one."""
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng(list(shape) + [o, k, stride, groups, len(act)])
    x = f16(rng.standard_normal(shape) * 3)
    x[0, shape[1] // 2, shape[2] // 2, :3] = 65000.0
    x[-1, -1, -1, 0] = np.nan
    x.reshape(-1)[5::211] = -0.0
    w = f16(rng.standard_normal((o, k, k, shape[3] // groups)))
    for extra in ({}, {"scale": rng.standard_normal(o)}):
        conv = dict(bias=rng.standard_normal(o), strides=(stride, stride), padding=((k - 1) // 2,) * 4,
                    groups=groups, activation=act, **extra)
        y, ok = K.Conv2D(w, **conv).apply(x)
        assert not ok and np.isnan(y).any() and np.isfinite(y).mean() > 0.5
        _conv_and_sum_same(SWEEP, w, conv, x, rng, [jit.act_args(a, None, None, o) for a in ("relu", "none")])


@pytest.mark.parametrize("shape, o, groups", [
    ((1, 7, 9, 64), 32, 32),             # 1 channel a group (16 groups a vector), 63 rows: 12 x 5 + 3
    ((1, 6, 7, 128), 16, 16),            # 1 channel a group, K = 72: two k blocks (64 + 8)
    ((1, 7, 9, 64), 64, 32),             # 2 a group (8 groups a vector)
    ((2, 5, 7, 64), 128, 32),            # 4 a group, 70 rows: a last tile of 10 (the 12-row tile)
    ((1, 9, 9, 256), 256, 32),           # 8 a group (ResNeXt's g32), 81 rows: a last tile of 9
    ((1, 6, 5, 256), 256, 16)])          # 16 a group, 30 rows: a last tile of 6 (the 8-row tile)
@pytest.mark.parametrize("act", ["none", "relu"])
@pytest.mark.parametrize("threads", [1, 2])
def test_lanes6(monkeypatch, shape, o, groups, act, threads):
    """Lane-packed grouped 3x3 convs (og = 1-16 channels a group): the same bits and finiteness flags
    with and without LANES6, with fp16 overflows, NaN and -0 in the input, with and without a scale."""
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng(list(shape) + [o, groups, len(act)])
    x = f16(rng.standard_normal(shape) * 3)
    x[0, shape[1] // 2, shape[2] // 2, :3] = 65000.0
    x[-1, -1, -1, 0] = np.nan
    x.reshape(-1)[5::211] = -0.0
    w = f16(rng.standard_normal((o, 3, 3, shape[3] // groups)))
    for extra in ({}, {"scale": rng.standard_normal(o)}):
        conv = dict(bias=rng.standard_normal(o), padding=(1,) * 4, groups=groups, activation=act, **extra)
        y, ok = K.Conv2D(w, **conv).apply(x)
        assert not ok and np.isnan(y).any() and np.isfinite(y).mean() > 0.5
        _same(*_both(LANES6, lambda: K.Conv2D(w, **conv).apply(x)))


@pytest.mark.parametrize("shape, o, k", [
    ((1, 7, 9, 64), 64, 1),              # 1x1 in place, 63 rows: tiles of 12 and a last of 3
    ((2, 7, 7, 512), 96, 1),             # K = 512 (one k block), 98 rows: a merged 13-row tile
    ((1, 5, 6, 600), 64, 1),             # K = 600: k blocks 512 + 88, only the last one finished here
    ((1, 6, 7, 40), 72, 3),              # 3x3, packed: two whole blocks and a last of 8 columns (masked)
    ((1, 3, 5, 1024), 32, 1)])           # rows 4 KB apart: packed, swept
@pytest.mark.parametrize("act", ["none", "relu", "clamp"])
@pytest.mark.parametrize("threads", [1, 2])
def test_store8(monkeypatch, shape, o, k, act, threads):
    """The short epilogue of whole tiles (bias, none / relu / clamp, fp16, with a fused residual
    under none / relu / clamp): the same bits and finiteness flags with and without STORE8, with
    fp16 overflows in one output channel (a different 8-lane half per shape) or none, one inf in
    the residual or none, NaN and -0 in the input."""
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng(list(shape) + [o, k, len(act)])
    x = f16(rng.standard_normal(shape))
    x.reshape(-1)[5::211] = -0.0
    w = f16(rng.standard_normal((o, k, k, shape[3])) / np.sqrt(k * k * shape[3]))
    b = rng.standard_normal(o)
    big = b.copy()
    big[o - 27] = 7.0e4                  # channel o - 27 past the fp16 range in every pixel
    clamp = {"min": -1.0, "max": 6.0}
    for bias, finite in ((b, True), (big, act == "clamp")):
        conv = dict(bias=bias, padding=((k - 1) // 2,) * 4, activation=act,
                    activation_params=clamp if act == "clamp" else None)
        y, ok = K.Conv2D(w, **conv).apply(x)
        assert ok == finite and np.isfinite(y).all() == finite
        _same(*_both(STORE8, lambda: K.Conv2D(w, **conv).apply(x)))
        c = K.Conv2D(w, **conv)
        assert c.fusable_sum(x.shape)
        res = f16(rng.standard_normal(y.shape) * 2)
        res_inf = res.copy()
        res_inf.reshape(-1)[res.size // 2 + 3] = np.inf
        for r in (res, res_inf):
            for a in (jit.act_args("none", None, None, o), jit.act_args("relu", None, None, o),
                      jit.act_args("clamp", clamp, None, o)):
                _same(*_both(STORE8, lambda: K.Conv2D(w, **conv).apply_with_residual(x, r, a)))
    x[0, shape[1] // 2, shape[2] // 2, 0] = np.nan
    conv = dict(bias=b, padding=((k - 1) // 2,) * 4, activation=act,
                activation_params=clamp if act == "clamp" else None)
    _same(*_both(STORE8, lambda: K.Conv2D(w, **conv).apply(x)))


@pytest.mark.parametrize("shape, o, k, stride", [
    ((1, 7, 7, 64), 64, 1, 1),           # 1x1 in place, 49 rows: tiles of 12, 12, 12 and 13
    ((1, 7, 7, 520), 64, 1, 1),          # K = 520: two k blocks, the 13-row tile's sums parked in between
    ((2, 5, 5, 24), 60, 3, 1),           # 3x3 packed, 25 rows per image (12 + 13); a last block of 28 columns
    ((1, 13, 13, 16), 90, 3, 2)])        # stride 2: 49 rows, a last block of 26 columns (not swept)
@pytest.mark.parametrize("act", ["none", "relu"])
@pytest.mark.parametrize("threads", [1, 2])
def test_rows13(monkeypatch, shape, o, k, stride, act, threads):
    """Convs whose last tile has 13 rows (7x7 and 5x5 maps): the same bits and finiteness flags with
    and without ROWS13, with fp16 overflows, NaN and -0 in the input, a scale (the general epilogue)
    or not, and a fused residual where the conv takes one."""
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng(list(shape) + [o, k, stride, len(act)])
    x = f16(rng.standard_normal(shape) * 3)
    x[0, shape[1] // 2, shape[2] // 2, :3] = 65000.0
    x[-1, -1, -1, 0] = np.nan
    x.reshape(-1)[5::211] = -0.0
    w = f16(rng.standard_normal((o, k, k, shape[3])))
    for extra in ({}, {"scale": rng.standard_normal(o)}):
        conv = dict(bias=rng.standard_normal(o), strides=(stride, stride), padding=((k - 1) // 2,) * 4,
                    activation=act, **extra)
        y, ok = K.Conv2D(w, **conv).apply(x)
        assert not ok and np.isnan(y).any() and np.isfinite(y).mean() > 0.5
        _conv_and_sum_same(ROWS13, w, conv, x, rng, [jit.act_args(a, None, None, o) for a in ("relu", "none")])
