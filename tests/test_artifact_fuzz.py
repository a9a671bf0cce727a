"""Fuzzing load(): >= 10,000 seeded mutations of a valid model binary per run.

Every mutated file must either load or raise ArtifactError (never another exception, never the
loader's "unexpected error" safety net), within bounded time and memory. A file that loads must be
canonical: re-packing what was loaded reproduces it byte for byte, so an accepted mutation is one
that was a no-op or was re-signed into another valid program ("tampered with a valid digest").
The base binary is format 1.2 (zlib-compressed meta, an int8 input and a uint8 output with their
boundary quantization); some mutations target its zlib stream and its declared length, others
rebuild the file as format 1.0 (which cannot hold boundary quantization: rejected). The one freedom: a ZMET stream that
another zlib encoder wrote differently but that inflates to the same canonical JSON is accepted
("accepted-reencoded"), since zlib builds do not all encode alike.
"""
import functools
import hashlib
import json
import os
import struct
import time
import tracemalloc
import zlib
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from onnx_mrvl.artifact import FORMAT_MINOR, canonical_json, load, pack
from onnx_mrvl.errors import ArtifactError
from test_artifact import HEADER, SECTION, ZHEAD, assemble, make_program, parse, resign, zmet

SEED = int(os.environ.get("MRVL_FUZZ_SEED", "20261122"))
N_MUTATIONS = 10_000
TIME_BUDGET_S = 20.0
INTERESTING = [0, 1, 7, 8, 63, 64, 255, 2 ** 15, 2 ** 16 - 1, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1,
               2 ** 32, 2 ** 60, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 2, 2 ** 64 - 1]
WEIRD = [-1, 0, 1, 2, 5, 17, 99, 2 ** 31, 2 ** 63, 2 ** 64 + 5, -2 ** 70, 1.5, 1e300, -0.0, "",
         "x", "float16", "float32", "NHWC", "conv0.kernel", None, True, False, [], {}, [0],
         [1, 2, 3], [-1], {"a": 1}, [[1]], "\u00e9", [0, 2 ** 40, 2 ** 40], [2 ** 70]]


def _fields(n_sections):
    """(offset, struct format) of every integer field of the header and the section table."""
    out = [(8, "<H"), (10, "<H"), (12, "<I"), (16, "<I"), (20, "<I"), (24, "<Q")]
    for i in range(n_sections):
        base = HEADER.size + i * SECTION.size
        out += [(base + 4, "<I"), (base + 8, "<Q"), (base + 16, "<Q")]
    return out


def _meta_paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _meta_paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _meta_paths(v, prefix + (i,))


