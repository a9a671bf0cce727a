"""The conversion's second core (issue #20, convert + save time): blocks.py, the fp16 casts checked
block by block, the region binary written on its own thread, the model file parsed from a map.
Every result is the same with one worker (ONNX_MRVL_CONVERT_THREADS=1) as with several."""
import hashlib
import os
import threading
import time

import numpy as np
import onnx
import pytest
from onnx_mrvl.testing.models import tiny_cnn

import onnx_mrvl
from onnx_mrvl import blocks, modelio
from onnx_mrvl.artifact import file_writes
from onnx_mrvl.emit import fp16_cast
from onnx_mrvl.emit.layer_common import finite_in
from onnx_mrvl.errors import ModelError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(params=["1", "2", "3"])
def threads(request, monkeypatch):
    monkeypatch.setenv("ONNX_MRVL_CONVERT_THREADS", request.param)
    return int(request.param)


# ---- blocks -------------------------------------------------------------------------------------

def test_run_all_keeps_order_and_uses_the_pool_only_with_several_workers(threads):
    names = blocks.run_all(lambda i: (i * i, threading.current_thread().name), range(23))
    assert [v for v, _ in names] == [i * i for i in range(23)]
    pooled = {n for _, n in names if n.startswith("onnx_mrvl-blocks")}
    assert bool(pooled) == (threads > 1)
    assert blocks.run_all(lambda i: i, []) == []


def test_run_all_raises_the_first_failed_item(threads):
    finished = []

    def fn(i):
        time.sleep(0.001 * (i % 3))
        finished.append(i)
        if i in (4, 7):
            raise ValueError(f"item {i}")
        return i

    with pytest.raises(ValueError, match="item 4"):
        blocks.run_all(fn, range(10))
    assert sorted(finished) == (list(range(10)) if threads > 1 else list(range(5)))   # inline: stops there


def test_nested_run_all_runs_inline_in_a_pool_thread(monkeypatch):
    monkeypatch.setenv("ONNX_MRVL_CONVERT_THREADS", "2")
    inner = blocks.run_all(lambda i: blocks.run_all(lambda j: (i, j, threading.current_thread().name), range(3)),
                           range(2))
    assert [[(i, j) for i, j, _ in row] for row in inner] == [[(i, j) for j in range(3)] for i in range(2)]
    assert len({name for _, _, name in inner[1]}) == 1       # the pool lane did not fan out again


def test_background_runs_inline_with_one_worker(monkeypatch):
    monkeypatch.setenv("ONNX_MRVL_CONVERT_THREADS", "1")
    f = blocks.background(threading.current_thread)
    assert f.done() and f.result() is threading.current_thread()
    bad = blocks.background(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        bad.result()
    monkeypatch.setenv("ONNX_MRVL_CONVERT_THREADS", "2")
    assert blocks.background(threading.current_thread).result() is not threading.current_thread()


def test_workers_reads_the_environment(monkeypatch):
    monkeypatch.setenv("ONNX_MRVL_CONVERT_THREADS", "0")
    assert blocks.workers() == 1
    monkeypatch.setenv("ONNX_MRVL_CONVERT_THREADS", "junk")
    assert 1 <= blocks.workers() <= blocks.MAX_WORKERS


# ---- the fp16 cast, checked as it is cast -------------------------------------------------------

def _numpy(v):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.ascontiguousarray(v, dtype=np.float16)


@pytest.mark.parametrize("bad", [None, 65520.0, -65520.0, 65519.99, np.inf, np.nan])
@pytest.mark.parametrize("view", [lambda w: w, lambda w: w.transpose(0, 2, 3, 1), lambda w: w[:, ::2]])
def test_checked_cast_is_numpys_cast_and_finite_in(threads, monkeypatch, bad, view):
    monkeypatch.setattr(fp16_cast, "BLOCK", 5000)       # many blocks, spread over the workers
    w = np.random.default_rng(5).standard_normal((96, 16, 5, 5), dtype=np.float32) * 1000
    if bad is not None:
        w[77, 2, 2, 4] = bad                            # in a late block
    v = view(w)
    with np.errstate(over="ignore", invalid="ignore"):
        got, finite = fp16_cast.to_float16_checked(v)
    want = _numpy(v)
    assert got.flags.c_contiguous and got.shape == want.shape
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16), equal_nan=False) or \
        ((got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))).all()
    assert finite == finite_in(v, want, True)
    assert finite == (bad is None or bad == 65519.99)


