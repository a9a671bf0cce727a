"""Format 1.1's compressed meta (ZMET section) and reading format 1.0 files (docs/binary-format.md).

Every bad ZMET section (not zlib, truncated, trailing bytes, a length that lies, a decompression
bomb) is refused with ArtifactError, in bounded time and memory; 1.0 files still load.
"""
import hashlib
import json
import struct
import time
import tracemalloc
import zlib

import pytest

from onnx_mrvl.artifact import FORMAT_MINOR, canonical_json, load, pack
from onnx_mrvl.artifact.format import MAX_META_SIZE
from onnx_mrvl.errors import ArtifactError
from test_artifact import (HEADER, SECTION, V10_SHA256, ZHEAD, assemble, expect_error,
                           make_program, parse, resign, zmet)


N = len(canonical_json(parse(pack(*make_program()))[2]))       # bytes of the meta JSON


@pytest.fixture(scope="module")
def program():
    return make_program()


@pytest.fixture(scope="module")
def parts(program):
    """(canonical meta JSON, weight section) of the test program."""
    _, _, meta, wght = parse(pack(*program))
    return canonical_json(meta), wght


def test_writer_writes_1_1_and_compresses(program):
    data = pack(*program)
    old = pack(*program, format_minor=0)
    # FORMAT_MINOR 2 (boundary quantization, format 1.2): a meta without it is still written as 1.1
    assert FORMAT_MINOR == 2 and load(data).version == (1, 1) and load(old).version == (1, 0)
    (_, _, minor, _, flags, _, _), table, _, _ = parse(data)
    assert (minor, flags, table[0][0]) == (1, 1, b"ZMET")
    assert len(data) < len(old) - 1500                          # 2.7 KB of JSON -> ~0.9 KB


def test_format_1_0_files_still_load(program):
    """The 1.0 writer is byte-identical to the one before 1.1; its files load and re-pack."""
    old = pack(*program, format_minor=0)
    assert hashlib.sha256(old).hexdigest() == V10_SHA256
    (_, major, minor, _, flags, _, _), table, meta, _ = parse(old)
    assert (major, minor, flags, table[0][0]) == (1, 0, 0, b"META")
    a, b = load(old), load(pack(*program))
    assert a.meta == b.meta and a.version == (1, 0)
    assert all(a.weights[k].tobytes() == b.weights[k].tobytes() for k in b.weights)
    assert pack(a.meta, a.weights, format_minor=0) == old
    assert pack(a.meta, a.weights) == pack(*program)            # re-packing upgrades to 1.1
    with pytest.raises(ArtifactError, match="format_minor must be 0, 1 or 2"):
        pack(*program, format_minor=3)


def test_meta_section_must_match_the_format(parts):
    meta, wght = parts
    expect_error(assemble(meta, wght, minor=1, compress=False), "flags 0x00000000",
                 "format 1.1 stores the meta compressed")
    expect_error(assemble(meta, wght, minor=1, compress=False, flags=1), "flag bit 0 is 1",
                 "'ZMET' section, not b'META'")
    expect_error(assemble(meta, wght, minor=0, compress=True), "flags 0x00000001",
                 "expected 0 for format 1.0")
    expect_error(assemble(meta, wght, minor=0, compress=True, flags=0),
                 "unknown section tag b'ZMET'", "format 1.0 defines ['META', 'WGHT']")
    expect_error(assemble(meta, wght, minor=3, compress=True, flags=0), "flag bit 0 is 0",
                 "'META' section, not b'ZMET'")
    both = assemble(meta, wght, extra=[(b"META", meta)])
    expect_error(both, "flag bit 0 is 1")