class Mutator:
    """Seeded mutations of one valid binary; each returns (bytes, resigned: bool)."""

    def __init__(self, blob, rng):
        self.blob = blob
        self.rng = rng
        _, table, self.meta, self.wght = parse(blob)
        self.table_end = HEADER.size + SECTION.size * len(table)
        self.fields = _fields(len(table))
        self.paths = list(_meta_paths(self.meta))[1:]
        self.zmet = next((off, n) for tag, _, off, n in table if tag == b"ZMET")
        self.minor = struct.unpack_from("<H", blob, 10)[0]   # 1.2: boundary quantization
        self.ops = [self.bit_flip, self.multi_bit_flip, self.overwrite, self.header_overwrite,
                    self.field_set, self.truncate, self.extend, self.splice, self.meta_bytes,
                    self.meta_edit, self.meta_edit, self.weight_entry_edit, self.zlib_stream,
                    self.zlib_length, self.as_1_0]

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def bit_flip(self):
        b = bytearray(self.blob)
        pos = int(self.rng.integers(len(b)))
        b[pos] ^= 1 << int(self.rng.integers(8))
        return bytes(b)

    def multi_bit_flip(self):
        b = bytearray(self.blob)
        for _ in range(int(self.rng.integers(2, 17))):
            b[int(self.rng.integers(len(b)))] ^= 1 << int(self.rng.integers(8))
        return bytes(b)

    def overwrite(self):
        b = bytearray(self.blob)
        k = int(self.rng.integers(1, 9))
        pos = int(self.rng.integers(len(b) - k))
        b[pos:pos + k] = self.rng.integers(0, 256, k, dtype=np.uint8).tobytes()
        return bytes(b)

    def header_overwrite(self):
        b = bytearray(self.blob)
        for _ in range(int(self.rng.integers(1, 4))):
            b[int(self.rng.integers(self.table_end))] = int(self.rng.integers(256))
        return bytes(b)

    def field_set(self):
        off, fmt = self.pick(self.fields)
        bits = struct.calcsize(fmt) * 8
        old = struct.unpack_from(fmt, self.blob, off)[0]
        choices = INTERESTING + [len(self.blob) + d for d in (-33, -32, -1, 0, 1)] + \
            [old + d for d in (-64, -8, -1, 1, 8, 64)]
        value = self.pick(choices) % (1 << bits)                # negative-looking wraps around
        b = bytearray(self.blob)
        struct.pack_into(fmt, b, off, value)
        return bytes(b)

    def truncate(self):
        return self.blob[:int(self.rng.integers(len(self.blob)))]

    def extend(self):
        k = int(self.rng.integers(1, 129))
        tail = bytes(k) if self.rng.random() < 0.5 else \
            self.rng.integers(0, 256, k, dtype=np.uint8).tobytes()
        return self.blob + tail

    def splice(self):
        a, b = sorted(int(x) for x in self.rng.integers(0, len(self.blob), 2))
        if self.rng.random() < 0.5:
            return self.blob[:a] + self.blob[b:]                 # cut a chunk out
        return self.blob[:b] + self.blob[a:b] + self.blob[b:]   # duplicate a chunk

    def meta_bytes(self):
        """Byte-level damage inside the META JSON, container rebuilt around it (valid digest)."""
        text = bytearray(canonical_json(self.meta))
        for _ in range(int(self.rng.integers(1, 4))):
            text[int(self.rng.integers(len(text)))] = self.pick(b'{}[]",:0123456789-.eEtfn \xff')
        return assemble(bytes(text), self.wght, minor=self.minor)

    def meta_edit(self):
        """Structural edit of the meta JSON (replace / delete / append), re-assembled and signed."""
        meta = json.loads(canonical_json(self.meta))
        path = self.pick(self.paths)
        parent = meta
        for key in path[:-1]:
            parent = parent[key]
        key, r = path[-1], self.rng.random()
        if r < 0.15:
            del parent[key]
        elif r < 0.25 and isinstance(parent[key], list):
            parent[key].append(self.pick(WEIRD))
        else:
            parent[key] = self.pick(WEIRD)
        return assemble(canonical_json(meta), self.wght, minor=self.minor)

    def weight_entry_edit(self):
        meta = json.loads(canonical_json(self.meta))
        entry = self.pick(meta["weights"])
        key = self.pick(["offset", "nbytes", "shape", "dtype"])
        if key in ("offset", "nbytes"):
            entry[key] = self.pick(INTERESTING + [entry[key] + d for d in (-64, -2, 2, 64)])
        elif key == "shape" and self.rng.random() < 0.3:       # numpy's size limits
            entry[key] = [0] + [self.pick([2 ** 31, 2 ** 40, 2 ** 62, 2 ** 64])] * 3
        elif key == "shape":
            entry[key] = [int(x) for x in self.rng.integers(0, 12, int(self.rng.integers(0, 5)))]
        else:
            entry[key] = self.pick(["float16", "float32", "int8", "float64"])
        return assemble(canonical_json(meta), self.wght, minor=self.minor)

    def zlib_stream(self):
        """Damage inside the ZMET zlib stream (bit flips, overwrites, cuts), file re-signed."""
        off, n = self.zmet
        sec = bytearray(self.blob[off:off + n])
        r = self.rng.random()
        if r < 0.6:
            for _ in range(int(self.rng.integers(1, 4))):
                pos = int(self.rng.integers(ZHEAD.size, len(sec)))
                sec[pos] ^= 1 << int(self.rng.integers(8))
        elif r < 0.8:
            pos = int(self.rng.integers(ZHEAD.size, len(sec)))
            sec[pos:pos + 4] = self.rng.integers(0, 256, 4, dtype=np.uint8).tobytes()
        elif r < 0.9:
            sec = sec[:int(self.rng.integers(len(sec)))]
        else:
            sec += self.rng.integers(0, 256, int(self.rng.integers(1, 16)), dtype=np.uint8).tobytes()
        return assemble(b"", self.wght, minor=self.minor, zmet_section=bytes(sec))

    def zlib_length(self):
        """The ZMET section's declared JSON length set to a boundary or huge value."""
        n = len(canonical_json(self.meta))
        declared = self.pick(INTERESTING + [n + d for d in (-1, 1, 64)]) % (1 << 64)
        return assemble(canonical_json(self.meta), self.wght, minor=self.minor,
                        zmet_section=zmet(canonical_json(self.meta), declared))

    def as_1_0(self):
        """A format 1.0 file (uncompressed META), sometimes with byte damage in the JSON."""
        text = bytearray(canonical_json(self.meta))
        if self.rng.random() < 0.5:
            text[int(self.rng.integers(len(text)))] = self.pick(b'{}[]",:0123456789')
        return assemble(bytes(text), self.wght, minor=0)

    def mutate(self):
        op = self.pick(self.ops)
        data = op()
        name = op.__name__
        signed = name in ("meta_bytes", "meta_edit", "weight_entry_edit", "zlib_stream",
                          "zlib_length", "as_1_0")
        if not signed and len(data) >= 32 and self.rng.random() < 0.5:
            data, signed, name = resign(data), True, name + "+resign"
        return name, data, signed