def test_a_weight_not_finite_in_fp16_fails_compile(threads, monkeypatch):
    """The check moved into the cast: compile still refuses such a weight (in a late block), naming it."""
    import base64
    import copy
    from onnx_mrvl.emit import compile_json
    monkeypatch.setattr(fp16_cast, "MIN_SIZE", 16)
    monkeypatch.setattr(fp16_cast, "BLOCK", 64)
    sg = onnx_mrvl.convert(os.path.join(ROOT, "examples", "fashion_mnist.onnx")).subgraphs[0]
    nodes, consts = copy.deepcopy(sg.nodes_json), copy.deepcopy(sg.consts_json)
    name = max((k for k in consts if consts[k].get("dtype", "float32") == "float32"),
               key=lambda k: int(np.prod(consts[k]["shape"])))
    a = np.frombuffer(base64.b64decode(consts[name]["data_base64"]), np.float32).copy()
    assert a.size > 16 * 64
    compile_json(nodes, consts)                       # as converted: compiles
    a[-3] = 7e4
    consts[name] = dict(consts[name], data_base64=base64.b64encode(a.tobytes()).decode())
    with pytest.raises(onnx_mrvl.errors.CompileError, match="not finite in fp16"):
        compile_json(nodes, consts)


# ---- the files of a save ------------------------------------------------------------------------

def _writer(data, gil_free=False, sha256=None, fail=False):
    def write(f):
        if fail:
            raise OSError(28, "No space left on device")
        f.write(data)
    write.gil_free, write.sha256 = gil_free, sha256
    return write


def test_write_files_digests_and_reports_in_order(threads, tmp_path):
    big = os.urandom(3 << 20)
    files = [("a.json", _writer(b"{}")), ("b.bin", _writer(big, gil_free=True)),
             ("c.bin", _writer(big[:1000], gil_free=True, sha256=hashlib.sha256(big[:1000]).hexdigest())),
             ("d.json", _writer(b"[]"))]
    seen = []
    digests = file_writes.write_files(str(tmp_path), files, lambda p: open(p, "xb"),
                                      lambda name, size, s: seen.append((name, size)))
    assert [(n, d['size']) for n, d in digests.items()] == seen and [n for n, _ in seen] == ["a.json", "b.bin", "c.bin", "d.json"]
    for name, entry in digests.items():
        data = (tmp_path / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@pytest.mark.parametrize("which", [1, 2])
def test_write_files_fails_on_either_thread_and_closes_every_file(threads, tmp_path, which):
    opened = []

    def create(path):
        opened.append(open(path, "xb"))
        return opened[-1]

    files = [("a.json", _writer(b"{}", fail=which == 2)), ("b.bin", _writer(b"x" * 5000, gil_free=True, fail=which == 1)),
             ("c.json", _writer(b"[]"))]
    with pytest.raises(OSError, match="No space"):
        file_writes.write_files(str(tmp_path), files, create)
    assert len(opened) == 3 and all(f.closed for f in opened)


def test_saved_files_are_the_same_with_one_or_more_workers(tmp_path, monkeypatch):
    r = onnx_mrvl.convert(tiny_cnn())
    trees = []
    for n in ("1", "2"):
        monkeypatch.setenv("ONNX_MRVL_CONVERT_THREADS", n)
        out = tmp_path / f"out{n}"
        r.save(str(out))
        trees.append({p: (out / p).read_bytes() for p in sorted(os.listdir(out))})
    assert trees[0] == trees[1]


# ---- the model file, parsed from a map ------------------------------------------------------------

def test_a_mapped_model_file_parses_and_hashes_as_read(tmp_path, monkeypatch):
    monkeypatch.setattr(modelio, "MMAP_MIN", 0)
    path = str(tmp_path / "m.onnx")
    onnx.save(tiny_cnn(), path)
    proto, sizes = modelio.read_model(path)
    assert proto.SerializeToString() == onnx.load(path).SerializeToString()
    data = open(path, "rb").read()
    assert modelio.loaded_sha256(path) == hashlib.sha256(data).hexdigest()


def test_a_model_file_changed_while_mapped_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(modelio, "MMAP_MIN", 0)
    path = str(tmp_path / "m.onnx")
    onnx.save(tiny_cnn(), path)
    real = modelio.raw_data_sizes

    def touched(data):
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))   # written to meanwhile
        return real(data)
    monkeypatch.setattr(modelio, "raw_data_sizes", touched)
    with pytest.raises(ModelError, match="changed while it was read"):
        modelio.read_model(path)


