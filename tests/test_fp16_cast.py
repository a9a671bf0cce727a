"""emit/fp16_cast.py: the weights' float32 -> float16 cast, bit-identical to numpy's on every path."""
import numpy as np
import pytest

from onnx_mrvl.emit import fp16_cast


def _same(a, b):
    return a.dtype == b.dtype == np.float16 and a.shape == b.shape and a.flags.c_contiguous and \
        np.array_equal(a.view(np.uint16), b.view(np.uint16))


def _numpy(v):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.ascontiguousarray(v, dtype=np.float16)


@pytest.mark.parametrize("shape,view", [
    ((64, 32, 3, 3), lambda w: w.transpose(0, 2, 3, 1)),           # OIHW -> OHWI: row blocks
    ((256, 64, 7, 7), lambda w: w.transpose(0, 2, 3, 1)),          # an NCHW-flatten FC kernel
    ((256, 64, 7, 7), lambda w: w[3:].transpose(0, 2, 3, 1)),      # a view that starts inside its memory
    ((512, 300), lambda w: w),                                     # contiguous
    ((512, 300), lambda w: w.T),                                   # first axis not outermost: numpy
    ((512, 300), lambda w: w[:, ::2]),                             # strided: numpy
    ((100,), lambda w: w),                                         # small: numpy
])
def test_cast_matches_numpy(shape, view):
    w = np.random.default_rng(0).standard_normal(shape, dtype=np.float32) * 3000
    v = view(w)
    assert _same(fp16_cast.to_float16(v), _numpy(v))


def test_cast_of_every_kind_of_value():
    """Subnormals, the overflow edge (65520 rounds to inf), infinities and NaN, in blocks."""
    bits = np.arange(0, 1 << 32, 997, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)[: (x_n := bits.size // 64 * 64)].reshape(-1, 8, 8)
    v = x.transpose(0, 2, 1)
    got, want = fp16_cast.to_float16(v), _numpy(v)
    nan = np.isnan(got) & np.isnan(want)
    assert got.shape == want.shape and x_n > fp16_cast.MIN_SIZE
    assert ((got.view(np.uint16) == want.view(np.uint16)) | nan).all()


def test_small_blocks(monkeypatch):
    monkeypatch.setattr(fp16_cast, "BLOCK", 1000)       # many row blocks, the last one short
    w = np.random.default_rng(1).standard_normal((301, 40, 3, 3), dtype=np.float32)
    v = w.transpose(0, 2, 3, 1)
    assert _same(fp16_cast.to_float16(v), _numpy(v))


def test_numpy_when_the_kernel_is_unusable(monkeypatch):
    monkeypatch.setattr(fp16_cast, "_STATE", {"session": None, "checked": True})
    w = np.random.default_rng(2).standard_normal((300, 400), dtype=np.float32)
    assert _same(fp16_cast.to_float16(w), _numpy(w))


def test_the_kernel_is_used_here():
    """onnxruntime is a dependency: its Cast must pass the probe here (else the speed-up is lost)."""
    assert fp16_cast._session() is not None


def test_a_kernel_that_rounds_otherwise_is_refused(monkeypatch):
    """The probe catches a kernel that rounds toward zero, or ties away from zero: numpy casts then."""
    def toward_zero(session, src, out):
        want = _numpy(src)
        bigger = np.abs(want.astype(np.float32)) > np.abs(src)
        out[:] = np.where(bigger, np.nextafter(want, np.float16(0)), want)

    def ties_away(session, src, out):
        want = _numpy(src)
        other = np.nextafter(want, np.where(np.signbit(src), np.float16(-np.inf), np.float16(np.inf))).astype(np.float32)
        tie = (want.astype(np.float64) + other) / 2 == src
        out[:] = np.where(tie & np.isfinite(other), other.astype(np.float16), want)

    for kernel in (toward_zero, ties_away):
        monkeypatch.setattr(fp16_cast, "_STATE", {"session": None, "checked": False})
        monkeypatch.setattr(fp16_cast, "_run", kernel)
        with np.errstate(all="ignore"):
            assert fp16_cast._session() is None, kernel.__name__
        w = np.random.default_rng(3).standard_normal((300, 400), dtype=np.float32)
        assert _same(fp16_cast.to_float16(w), _numpy(w))
