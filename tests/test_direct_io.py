"""Large saved files written past the page cache (artifact/direct_io.py, issue #20): the same bytes
and digests as a buffered write, O_DIRECT really used where the file system takes it, and the
buffered write where it is refused or turned off."""
import errno
import fcntl
import hashlib
import os

import numpy as np
import pytest
from onnx_mrvl.testing.models import tiny_cnn

import onnx_mrvl
from onnx_mrvl.artifact import direct_io, file_writes

pytestmark = pytest.mark.skipif(not direct_io.enabled(), reason="O_DIRECT: Linux only")
SIZES = [0, 1, 4095, 4096, 5000, direct_io.BLOCK, direct_io.BLOCK + 4096, 2 * direct_io.BLOCK + 12345]


def _pieces(total: int, seed: int):
    """``total`` random bytes cut at random places (bytes, memoryviews, an array)."""
    data = np.random.default_rng(seed).integers(0, 256, total, dtype=np.uint8).tobytes()
    cuts = sorted(np.random.default_rng(seed + 1).integers(0, total + 1, 5).tolist())
    bounds = [0, *cuts, total]
    parts = [data[a:b] for a, b in zip(bounds, bounds[1:])]
    parts[1::3] = [memoryview(p) for p in parts[1::3]]
    parts[2::3] = [np.frombuffer(p, np.uint8) for p in parts[2::3]]
    return data, parts


def _direct_or_skip(f):
    d = direct_io.direct(f)
    if d is None:
        pytest.skip("the file system of tmp_path refuses O_DIRECT")
    return d


@pytest.mark.parametrize("total", SIZES)
def test_direct_file_writes_the_same_bytes(tmp_path, total):
    data, parts = _pieces(total, total)
    path = tmp_path / "x.bin"
    with open(path, "xb") as f:
        d = _direct_or_skip(f)
        assert fcntl.fcntl(f.fileno(), fcntl.F_GETFL) & os.O_DIRECT
        assert sum(d.write(p) for p in parts) == total
        d.finish()
        assert not fcntl.fcntl(f.fileno(), fcntl.F_GETFL) & os.O_DIRECT   # the tail went buffered
    assert path.read_bytes() == data


def test_refused_o_direct_writes_buffered(tmp_path, monkeypatch):
    real = fcntl.fcntl

    def refuse(fd, cmd, arg=0):
        if cmd == fcntl.F_SETFL and arg & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, cmd, arg)
    monkeypatch.setattr(fcntl, "fcntl", refuse)
    with open(tmp_path / "x", "xb") as f:
        assert direct_io.direct(f) is None
    monkeypatch.setenv("ONNX_MRVL_DIRECT_IO", "0")
    monkeypatch.setattr(fcntl, "fcntl", real)
    with open(tmp_path / "y", "xb") as f:
        assert direct_io.direct(f) is None


def test_a_write_refused_with_einval_goes_on_buffered(tmp_path, monkeypatch):
    data, parts = _pieces(direct_io.BLOCK * 2 + 777, 7)
    real = os.write
    calls = []

    def write(fd, view):
        calls.append(len(view))
        if len(calls) == 1:
            raise OSError(errno.EINVAL, "Invalid argument")   # e.g. a device block larger than 4 KiB
        return real(fd, view)
    with open(tmp_path / "x.bin", "xb") as f:
        d = _direct_or_skip(f)
        monkeypatch.setattr(os, "write", write)
        for p in parts:
            d.write(p)
        d.finish()
        monkeypatch.setattr(os, "write", real)
        assert not d.direct
    assert (tmp_path / "x.bin").read_bytes() == data and calls[0] == calls[1] == direct_io.BLOCK


def test_write_files_takes_the_direct_path_for_a_marked_writer(tmp_path, monkeypatch):
    big = os.urandom(direct_io.BLOCK * 3 + 100)
    used = []
    made = direct_io.direct
    monkeypatch.setattr(direct_io, "direct", lambda f: used.append(made(f)) or used[-1])

    def writer(data, mark):
        def write(f):
            for i in range(0, len(data), 1 << 20):
                f.write(memoryview(data)[i:i + (1 << 20)])
        write.direct = mark
        return write
    files = [("a.json", writer(b"{}", False)), ("b.bin", writer(big, True)), ("c.bin", writer(big[:5000], True))]
    digests = file_writes.write_files(str(tmp_path), files, lambda p: open(p, "xb"))
    if used[0] is None:
        pytest.skip("the file system of tmp_path refuses O_DIRECT")
    assert len(used) == 2       # the unmarked file is written buffered
    for name, entry in digests.items():
        data = (tmp_path / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert (tmp_path / "b.bin").read_bytes() == big


def test_save_marks_large_files_and_writes_the_same_folder(tmp_path, monkeypatch):
    """save() hands the region binary and its Constants-JSON to the direct path when large (here:
    the threshold lowered to 0), with the same bytes in every file."""
    r = onnx_mrvl.convert(tiny_cnn())
    marked = []
    real = file_writes._write_one
    monkeypatch.setattr(file_writes, "_write_one",
                        lambda f, w, *a: (marked.append((os.path.basename(f.name), getattr(w, "direct", False))),
                                          real(f, w, *a))[1])
    trees = []
    for size in (1 << 60, 0):
        monkeypatch.setattr(direct_io, "MIN_SIZE", size)
        out = tmp_path / f"out{size}"
        r.save(str(out))
        trees.append({p: (out / p).read_bytes() for p in sorted(os.listdir(out))})
    assert trees[0] == trees[1]
    large = {name for name, d in marked[len(marked) // 2:] if d}
    assert not any(d for _, d in marked[:len(marked) // 2])
    assert large == {f"{r.subgraphs[0].name}-consts.json", r.subgraphs[0].artifact}


def test_a_file_object_without_a_descriptor_is_written_as_before():
    import io
    assert direct_io.direct(io.BytesIO()) is None


def test_a_failing_direct_writer_fails_as_before(tmp_path):
    """A writer that raises half-way: its error comes out (nothing else is written), every file closed."""
    opened = []

    def create(path):
        opened.append(open(path, "xb"))
        return opened[-1]

    def write(f):
        f.write(os.urandom(direct_io.BLOCK + 100))
        raise OSError(errno.ENOSPC, "No space left on device")
    write.direct = True
    with pytest.raises(OSError, match="No space"):
        file_writes.write_files(str(tmp_path), [("a.bin", write)], create)
    assert all(f.closed for f in opened)