def test_a_truncated_mapped_file_is_not_a_model(tmp_path, monkeypatch):
    monkeypatch.setattr(modelio, "MMAP_MIN", 0)
    path = str(tmp_path / "m.onnx")
    data = tiny_cnn().SerializeToString()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(ModelError, match="not an ONNX model"):
        modelio.read_model(path)


def test_finite16_on_every_float16_value():
    values = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    one = np.float16(1.0)
    assert all(fp16_cast.finite16(np.array([one, v, one], np.float16)) == bool(np.isfinite(v)) for v in values)
    assert fp16_cast.finite16(values[np.isfinite(values)]) and fp16_cast.finite16(values[:0])


@pytest.mark.parametrize("n", [0, 7, 3000, 3001, 9000, 100_003])
def test_base64_slices_encoded_ahead_join_to_the_text(threads, monkeypatch, n):
    import binascii
    from onnx_mrvl.emit import const_entry
    monkeypatch.setattr(const_entry, "CHUNK", 3000)
    a = np.random.default_rng(n).standard_normal(n, dtype=np.float32)
    pieces = list(const_entry.Base64Text(a).json_string_chunks())
    assert all(isinstance(p, memoryview) and p.readonly for p in pieces)
    assert b"".join(pieces) == binascii.b2a_base64(a.tobytes(), newline=False)
    assert len(pieces) == -(-a.nbytes // 3000)


# ---- a model binary's bytes: copied into a new bytes object beside the hash ------------------------

@pytest.mark.parametrize("sizes", [[64, 0, 5000], [100, (1 << 24) + 5, 3, 2 << 20], [40, 3 * (1 << 24) + 1]])
def test_join_with_digest_is_join_plus_its_sha256(threads, monkeypatch, sizes):
    from onnx_mrvl.artifact import assemble
    monkeypatch.setattr(assemble, "COPY_BLOCK", 1 << 20)
    rng = np.random.default_rng(len(sizes))
    parts = [rng.integers(0, 256, n, dtype=np.uint8) if k % 2 else rng.integers(0, 256, n, dtype=np.uint8).tobytes()
             for k, n in enumerate(sizes)]
    data, digest = assemble.join_with_digest(parts)
    body = b"".join(bytes(p) for p in parts)
    assert type(data) is bytes and data == body + hashlib.sha256(body).digest()
    assert digest == hashlib.sha256(data).hexdigest()
    assert hash(data) == hash(bytes(bytearray(data)))     # an ordinary bytes object


def test_pack_is_the_same_bytes_with_one_or_more_workers(monkeypatch):
    from onnx_mrvl.artifact import assemble
    r = onnx_mrvl.convert(tiny_cnn())
    sg = r.subgraphs[0]
    monkeypatch.setattr(assemble, "PARALLEL_MIN", 0)
    monkeypatch.setattr(assemble, "COPY_BLOCK", 64)
    for n in ("1", "2"):
        monkeypatch.setenv("ONNX_MRVL_CONVERT_THREADS", n)
        binary, _, digest = onnx_mrvl.emit.compile_program_sha256(sg.nodes_json, sg.consts_json)
        assert binary == sg.binary and digest == hashlib.sha256(binary).hexdigest()
