"""emit/base64_native.py: the Constants-JSON's base64, the bytes of binascii on every path, and
what save does with its slices (hashed on the save thread while written, same files)."""
import binascii
import hashlib
import io
import json
import os

import numpy as np
import pytest

from onnx_mrvl import json_stream
from onnx_mrvl.artifact import file_writes
from onnx_mrvl.emit import base64_native, const_entry
from onnx_mrvl.emit.json_attrs import ConstEntry
from onnx_mrvl.split.deploy import attach_artifact
from onnx import helper


def _want(raw: np.ndarray) -> bytes:
    return binascii.b2a_base64(raw.tobytes(), newline=False)


def _encoded(raw: np.ndarray) -> bytes:
    out = np.empty(base64_native.encoded_size(raw.size) + 5, np.uint8)
    n = base64_native.encode_into(raw, out)
    return out[:n].tobytes()


def test_the_native_encoder_is_used_here():
    """cc is on every machine that runs the tests: the encoder must build and pass its probe."""
    assert base64_native.why_not_used() == ""


@pytest.mark.parametrize("vector", [0, 1])
def test_every_length_and_byte_matches_binascii(vector):
    lib, have = base64_native._library()
    if lib is None or vector > have:
        pytest.skip("no native encoder / no vector path on this CPU")
    rng = np.random.default_rng(0)
    for n in list(range(0, 300)) + [4095, 4096, 4097, 65535, (3 << 20) + 1, (3 << 20) + 2]:
        raw = rng.integers(0, 256, n, dtype=np.uint8)
        assert base64_native._encode_with(lib, vector, raw) == _want(raw), n
    raw = np.tile(np.arange(256, dtype=np.uint8), 300)   # every byte value at every offset mod 3
    for start in range(3):
        assert base64_native._encode_with(lib, vector, raw[start:]) == _want(raw[start:])


def test_public_calls_match_binascii_small_and_large():
    rng = np.random.default_rng(1)
    for n in (0, 1, 2, 3, 100, base64_native.MIN_SIZE - 1, base64_native.MIN_SIZE, 1 << 20):
        raw = rng.integers(0, 256, n, dtype=np.uint8)
        assert _encoded(raw) == _want(raw)
        assert base64_native.encode(raw) == _want(raw)
        assert base64_native.text(raw) == _want(raw).decode("ascii")


def test_binascii_when_disabled_or_refused(monkeypatch):
    raw = np.random.default_rng(2).integers(0, 256, 100_001, dtype=np.uint8)
    monkeypatch.setattr(base64_native, "_STATE", {"lib": None, "vector": 0, "checked": False, "why": ""})
    monkeypatch.setattr(base64_native, "ENABLED", False)
    assert _encoded(raw) == _want(raw) and "ONNX_MRVL_NATIVE_BASE64" in base64_native.why_not_used()
    # an encoder that differs from binascii on one probe is refused: binascii encodes
    real = base64_native._encode_with
    monkeypatch.setattr(base64_native, "_STATE", {"lib": None, "vector": 0, "checked": False, "why": ""})
    monkeypatch.setattr(base64_native, "ENABLED", True)
    monkeypatch.setattr(base64_native, "_encode_with",
                        lambda lib, v, r: real(lib, v, r)[:-1] + b"A" if r.size == 4096 else real(lib, v, r))
    assert "differs from binascii" in base64_native.why_not_used()
    assert _encoded(raw) == _want(raw)


def test_no_compiler_means_binascii(monkeypatch):
    monkeypatch.setattr(base64_native, "_STATE", {"lib": None, "vector": 0, "checked": False, "why": ""})
    monkeypatch.setattr(base64_native, "_compiler", lambda: None)
    assert "no C compiler" in base64_native.why_not_used()
    raw = np.arange(30_000, dtype=np.uint8)
    assert base64_native.encode(raw) == _want(raw)


def test_constants_json_slices_are_read_only_and_join_to_the_text(monkeypatch):
    monkeypatch.setattr(const_entry, "CHUNK", 3 * 5000)   # several slices, the last one short
    arr = np.random.default_rng(3).standard_normal((7, 5001)).astype(np.float32)
    arr.flags.writeable = False
    entry = ConstEntry({"shape": [7, 5001], "dtype": "float32", "min": "0", "max": "1",
                        "data_base64": ""}).attach_lazy(arr)
    pieces = list(dict.get(entry, "data_base64").json_string_chunks())
    assert len(pieces) > 2 and all(isinstance(p, memoryview) and p.readonly for p in pieces)
    text = _want(arr.reshape(-1).view(np.uint8)).decode("ascii")
    assert b"".join(pieces).decode("ascii") == text
    f = io.BytesIO()
    json_stream.dump_json({"c": entry}, f)
    plain = {"c": {"shape": [7, 5001], "dtype": "float32", "min": "0", "max": "1", "data_base64": text}}
    assert f.getvalue() == (json.dumps(plain, indent=1) + "\n").encode()


def test_hashing_writer_hashes_read_only_views_on_the_thread(tmp_path):
    """Read-only memoryviews (the base64 slices) are hashed on the pool like bytes; writable
    buffers on the caller's thread; the digest is the file's either way."""
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(4)
    chunks = [memoryview(rng.integers(0, 256, file_writes.HashingFile.PARALLEL + k, dtype=np.uint8)).toreadonly()
              for k in range(3)]
    chunks.append(bytearray(rng.integers(0, 256, file_writes.HashingFile.PARALLEL, dtype=np.uint8).tobytes()))
    chunks.append(b"tail")
    submitted = []

    class Pool(ThreadPoolExecutor):
        def submit(self, fn, *a):
            submitted.append(len(a[0]))
            return super().submit(fn, *a)

    path = tmp_path / "f.bin"
    with Pool(max_workers=1) as pool, open(path, "wb") as f:
        out = file_writes.HashingFile(f, None, pool)
        for c in chunks:
            out.write(c)
        digest = out.hexdigest()
    data = path.read_bytes()
    assert digest == hashlib.sha256(data).hexdigest() and out.size == len(data) == sum(len(c) for c in chunks)
    assert submitted == [len(c) for c in chunks[:3]]


def test_attach_artifact_takes_a_known_digest():
    binary = os.urandom(1000)
    a, b = helper.make_node("Subgraph", [], [], name="a"), helper.make_node("Subgraph", [], [], name="b")
    attach_artifact(a, binary, artifact="a.bin")
    attach_artifact(b, binary, artifact="a.bin", sha256=hashlib.sha256(binary).hexdigest())
    b.name = "a"
    assert a.SerializeToString() == b.SerializeToString()