def check_one(data, base):
    """load(data) raises ArtifactError or returns a canonical Binary. Returns the outcome."""
    try:
        b = load(data, name="fuzz")
    except ArtifactError as exc:
        msg = str(exc)
        assert "unexpected error" not in msg, msg
        assert msg.startswith("model binary 'fuzz': "), msg
        return "rejected"
    flags = struct.unpack_from("<I", data, 16)[0]
    minor = min(b.version[1], FORMAT_MINOR) if flags & 1 else 0
    repacked = bytearray(pack(b.meta, b.weights, format_minor=minor))
    if b.version > (1, FORMAT_MINOR):       # a newer minor: only the minor/flags fields differ
        repacked[10:12], repacked[16:20] = data[10:12], data[16:20]
        repacked = resign(repacked)
    assert b.digest == hashlib.sha256(data).hexdigest()
    if bytes(repacked) != data and flags & 1:   # the same JSON, encoded by another zlib encoder
        fields, table, meta, wght = parse(data)
        assert canonical_json(meta) == canonical_json(b.meta)
        zoff, zlen = next((off, n) for tag, _, off, n in table if tag == b"ZMET")
        stream = data[zoff + ZHEAD.size:zoff + zlen]
        assert zlib.decompress(stream) == canonical_json(b.meta)
        assert assemble(canonical_json(meta), wght, minor=fields[2], flags=fields[4]) == \
            bytes(repacked), "an accepted binary must be canonical up to its zlib encoding"
        return "accepted-reencoded"
    assert bytes(repacked) == data, "an accepted binary must be canonical"
    return "same" if data == base else "accepted-changed"


def make_int8_io_program(seed=3):
    """make_program with an int8 input quantized on the host and a uint8 output dequantized after
    it (format 1.2 boundary quantization, docs/binary-format.md), so the mutations reach those fields."""
    from onnx_mrvl.artifact.io_quant import boundary_fields
    meta, weights = make_program(seed)
    for tid, dtype, scale, zp in ((0, "int8", 0.0172, -3), (5, "uint8", 0.25, 128)):
        t = meta["tensors"][tid]
        t.update(dtype=dtype, scale=scale, zero_point=zp, nbytes=int(np.prod(t["shape"])))
    meta["inputs"][0]["quantize"] = boundary_fields(meta["tensors"][0], "inputs")
    meta["outputs"][0]["dequantize"] = boundary_fields(meta["tensors"][5], "outputs")
    return meta, weights


@functools.lru_cache(maxsize=1)
def _base_blob():
    blob = pack(*make_int8_io_program(seed=3))
    assert load(blob).version == (1, 2)
    return blob


@pytest.fixture(scope="module")
def base_blob():
    return _base_blob()


def test_fuzz_load(base_blob, capsys):
    rng = np.random.default_rng(SEED)
    mut = Mutator(base_blob, rng)
    assert {"quantize", "dequantize"} <= {p[2] for p in mut.paths if len(p) > 2}   # 1.2 fields are mutated
    outcomes, per_op = Counter(), Counter()
    start = time.process_time()   # CPU time: the bound is the loader's work, not the machine's load
    for _ in range(N_MUTATIONS):
        name, data, signed = mut.mutate()
        outcome = check_one(data, base_blob)
        assert signed or outcome not in ("accepted-changed", "accepted-reencoded"), name
        outcomes[outcome] += 1
        per_op[(name, outcome)] += 1
    elapsed = time.process_time() - start
    with capsys.disabled():
        print(f"\nartifact fuzz: {N_MUTATIONS} mutations of a {len(base_blob)}-byte binary in "
              f"{elapsed:.2f} CPU s (seed {SEED}): {dict(outcomes)}")
        for op in sorted({k[0] for k in per_op}):
            print(f"  {op:26s} " + "  ".join(f"{o}={per_op[(op, o)]}" for o in
                                             ("rejected", "accepted-changed", "same",
                                              "accepted-reencoded")))
    assert sum(outcomes.values()) == N_MUTATIONS
    assert elapsed < TIME_BUDGET_S, elapsed
    # the structural checks behind the digest were reached: re-signed mutations got rejected
    for op in ("field_set+resign", "truncate+resign", "meta_edit", "weight_entry_edit",
               "meta_bytes", "header_overwrite+resign", "zlib_stream", "zlib_length", "as_1_0"):
        assert per_op[(op, "rejected")] > 50, (op, per_op)
    # some tampered files with a valid digest are still valid programs (and were accepted)
    assert outcomes["accepted-changed"] > 0


