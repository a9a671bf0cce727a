"""Model binary container (onnx_mrvl/artifact): round trip, determinism, layout, load() checks.

The container is re-assembled here from docs/binary-format.md (``assemble``), independently of
the packer, so that tampered files with a *valid* digest reach the structural checks. Files are
format 1.1 (zlib-compressed ZMET meta) unless a test asks for 1.0 (uncompressed META).
"""
import hashlib
import json
import os
import struct
import zlib

import numpy as np
import pytest

from onnx_mrvl.artifact import Binary, canonical_json, load, pack, sha256_hex
from onnx_mrvl.errors import ArtifactError

HEADER = struct.Struct("<8sHHIIIQ")
SECTION = struct.Struct("<4sIQQ")
ZHEAD = struct.Struct("<Q")
# sha256 of pack(*make_program()) written by the format-1.0 writer (before 1.1 existed)
V10_SHA256 = "f86cc6ece3d15af31962816ecb6d576858b452640f0f4471894a0457bd873db7"


# ------------------------------------------------------------------------------------ helpers
def make_program(seed=0):
    """A realistic 5-layer program (docs/program.md): NCHW->NHWC, Conv2D+relu, GAP, Flatten, FC."""
    rng = np.random.default_rng(seed)
    weights = {
        "conv0.kernel": rng.standard_normal((8, 3, 3, 3)).astype(np.float16),
        "conv0.bias": rng.standard_normal(8).astype(np.float32),
        "conv0.scale": rng.uniform(0.5, 2, 8).astype(np.float32),
        "conv0.shift": rng.standard_normal(8).astype(np.float32),
        "fc.kernel": rng.standard_normal((10, 8)).astype(np.float16),
        "fc.bias": rng.standard_normal(10).astype(np.float32),
    }
    shapes = [[1, 3, 8, 8], [1, 8, 8, 3], [1, 8, 8, 8], [1, 1, 1, 8], [1, 8], [1, 10]]
    layouts = ["NCHW", "NHWC", "NHWC", "NHWC", "NC", "NC"]
    tensors = [{"id": i, "name": f"t{i}", "shape": s, "layout": lay,
                "nbytes": int(np.prod(s)) * 2, "placement": "ocm" if i else "dram"}
               for i, (s, lay) in enumerate(zip(shapes, layouts))]

    def layer(i, kind, params, weights_, origin, macs=0):
        return {"index": i, "name": f"tvmgen_mrvl_main_{i}", "layer_name": kind,
                "inputs": [i], "outputs": [i + 1], "params": params, "weights": weights_,
                "origin": origin, "macs": macs, "dram_bytes": 0}

    meta = {
        "format": "onnx_mrvl.program", "program_version": 1, "name": "mrvl_region_0",
        "batch_size": 1, "quantize": "float16",
        "arch": {"num_tiles": 4, "ocm_size": 1048576, "macs_per_cycle_per_tile": 1024,
                 "clock_hz": 1e9, "dram_bytes_per_cycle": 32.0, "layer_overhead_cycles": 200},
        "inputs": [{"name": "input", "tensor": 0, "shape": [1, 3, 8, 8], "layout": "NCHW"}],
        "outputs": [{"name": "logits", "tensor": 5, "shape": [1, 10], "layout": "NC"}],
        "tensors": tensors,
        "weights": [{"name": k, "shape": list(v.shape), "dtype": v.dtype.name,
                     "layout": "OHWI" if v.ndim == 4 else ("OI" if v.ndim == 2 else "C")}
                    for k, v in weights.items()],
        "layers": [
            layer(0, "layout_transform", {"src_layout": "NCHW", "dst_layout": "NHWC"}, {}, ["in"]),
            layer(1, "Conv2D", {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1],
                                "groups": 1, "kernel_size": [3, 3], "channels": 8,
                                "activation": "relu", "activation_params": {}},
                  {"kernel": "conv0.kernel", "bias": "conv0.bias", "scale": "conv0.scale",
                   "shift": "conv0.shift"}, ["Conv_0", "BatchNormalization_1", "Relu_2"],
                  macs=8 * 8 * 8 * 27),
            layer(2, "GlobalAvgpool2D", {}, {}, ["GlobalAveragePool_3"]),
            layer(3, "Flatten", {"shape": [1, 8]}, {}, ["Flatten_4"]),
            layer(4, "FC", {"activation": "none"}, {"kernel": "fc.kernel", "bias": "fc.bias"},
                  ["Gemm_5"], macs=80),
        ],
        "memory_plan": {"ocm_bytes_per_tile": 4096, "resident": [1, 2, 3, 4, 5], "streamed": [0]},
    }
    return meta, weights