@pytest.mark.parametrize("section, words", [
    (lambda m: b"", ["has 0 bytes, too short"]),
    (lambda m: ZHEAD.pack(len(m)), ["too short"]),
    (lambda m: ZHEAD.pack(len(m)) + b"\x00" * 40, ["not valid zlib data", "unknown compression method"]),
    (lambda m: ZHEAD.pack(len(m)) + b"not zlib at all", ["not valid zlib data"]),
    (lambda m: zmet(m)[:-10], ["truncated", "does not end"]),
    (lambda m: zmet(m)[:-1], ["truncated", "does not end"]),
    (lambda m: zmet(m) + b"\0\0\0", ["3 bytes after the end of the zlib stream"]),
    (lambda m: zmet(m) + zlib.compress(b"{}"), ["bytes after the end of the zlib stream"]),
    (lambda m: zmet(m, len(m) - 1), [f"more than the {N - 1} bytes it declares"]),
    (lambda m: zmet(m, 0), ["more than the 0 bytes it declares"]),
    (lambda m: zmet(m, len(m) + 1), [f"decompresses to {N} bytes but declares {N + 1}"]),
    (lambda m: zmet(m, 2 ** 64 - 1), ["more than the limit", "bomb"]),
    (lambda m: zmet(m, MAX_META_SIZE + 1), ["more than the limit"]),
    (lambda m: zmet(m, 10 ** 7), ["more than", "bytes of zlib data can hold"]),
    (lambda m: zmet(m)[:-4] + bytes(4), ["not valid zlib data", "incorrect data check"]),
    # a gzip stream and a raw deflate stream are not the zlib format
    (lambda m: ZHEAD.pack(len(m)) + _gzip(m), ["not valid zlib data"]),
    (lambda m: ZHEAD.pack(len(m)) + zlib.compress(m, 9, wbits=-15), ["not valid zlib data"]),
    (lambda m: ZHEAD.pack(len(m)) + _with_dict(m), ["not valid zlib data"]),
])
def test_bad_compressed_meta(parts, section, words):
    meta, wght = parts
    expect_error(assemble(meta, wght, zmet_section=section(meta)), "compressed meta", *words)


def _gzip(m):
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    return c.compress(m) + c.flush()


def _with_dict(m):
    c = zlib.compressobj(9, zlib.DEFLATED, 15, zdict=b'"layers":"name":')
    return c.compress(m) + c.flush()


def test_meta_checks_apply_to_the_decompressed_json(parts):
    meta, wght = parts
    expect_error(assemble(b"{not json", wght), "meta is not valid JSON")
    expect_error(assemble(b"\xff\xfe", wght), "not valid UTF-8")
    expect_error(assemble(json.dumps(json.loads(meta)).encode(), wght), "not in canonical form")
    assert load(assemble(meta, wght)).meta == json.loads(meta)


def test_a_different_zlib_encoding_of_the_same_meta_loads(parts):
    """Another zlib build (or level) may encode differently: the stream is checked, not its bytes."""
    meta, wght = parts
    for level in (0, 1, 6):
        section = ZHEAD.pack(len(meta)) + zlib.compress(meta, level)
        assert load(assemble(meta, wght, zmet_section=section)).meta == json.loads(meta)


@pytest.mark.parametrize("declared", [1000, MAX_META_SIZE])
def test_decompression_bomb_is_stopped_early(parts, declared):
    """64 MiB of JSON-ish text in ~65 KB of zlib: refused without inflating it all."""
    _, wght = parts
    bomb = b"[" + b" " * (MAX_META_SIZE + 16) + b"]"
    section = ZHEAD.pack(declared) + zlib.compress(bomb, 9)
    data = assemble(b"", wght, zmet_section=section)
    tracemalloc.start()
    t = time.process_time()   # CPU time, not the machine's load
    try:
        with pytest.raises(ArtifactError, match="more than the .* bytes it declares"):
            load(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < declared + (3 << 20), peak                 # the declared size + chunks
    assert time.process_time() - t < 5


def test_old_reader_refuses_1_1_with_upgrade(program):
    """Flag bit 0 is a "must understand" bit: a 1.0 reader says "written by a newer onnx_mrvl"."""
    data = pack(*program)
    flags = struct.unpack_from("<I", data, 16)[0]
    assert flags == 1 and flags & 0xFFFF                       # bits 0-15: must understand
    # this reader treats an unknown must-understand bit the same way (bit 1 is not defined)
    expect_error(resign(data[:16] + struct.pack("<I", 3) + data[20:]), "newer onnx_mrvl")
    assert HEADER.size + 2 * SECTION.size == struct.unpack_from("<Q", data, HEADER.size + 8)[0]