def test_fuzz_memory_is_bounded(base_blob):
    """tracemalloc peak per load <= 16 x (file size + meta JSON size) + 16 KiB.

    The meta JSON is held compressed (format 1.1): the loader's memory follows its inflated size
    (the base's 2.7 KB; mutations never inflate to more), and exception objects of tiny files
    take the 16 KiB.
    """
    rng = np.random.default_rng(SEED + 1)
    mut = Mutator(base_blob, rng)
    json_size = len(canonical_json(mut.meta))
    worst_ratio, worst_excess = 0.0, -1 << 60
    tracemalloc.start()
    try:
        for _ in range(300):
            _, data, _ = mut.mutate()
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            try:
                load(data)
            except ArtifactError:
                pass
            peak = tracemalloc.get_traced_memory()[1] - before
            worst_ratio = max(worst_ratio, peak / max(len(data) + json_size, 1))
            worst_excess = max(worst_excess, peak - 16 * (len(data) + json_size))
    finally:
        tracemalloc.stop()
    print(f"artifact fuzz: worst tracemalloc peak {worst_ratio:.1f} x (file + JSON size); "
          f"largest peak - 16 x that = {worst_excess} bytes")
    # a valid 3.8 KB file peaks at ~12 x its size: the parsed dict of its 2.7 KB meta JSON
    assert worst_excess < 16 * 1024, worst_excess


def test_large_file_is_not_copied():
    """A 16 MB binary loads with a peak far below its size: weights are views, hashing streams."""
    rng = np.random.default_rng(5)
    meta, weights = make_program()
    weights["big"] = rng.standard_normal(4 << 20).astype(np.float32)
    meta["weights"].append({"name": "big", "shape": [4 << 20], "dtype": "float32"})
    data = pack(meta, weights)
    tracemalloc.start()
    try:
        b = load(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.shares_memory(b.weights["big"], np.frombuffer(data, np.uint8))
    assert peak < 1 << 20, peak            # < 1 MiB for a 16 MiB file
    for claim in (2 ** 60, 2 ** 64 - 1):   # huge length claims are rejected before allocating
        bad = bytearray(data)
        struct.pack_into("<Q", bad, HEADER.size + SECTION.size + 16, claim)
        bad = resign(bad)
        tracemalloc.start()
        try:
            with pytest.raises(ArtifactError, match="truncated"):
                load(bad)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 1 << 20, peak


# ------------------------------------------------------------------------------------ hypothesis
@settings(deadline=None, max_examples=300, derandomize=True, database=None)
@given(st.binary(max_size=600))
def test_random_bytes_are_rejected(data):
    with pytest.raises(ArtifactError):
        load(b"MRVLBIN\0" + data)


@settings(deadline=None, max_examples=300, derandomize=True, database=None)
@given(edits=st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255)), min_size=1,
                      max_size=8),
       cut=st.integers(0, 10 ** 6), do_cut=st.booleans(), sign=st.booleans())
def test_hypothesis_mutations(edits, cut, do_cut, sign):
    base = _base_blob()
    data = bytearray(base)
    for pos, value in edits:
        data[pos % len(data)] = value
    if do_cut:
        data = data[:cut % len(data)]
    data = bytes(data)
    if sign and len(data) >= 32:
        data = resign(data)
    check_one(data, base)


weight_arrays = hnp.arrays(dtype=st.sampled_from([np.dtype("<f2"), np.dtype("<f4")]),
                           shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5),
                           elements=None)


@settings(deadline=None, max_examples=80, derandomize=True, database=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8), weight_arrays, max_size=6))
def test_hypothesis_round_trip(weights):
    """Any float16/float32 arrays (NaN payloads included) come back bit-identical."""
    meta, _ = make_program()
    del meta["weights"]                  # built from the mapping, in its order
    meta["layers"] = [dict(l, weights={}) for l in meta["layers"]]
    data = pack(meta, weights)
    b = load(data)
    assert pack(b.meta, b.weights) == data
    assert list(b.weights) == list(weights)
    for k, arr in weights.items():
        got = b.weights[k]
        assert got.dtype == arr.dtype and got.shape == arr.shape
        assert got.tobytes() == arr.tobytes()