def parse(data):
    """Split container bytes into (header fields, table entries, meta dict, weight section)."""
    fields = HEADER.unpack_from(data, 0)
    table = [SECTION.unpack_from(data, fields[3] + i * SECTION.size) for i in range(fields[5])]
    sec = {tag: bytes(data[off:off + n]) for tag, _, off, n in table}
    text = zlib.decompress(sec[b"ZMET"][ZHEAD.size:]) if b"ZMET" in sec else sec[b"META"]
    return fields, table, json.loads(text), sec[b"WGHT"]


def zmet(meta_bytes, declared=None):
    """A ZMET section: u64 declared length + zlib stream (level 9, as the packer writes)."""
    n = len(meta_bytes) if declared is None else declared
    return ZHEAD.pack(n) + zlib.compress(meta_bytes, 9)


def align(v, a):
    return (v + a - 1) // a * a


def assemble(meta_bytes, wght, *, major=1, minor=1, flags=None, extra=(), header_ext=b"",
             compress=None, zmet_section=None):
    """Build a container per docs/binary-format.md; ``extra`` = [(tag, bytes)] after WGHT.

    ``compress`` (default: minor >= 1) stores the meta as a ZMET section (``zmet_section``: its
    exact bytes) and sets flag bit 0; otherwise an uncompressed META section, flags 0.
    """
    compress = minor >= 1 if compress is None else compress
    if flags is None:
        flags = 1 if compress else 0
    head_sec = (b"ZMET", zmet_section if zmet_section is not None else zmet(meta_bytes), 8) \
        if compress else (b"META", meta_bytes, 8)
    sections = [head_sec, (b"WGHT", wght, 64)] + [(t, b, 8) for t, b in extra]
    hsize = HEADER.size + len(header_ext)
    pos = hsize + SECTION.size * len(sections)
    table, body = b"", b""
    start = pos
    for tag, blob, a in sections:
        off = align(pos, a)
        body += bytes(off - pos) + blob
        table += SECTION.pack(tag, 0, off, len(blob))
        pos = off + len(blob)
    body += bytes(align(pos, 8) - pos)
    size = start + len(body) + 32
    head = HEADER.pack(b"MRVLBIN\0", major, minor, hsize, flags, len(sections), size)
    out = head + header_ext + table + body
    return out + hashlib.sha256(out).digest()


def resign(data):
    """Recompute the trailing digest: the file is tampered with but its digest is valid."""
    data = bytes(data)
    return data[:-32] + hashlib.sha256(data[:-32]).digest()


def with_meta(data, edit):
    """Rebuild ``data`` after ``edit(meta)`` (a valid, re-signed container around the new meta)."""
    _, _, meta, wght = parse(data)
    edit(meta)
    return assemble(canonical_json(meta), wght)


def put(data, offset, fmt, value):
    buf = bytearray(data)
    struct.pack_into(fmt, buf, offset, value)
    return bytes(buf)


def expect_error(data, *words, **kw):
    with pytest.raises(ArtifactError) as info:
        load(data, **kw)
    msg = str(info.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    return msg


@pytest.fixture(scope="module")
def program():
    return make_program()


@pytest.fixture(scope="module")
def blob(program):
    return pack(*program)


# ------------------------------------------------------------------------------------ round trip
def test_round_trip(program, blob):
    meta, weights = program
    b = load(blob)
    assert isinstance(b, Binary)
    assert b.size == len(blob) and b.version == (1, 1) and b.name == "mrvl_region_0"
    for key in meta:
        if key != "weights":
            assert b.meta[key] == meta[key], key
    for given, stored in zip(meta["weights"], b.meta["weights"]):
        assert {k: stored[k] for k in given} == given
        assert stored["offset"] % 64 == 0 and stored["nbytes"] == weights[given["name"]].nbytes
    assert list(b.weights) == list(weights)
    for name, arr in weights.items():
        got = b.weights[name]
        assert got.dtype == arr.dtype and got.shape == arr.shape
        assert got.tobytes() == arr.tobytes()            # bit-identical
        assert not got.flags.writeable
        with pytest.raises(ValueError):
            got[...] = 0
    assert "mrvl_region_0" in repr(b) and b.digest[:16] in repr(b)


def test_weights_are_views_not_copies(blob):
    b = load(blob)
    for arr in b.weights.values():
        assert not arr.flags.owndata
        assert np.shares_memory(arr, np.frombuffer(blob, np.uint8))


def test_pack_does_not_modify_meta(program):
    meta, weights = program
    before = json.dumps(meta, sort_keys=True)
    pack(meta, weights)
    assert json.dumps(meta, sort_keys=True) == before
    assert "offset" not in meta["weights"][0]


def test_deterministic_and_canonical(program, blob):
    meta, weights = program
    assert pack(meta, weights) == blob
    shuffled_meta = dict(reversed(list(meta.items())))
    shuffled_weights = dict(reversed(list(weights.items())))   # order comes from meta["weights"]
    assert pack(shuffled_meta, shuffled_weights) == blob
    b = load(blob)
    assert pack(b.meta, b.weights) == blob                     # re-packing a loaded binary


def test_weights_list_built_from_mapping_order():
    meta, weights = make_program()
    del meta["weights"]
    b = load(pack(meta, weights))
    assert [w["name"] for w in b.meta["weights"]] == list(weights)
    assert [w["offset"] for w in b.meta["weights"]] == [0, 448, 512, 576, 640, 832]


def test_digest(blob):
    b = load(blob)
    assert b.digest == hashlib.sha256(blob).hexdigest() == sha256_hex(blob)
    assert blob[-32:] == hashlib.sha256(blob[:-32]).digest()


def test_layout_matches_the_documentation(program, blob):
    (magic, major, minor, hsize, flags, count, size), table, meta, wght = parse(blob)
    assert (magic, major, minor, hsize, flags, count, size) == (b"MRVLBIN\0", 1, 1, 32, 1, 2,
                                                                len(blob))
    (t0, r0, off0, n0), (t1, r1, off1, n1) = table
    assert (t0, r0, off0, t1, r1) == (b"ZMET", 0, 80, b"WGHT", 0)
    assert blob[off0:off0 + n0] == zmet(canonical_json(meta))
    assert ZHEAD.unpack_from(blob, off0)[0] == len(canonical_json(meta))
    assert zlib.decompress(blob[off0 + 8:off0 + n0]) == canonical_json(meta)
    assert off1 % 64 == 0 and off1 - (off0 + n0) < 64
    assert len(blob) == align(off1 + n1, 8) + 32
    assert assemble(canonical_json(meta), wght) == blob        # the doc describes the packer
    for entry in meta["weights"]:
        arr = program[1][entry["name"]]
        assert wght[entry["offset"]:entry["offset"] + entry["nbytes"]] == arr.tobytes()


def test_size_overhead_is_small():
    """A ResNet-50-sized program (60 layers, 160 weights): container overhead well under 64 KiB."""
    rng = np.random.default_rng(1)
    meta, _ = make_program()
    weights = {f"w{i}": rng.standard_normal(int(rng.integers(16, 4096))).astype(np.float16)
               for i in range(160)}
    meta["weights"] = [{"name": k, "shape": list(v.shape), "dtype": "float16", "layout": "C"}
                       for k, v in weights.items()]
    base = meta["layers"][1]
    meta["layers"] = [dict(base, index=i, name=f"tvmgen_mrvl_main_{i}", inputs=[1], outputs=[2],
                           weights={"kernel": f"w{2 * i}", "bias": f"w{2 * i + 1}"})
                      for i in range(60)]
    data = pack(meta, weights)
    payload = sum(v.nbytes for v in weights.values())
    assert len(data) - payload < 64 * 160 + 40 * 1024, len(data) - payload


def test_numpy_scalars_in_meta_are_stored_as_numbers():
    meta, weights = make_program()
    meta["batch_size"] = np.int64(1)
    meta["arch"]["clock_hz"] = np.float32(1e9)
    meta["inputs"][0]["shape"] = np.array([1, 3, 8, 8])
    b = load(pack(meta, weights))
    assert b.meta["inputs"][0]["shape"] == [1, 3, 8, 8]
    assert b.meta["batch_size"] == 1 and type(b.meta["batch_size"]) is int
    assert b.meta["arch"]["clock_hz"] == 1e9


# ------------------------------------------------------------------------------------ sources
def test_load_from_path_bytearray_memoryview(tmp_path, blob):
    p = tmp_path / "mrvl_region_0.bin"
    p.write_bytes(blob)
    for src in (p, str(p), bytearray(blob), memoryview(blob)):
        b = load(src)
        assert b.digest == sha256_hex(blob)
        assert all(not a.flags.writeable for a in b.weights.values())


def test_missing_file_and_directory(tmp_path):
    missing = tmp_path / "nope.bin"
    expect_error(missing, "not found", str(missing))
    expect_error(str(tmp_path), "directory")
    fifo = tmp_path / "fifo.bin"
    os.mkfifo(fifo)                                            # would block if it were opened
    expect_error(fifo, "not a regular file")
    expect_error("/dev/zero", "not a regular file")            # would never end if it were read
    expect_error(12345, "cannot load from a int")


def test_max_size(tmp_path, blob):
    expect_error(blob, "max_size", max_size=len(blob) - 1)
    p = tmp_path / "x.bin"
    p.write_bytes(blob)
    expect_error(p, f"{len(blob)} bytes, more than max_size", max_size=100)
    assert load(p, max_size=len(blob)).size == len(blob)


def test_name_in_messages(blob):
    msg = expect_error(blob[:1000], "model binary 'mrvl_region_0'", "truncated",
                       name="mrvl_region_0")
    assert msg.startswith("model binary 'mrvl_region_0': truncated")


# ------------------------------------------------------------------------------------ header
def test_bad_magic(blob):
    expect_error(b"PK\x03\x04" + blob[4:], "bad magic", "not an onnx_mrvl model binary")
    expect_error(b"", "empty")


def test_future_major_version(blob):
    future = put(blob, 8, "<H", 2)
    expect_error(future, "format version 2.1", "newer onnx_mrvl", "upgrade")
    expect_error(resign(future), "newer onnx_mrvl", "upgrade")
    expect_error(resign(put(blob, 8, "<H", 0)), "format version 0.1 is not supported")


def test_future_minor_version_with_unknown_section_is_accepted(program, blob):
    _, _, meta, wght = parse(blob)
    newer = assemble(canonical_json(meta), wght, minor=3, extra=[(b"XTRA", b"future data")])
    b = load(newer)
    assert b.version == (1, 3) and b.meta == meta
    newer_plain = assemble(canonical_json(meta), wght, minor=3, compress=False,
                           extra=[(b"XTRA", b"future data")])
    assert load(newer_plain).meta == meta                      # flag bit 0 clear: a META section
    for minor in (0, 1):
        same = assemble(canonical_json(meta), wght, minor=minor, extra=[(b"XTRA", b"future")])
        expect_error(same, "unknown section tag b'XTRA'")
    ext = assemble(canonical_json(meta), wght, minor=3, header_ext=bytes(8))   # 1.2 is known: 1.3 is newer
    assert load(ext).version == (1, 3)
    expect_error(assemble(canonical_json(meta), wght, header_ext=bytes(8)), "header_size 40")
    expect_error(assemble(canonical_json(meta), wght, minor=0, header_ext=bytes(8)),
                 "header_size 40")


def test_flags(program, blob):
    _, _, meta, wght = parse(blob)
    expect_error(assemble(canonical_json(meta), wght, minor=1, flags=3), "flags 0x00000003",
                 "newer onnx_mrvl")
    expect_error(assemble(canonical_json(meta), wght, minor=0, flags=2), "flags 0x00000002",
                 "newer onnx_mrvl")
    newer = assemble(canonical_json(meta), wght, minor=3, flags=1 | 1 << 16)
    assert load(newer).version == (1, 3)
    expect_error(assemble(canonical_json(meta), wght, flags=1 | 1 << 16), "expected 0")
    expect_error(assemble(canonical_json(meta), wght, minor=0, flags=1 << 16), "expected 0")


@pytest.mark.parametrize("cut", [1, 31, 32, 100, -1, -32, -33])
def test_truncated(blob, cut):
    data = blob[:cut]
    expect_error(data, "truncated")


def test_trailing_data(blob):
    expect_error(blob + b"\0" * 8, "unexpected bytes after the end")


def test_file_size_field_lies(blob):
    expect_error(resign(put(blob, 24, "<Q", 2 ** 60)), "truncated", str(2 ** 60))


# ------------------------------------------------------------------------------------ digest
def test_flipped_bytes_fail_the_digest(blob):
    _, table, _, _ = parse(blob)
    meta_at, wght_at = table[0][2] + 5, table[1][2] + 3
    for pos in (meta_at, wght_at, len(blob) - 1, len(blob) - 32):
        bad = bytearray(blob)
        bad[pos] ^= 0x10
        expect_error(bytes(bad), "digest mismatch", "corrupted or was modified")


# ------------------------------------------------------------------------------------ sections
def test_section_offset_out_of_range(blob):
    off = HEADER.size + SECTION.size + 8                       # WGHT entry's offset field
    expect_error(resign(put(blob, off, "<Q", 2 ** 60)), "truncated", "section 1 'weights'",
                 "claims", f"at offset {2 ** 60}")
    expect_error(resign(put(blob, off + 8, "<Q", 2 ** 64 - 1)), "truncated", "weights")


def test_section_count_out_of_range(blob):
    expect_error(resign(put(blob, 20, "<I", 0)), "section count 0")
    expect_error(resign(put(blob, 20, "<I", 2 ** 32 - 1)), "section count 4294967295")
    expect_error(resign(put(blob, 20, "<I", 65)), "section count 65 is out of range")
    expect_error(resign(put(blob, 20, "<I", 64)), "section 0 'compressed meta'",
                 "overlaps the header and section table (which end at byte 1568)")
    small = assemble(b"{}", b"")
    expect_error(resign(put(small, 20, "<I", 60)), "truncated", "section table (60 entries)")


def test_overlapping_sections(blob):
    _, table, _, _ = parse(blob)
    meta_len = table[0][3]
    bad = resign(put(blob, HEADER.size + 16, "<Q", meta_len + 64))   # META grows into WGHT
    expect_error(bad, "overlaps", "meta")


def test_misaligned_and_reordered_sections(blob):
    _, table, _, _ = parse(blob)
    wght_off_field = HEADER.size + SECTION.size + 8
    moved = put(put(blob, wght_off_field, "<Q", table[1][2] + 8), wght_off_field + 8, "<Q",
                table[1][3] - 8)
    expect_error(resign(moved), "section 1 'weights': offset", "is not 64-byte aligned")
    swapped = bytearray(blob)
    t = HEADER.size
    swapped[t:t + 48] = blob[t + 24:t + 48] + blob[t:t + 24]
    expect_error(resign(swapped), "must be listed before the weights section")


def test_reserved_and_duplicate_sections(blob):
    expect_error(resign(put(blob, HEADER.size + 4, "<I", 7)), "reserved field is 7")
    dup = put(blob, HEADER.size + SECTION.size, "<4s", b"ZMET")
    expect_error(resign(dup), "duplicate section tag")
    missing = put(blob, HEADER.size + SECTION.size, "<4s", b"XTRA")
    expect_error(resign(put(missing, 10, "<H", 3)), "missing required section b'WGHT'")


def test_nonzero_padding(blob):
    _, table, _, _ = parse(blob)
    gap = table[0][2] + table[0][3]
    assert table[1][2] > gap                                   # there is padding to poke
    bad = bytearray(blob)
    bad[gap] = 1
    expect_error(resign(bad), "padding before section 1 'weights' is not zero")


# ------------------------------------------------------------------------------------ meta
def test_meta_not_json(blob):
    _, _, meta, wght = parse(blob)
    expect_error(assemble(b"{not json", wght), "meta is not valid JSON")
    expect_error(assemble(b"\xff\xfe", wght), "not valid UTF-8")
    expect_error(assemble(b"[1, 2]", wght), "meta must be a JSON object")
    expect_error(assemble(b"[" * 100000 + b"]" * 100000, wght), "nested too deeply")
    expect_error(assemble(b'{"a":1e999999}', wght), "number 1e999999 is out of range")
    expect_error(assemble(b'{"a":' + b"1" * 5000 + b"}", wght), "meta is not valid JSON")
    expect_error(assemble(b'{"a":1,"a":2}', wght), "duplicate key 'a'")
    expect_error(assemble(b'{"a":NaN}', wght), "NaN is not allowed")


def test_meta_not_canonical(blob):
    _, _, meta, wght = parse(blob)
    expect_error(assemble(json.dumps(meta).encode(), wght), "not in canonical form")


@pytest.mark.parametrize("edit, words", [
    (lambda m: m.pop("layers"), ["missing required key 'layers'"]),
    (lambda m: m.update(format="other"), ["meta.format", "'other'"]),
    (lambda m: m.update(program_version=8), ["program_version 8", "newer", "upgrade"]),
    # a version-1 reader would run the layer without its per-row state output: the program says 2
    (lambda m: m["layers"][0].setdefault("params", {}).update(final_state_rows=1),
     ["program_version 1", "final_state_rows", "defined by program_version 2"]),
    # a version-2 reader would sum a layer norm's mean in its own order: the program says 3
    (lambda m: (m.update(program_version=2), m["layers"][0].setdefault("params", {}).update(mean_sum="strided")),
     ["program_version 2", "mean_sum", "defined by program_version 3"]),
    (lambda m: (m.update(program_version=2), m["layers"][0].setdefault("params", {}).update(outq_dtype="int8")),
     ["program_version 2", "outq_dtype", "defined by program_version 3"]),
    # a version-3 reader would skip an int8 mean's factor / row order, per-channel epilogue values, the
    # InstanceNorm order, a broadcast operand, a Softmax's mask: the program says 4
    (lambda m: (m.update(program_version=3), m["layers"][0].setdefault("params", {}).update(out_mul=1.5)),
     ["program_version 3", "out_mul", "defined by program_version 4"]),
    (lambda m: (m.update(program_version=3), m["layers"][0].setdefault("params", {}).update(post_sizes=[4])),
     ["program_version 3", "post_sizes", "defined by program_version 4"]),
    (lambda m: (m.update(program_version=3), m["layers"][0].setdefault("params", {}).update(broadcast=1)),
     ["program_version 3", "broadcast", "defined by program_version 4"]),
    (lambda m: (m.update(program_version=3), m["layers"][0].setdefault("params", {}).update(ort_kernel="instance_norm")),
     ["program_version 3", "ort_kernel", "defined by program_version 4"]),
    (lambda m: (m.update(program_version=3), m["layers"][0].setdefault("params", {}).update(mean_sum="rows")),
     ["program_version 3", "mean_sum", "defined by program_version 4"]),
    # a version-4 reader knows four interior points of a layer norm, not eight: the program says 5
    (lambda m: (m.update(program_version=4), m["layers"][0].setdefault("params", {}).update(inner_scales=[1.0] * 8)),
     ["program_version 4", "inner_scales", "defined by program_version 5"]),
    (lambda m: (m.update(program_version=4), m["layers"][0].setdefault("params", {}).update(int8_sums="u8s8")),
     ["program_version 4", "int8_sums", "defined by program_version 5"]),
    # a version-5 reader would compute an fp32 chain's layer in fp16: the program says 6
    (lambda m: (m.update(program_version=5), m["layers"][0].setdefault("params", {}).update(precision="fp32")),
     ["program_version 5", "precision", "defined by program_version 6"]),
    # a version-6 reader would skip a layer norm's mean factors (Quark's mean correction): the program says 7
    (lambda m: (m.update(program_version=6), m["layers"][0].setdefault("params", {}).update(mean_muls=[0.99609375] * 2)),
     ["program_version 6", "mean_muls", "defined by program_version 7"]),
    (lambda m: m.update(name=7), ["meta.name", "expected the region name", "integer 7"]),
    (lambda m: m["tensors"][2].update(nbytes=5), ["meta.tensors[2].nbytes: 5", "expected 1024"]),
    (lambda m: m["tensors"][2].update(shape=[1, -8, 8, 8]), ["meta.tensors[2].shape[1]", "-8"]),
    (lambda m: m["tensors"][3].update(id=2), ["duplicate tensor id 2"]),
    (lambda m: m["weights"][1].update(nbytes=64), ["'conv0.bias'", "nbytes: 64", "expected 32"]),
    (lambda m: m["weights"][1].update(offset=2 ** 40),
     ["'conv0.bias'", "claims 32 bytes at offset 1099511627776"]),
    (lambda m: m["weights"][1].update(offset=452), ["offset: 452 is not 64-byte aligned"]),
    (lambda m: m["weights"][1].update(offset=512), ["offset: 512, expected 448"]),
    (lambda m: m["weights"][0].update(dtype="int8"), ["dtype", "'int8'"]),
    (lambda m: m["weights"][0].update(shape=[0, 2 ** 40, 2 ** 40]), ["shape", "too large"]),
    (lambda m: m["weights"][0].update(shape=[8, 3, 3, 4]), ["nbytes: 432", "expected 576"]),
    (lambda m: m["weights"].pop(), ["weight section has", "end at byte"]),
    (lambda m: m["layers"][1]["inputs"].__setitem__(0, 17),
     ["meta.layers[1] ('tvmgen_mrvl_main_1').inputs[0]", "tensor id 17 does not exist"]),
    (lambda m: m["layers"][4]["outputs"].__setitem__(0, "5"), ["outputs[0]", "string '5'"]),
    (lambda m: m["layers"][4]["weights"].update(kernel="fc.nope"),
     ["weights.kernel", "'fc.nope' does not exist"]),
    (lambda m: m["outputs"][0].update(tensor=99), ["meta.outputs[0].tensor", "99 does not exist"]),
    (lambda m: m["inputs"][0].pop("name"), ["meta.inputs[0]", "missing required key 'name'"]),
    (lambda m: m["layers"][0].update(params=[]), ["params", "expected an object"]),
    (lambda m: m.update(batch_size=True), ["meta.batch_size"]),
    (lambda m: m["tensors"][0].update(placement="l2"), ["placement", "'l2'"]),
])
def test_meta_validation(blob, edit, words):
    bad = with_meta(blob, edit)                                # valid digest, invalid content
    expect_error(bad, *words)


def test_valid_edit_is_accepted(blob):
    """with_meta itself produces loadable files: the failures above are the edits, not the tool."""
    b = load(with_meta(blob, lambda m: m.update(name="renamed")))
    assert b.name == "renamed"


# ------------------------------------------------------------------------------------ pack errors
@pytest.mark.parametrize("change, words", [
    (lambda m, w: w.update({"fc.bias": w["fc.bias"].astype(np.int8)}), ["dtype int8"]),
    (lambda m, w: w.update({"fc.bias": w["fc.bias"].astype(">f4")}), ["big-endian"]),
    (lambda m, w: w.update({"fc.bias": [1.0] * 10}), ["is a list"]),
    (lambda m, w: w.pop("fc.bias"), ["'fc.bias' but no array was given"]),
    (lambda m, w: w.update(extra=np.zeros(3, np.float16)), ["['extra'] are not listed"]),
    (lambda m, w: w.update({"fc.bias": np.zeros(11, np.float32)}), ["shape [10]", "shape [11]"]),
    (lambda m, w: m.update(arch=object()), ["not JSON-serialisable"]),
    (lambda m, w: m.update(clock=float("nan")), ["not JSON-serialisable"]),
    (lambda m, w: m["layers"][2].update(inputs=[42]), ["tensor id 42 does not exist"]),
    (lambda m, w: m["weights"].append(dict(m["weights"][0])), ["duplicate weight name"]),
])
def test_pack_rejects(change, words):
    meta, weights = make_program()
    change(meta, weights)
    with pytest.raises(ArtifactError) as info:
        pack(meta, weights)
    assert str(info.value).startswith("cannot pack program 'mrvl_region_0'")
    for w in words:
        assert w in str(info.value)


def test_zero_size_and_scalar_weights():
    meta, weights = make_program()
    del meta["weights"]
    weights["empty"] = np.zeros((0, 4), np.float16)
    weights["one"] = np.float16(3.5)
    weights["strided"] = np.arange(20, dtype=np.float32)[::2]
    b = load(pack(meta, weights))
    assert b.weights["empty"].shape == (0, 4)
    assert b.weights["one"].shape == () and b.weights["one"] == np.float16(3.5)
    assert b.weights["strided"].tolist() == list(range(0, 20, 2))


def test_written_file_loads(tmp_path, program):
    path = tmp_path / "r.bin"
    data = pack(*program)
    with open(path, "wb") as f:
        f.write(data)
    assert os.path.getsize(path) == len(data)
    assert load(path, name="r").digest == sha256_hex(data)


def test_safety_net_turns_a_bug_into_artifact_error(blob, monkeypatch):
    """If a check were missing and something else broke, load() still raises ArtifactError."""
    from onnx_mrvl.artifact import reader

    def broken(*args):
        raise KeyError("boom")
    monkeypatch.setattr(reader, "validate_meta", broken)
    expect_error(blob, "unexpected error while validating (KeyError: 'boom')", "report")
