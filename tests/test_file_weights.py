"""Large float weights of a model file held apart from protobuf (onnx_mrvl/file_weights.py, issue #20):
``convert`` of a path reads them once into ``bytes`` of their own and every stage reads views of
those; the artifacts are byte for byte those of the whole parse (``convert`` of the ModelProto),
and anything the walk does not follow, or a damaged file, takes the old path or fails as before."""
import os
import tracemalloc

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl import file_weights, modelio
from onnx_mrvl.errors import ModelError
from onnx_mrvl.graph_index import GraphIndex
from onnx_mrvl.testing.models import resnet18_like

BIG = 1 << 16


@pytest.fixture
def small_files(monkeypatch):
    monkeypatch.setattr(file_weights, "MIN_FILE", 0)   # files of any size take the held path


def _mixed_model(seed: int = 0, table: bool = False) -> onnx.ModelProto:
    """Conv (a 147 KB kernel) -> Relu -> Flatten -> MatMul (a 256 KB kernel) -> Add, with a big int64
    table, a big float given as float_data and small constants beside them; ``table``: and a Gather
    of rows of a 256 KB float table (a second output)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32) * 0.05
    fc = rng.standard_normal((64 * 4 * 4, 64)).astype(np.float32) * 0.05
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(fc, "fc"),
             numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b"),
             numpy_helper.from_array(np.arange(20000, dtype=np.int64), "ids"),
             helper.make_tensor("fd", TensorProto.FLOAT, [20000], rng.standard_normal(20000).astype(np.float32)),
             numpy_helper.from_array(np.array([1, -1], dtype=np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], "conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], "relu"),
             helper.make_node("Reshape", ["r", "shape"], ["f"], "flat"),
             helper.make_node("MatMul", ["f", "fc"], ["m"], "fc_mm"),
             helper.make_node("Add", ["m", "b"], ["y"], "bias")]
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], inits)
    if table:
        graph.initializer.append(numpy_helper.from_array(rng.standard_normal((4096, 16)).astype(np.float32), "table"))
        graph.node.append(helper.make_node("Gather", ["table", "rows"], ["e"], "gather"))
        graph.input.append(helper.make_tensor_value_info("rows", TensorProto.INT64, [3]))
        graph.output.append(helper.make_tensor_value_info("e", TensorProto.FLOAT, [3, 16]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _save(model, tmp_path, name="m.onnx") -> str:
    path = str(tmp_path / name)
    onnx.save(model, path)
    return path


def _refused(path: str, match: str) -> None:
    """convert(path) raises our ModelError (``match``) and leaves nothing held."""
    with pytest.raises(ModelError, match=match):
        onnx_mrvl.convert(path)
    assert not file_weights._held


def _held_names(model) -> list:
    return [t.name for t in model.graph.initializer if file_weights.is_held(t)]


def test_plain_large_floats_are_held_and_read_back_as_the_file_has_them(tmp_path, small_files):
    path = _save(_mixed_model(), tmp_path)
    whole = onnx.load(path)
    proto, sizes = modelio.read_model(path, hold=True)
    try:
        assert _held_names(proto) == ["w", "fc"]   # not: small, int64, float_data
        assert sizes == [len(t.raw_data) if t.HasField("raw_data") else -1 for t in whole.graph.initializer]
        for t, u in zip(proto.graph.initializer, whole.graph.initializer):
            assert np.array_equal(file_weights.array(t), numpy_helper.to_array(u))
        file_weights.restore(proto)
        assert proto.SerializeToString() == whole.SerializeToString()
    finally:
        file_weights.release(file_weights.keys(proto) | set(file_weights._held))
    assert modelio.read_model(path)[0].SerializeToString() == whole.SerializeToString()   # hold=False


def test_held_arrays_are_views_of_one_payload_not_copies(tmp_path, small_files):
    path = _save(_mixed_model(), tmp_path)
    proto, _ = modelio.read_model(path, hold=True)
    keys = file_weights.keys(proto)
    try:
        g = GraphIndex(proto)
        tracemalloc.start()
        try:
            fc = g.const("fc")
            w = g.const("w")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < BIG // 8   # numpy_helper.to_array copied 400 KB here
        payloads = list(file_weights._held[next(iter(keys))].values())
        owner = {id(p) for p in payloads}
        for a in (fc, w):
            base = a
            while isinstance(base, np.ndarray):
                base = base.base
            assert id(base) in owner   # the held payload itself (bytes: immutable)
            assert isinstance(base, bytes) and not a.flags.writeable and a.flags.aligned
    finally:
        file_weights.release(keys)
    with pytest.raises(ModelError, match="released"):
        file_weights.array(proto.graph.initializer[0])


def test_onnx_itself_cannot_read_a_held_tensor(tmp_path, small_files):
    proto, _ = modelio.read_model(_save(_mixed_model(), tmp_path), hold=True)
    try:
        with pytest.raises((ValueError, OSError, onnx.checker.ValidationError)):
            numpy_helper.to_array(proto.graph.initializer[0])
        t = proto.graph.initializer[0]
        t.raw_data = b"\0" * len(t.raw_data + b"x" * 16)   # written over, its mark left: not read as held
        assert not file_weights.is_held(t)
        with pytest.raises((ValueError, OSError, onnx.checker.ValidationError)):
            file_weights.array(t)
        with pytest.raises(ModelError, match="written over"):
            file_weights.restore(proto)
    finally:
        file_weights.release(file_weights.keys(proto))


def _ort_saved_encoder() -> onnx.ModelProto:
    """A 6-layer BERT encoder (D 128: 64 KB kernels) as onnxruntime saves it after its fusions (contrib
    SkipLayerNormalization, FusedMatMul, Gelu: ONNX infers none of their shapes, legalize's onnxruntime
    shape probe measures them; a probe given held tensors fails and the last layers stay on the CPU)."""
    from onnx_mrvl.testing import arch_speech, contrib_blocks
    return contrib_blocks.ort_saved(arch_speech.bert_encoder(ln="op", D=128, H=4, layers=6))


@pytest.mark.parametrize("model", [lambda: _mixed_model(table=True),
                                   lambda: resnet18_like(input_size=32, num_classes=10), _ort_saved_encoder])
def test_convert_of_a_path_saves_what_the_whole_parse_saves(tmp_path, small_files, model):
    """Structure (the held path ran, and nothing stays held after convert) and numbers (every saved
    file byte for byte that of the same convert with the file parsed whole: the same regions, CPU
    nodes and offload)."""
    path = _save(model(), tmp_path)
    seen = []
    real = file_weights.hold
    file_weights.hold = lambda model_, pending: (seen.append(len(pending)), real(model_, pending))[1]
    try:
        held = onnx_mrvl.convert(path)
    finally:
        file_weights.hold = real
    assert seen and seen[0] >= 2 and not file_weights._held
    file_weights.MIN_FILE = 1 << 62   # (restored by the fixture)
    whole = onnx_mrvl.convert(path)
    assert len(seen) == 1
    held.save(str(tmp_path / "a"))
    whole.save(str(tmp_path / "b"))
    files = sorted(os.listdir(tmp_path / "a"))
    assert files == sorted(os.listdir(tmp_path / "b")) and "model.onnx" in files
    for name in files:
        a, b = (tmp_path / "a" / name).read_bytes(), (tmp_path / "b" / name).read_bytes()
        if name in ("report.json", "manifest.json"):   # they record the output folder and times
            a, b = (_strip_folder(x, tmp_path) for x in (a, b))
        assert a == b, name
    assert held.model.SerializeToString() == whole.model.SerializeToString()


def _strip_folder(text: bytes, tmp_path) -> bytes:
    return text.replace(str(tmp_path / "a").encode(), b"OUT").replace(str(tmp_path / "b").encode(), b"OUT")


def test_a_big_weight_kept_on_the_cpu_is_written_whole(tmp_path, small_files):
    """A held weight the CPU reads as it is (a Gather's table) is in the deployable model as the file
    has it, and the saved model runs in onnxruntime as the original does."""
    m = _mixed_model(table=True)
    path = _save(m, tmp_path)
    result = onnx_mrvl.convert(path)
    assert any(n.op_type.startswith("Subgraph") for n in result.model.graph.node)
    table = next(t for t in result.model.graph.initializer if t.name == "table")
    assert not file_weights.is_held(table)
    assert table.SerializeToString() == m.graph.initializer[-1].SerializeToString()
    result.save(str(tmp_path / "out"))
    saved = onnx.load(str(tmp_path / "out" / "model.onnx"))
    assert not any(t.data_location == TensorProto.EXTERNAL for t in saved.graph.initializer)
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 64, 4, 4)).astype(np.float32),
             "rows": np.array([4095, 0, 17], np.int64)}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx")).run(None, feeds)
    np.testing.assert_array_equal(got[1], want[1])   # the CPU's Gather: exact
    np.testing.assert_allclose(got[0], want[0], rtol=2e-2, atol=2e-2)   # the fp16 region


def test_legalize_replaced_weights_are_freed_before_fuse(tmp_path, small_files, monkeypatch):
    """BatchNormalization folded into each Conv makes new kernels: the held ones it replaced are
    dropped once legalize is done, not kept to the end of convert."""
    path = _save(resnet18_like(input_size=32, num_classes=10), tmp_path)
    from onnx_mrvl import pipeline
    counts = []
    real = pipeline.fuse

    def fuse(*a, **k):
        counts.append(sum(len(p) for p in file_weights._held.values()))
        return real(*a, **k)
    monkeypatch.setattr(pipeline, "fuse", fuse)
    proto, _ = modelio.read_model(path, hold=True)
    before = len(_held_names(proto))
    file_weights.release(file_weights.keys(proto))
    pipeline.convert(path)
    assert before > 10 and counts and counts[0] < before // 4


def test_a_model_with_bodies_is_parsed_whole(tmp_path, small_files):
    m = _mixed_model()
    then = helper.make_graph([helper.make_node("Identity", ["y"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 64])])
    m.graph.node.append(helper.make_node("If", ["cond"], ["z"], "if", then_branch=then, else_branch=then))
    m.graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    m.graph.output[0].name = "z"
    path = _save(m, tmp_path)
    proto, _ = modelio.read_model(path, hold=True)
    assert not _held_names(proto) and not file_weights._held
    assert proto.SerializeToString() == onnx.load(path).SerializeToString()


def test_what_the_walk_does_not_follow_is_parsed_whole(tmp_path, small_files):
    m = _mixed_model()
    extra = numpy_helper.from_array(np.ones(BIG, np.float32), "doc")
    extra.doc_string = "a field beside the plain ones"
    m.graph.initializer.append(extra)
    path = _save(m, tmp_path)
    proto, _ = modelio.read_model(path, hold=True)
    try:
        assert _held_names(proto) == ["w", "fc"]   # the tensor with a doc_string is not held
    finally:
        file_weights.release(file_weights.keys(proto))
    more = onnx.GraphProto()
    more.initializer.append(numpy_helper.from_array(np.ones(BIG, np.float32), "fc2"))
    g2 = more.SerializeToString()
    path2 = str(tmp_path / "m2.onnx")
    with open(path2, "wb") as f:   # a second graph field (protobuf merges them): not followed
        f.write(m.SerializeToString() + b"\x3a" + file_weights._encode_varint(len(g2)) + g2)
    proto2, _ = modelio.read_model(path2, hold=True)
    whole = onnx.ModelProto()
    whole.ParseFromString(open(path2, "rb").read())
    assert not _held_names(proto2) and proto2.SerializeToString() == whole.SerializeToString()
    assert len(proto2.graph.initializer) == len(m.graph.initializer) + 1


@pytest.mark.parametrize("cut", [0.3, 0.5, 0.9, 0.999])
def test_a_truncated_file_is_not_a_model(tmp_path, small_files, monkeypatch, cut):
    monkeypatch.setattr(modelio, "MMAP_MIN", 0)
    data = _mixed_model().SerializeToString()
    path = str(tmp_path / "m.onnx")
    with open(path, "wb") as f:
        f.write(data[: int(len(data) * cut)])
    _refused(path, "not an ONNX model")


def test_a_payload_length_past_its_tensor_is_not_a_model(tmp_path, small_files):
    """A raw_data whose length runs past the end of its tensor: the walk stops, protobuf refuses it."""
    m = _mixed_model()
    fc = next(t for t in m.graph.initializer if t.name == "fc")
    payload = fc.raw_data
    fc.ClearField("raw_data")
    enc = file_weights._encode_varint
    tensor = fc.SerializeToString() + b"\x4a" + enc(len(payload) + 8) + payload
    data = m.SerializeToString()
    gstart = data.index(m.graph.SerializeToString())
    graph = m.graph.SerializeToString() + b"\x2a" + enc(len(tensor)) + tensor
    path = str(tmp_path / "m.onnx")
    with open(path, "wb") as f:
        f.write(data[:gstart - 1 - len(enc(m.graph.ByteSize()))] + b"\x3a" + enc(len(graph)) + graph
                + data[gstart + m.graph.ByteSize():])
    _refused(path, "not an ONNX model")


def test_a_file_changed_while_read_is_refused_on_the_held_path(tmp_path, small_files, monkeypatch):
    path = _save(_mixed_model(), tmp_path)
    real = file_weights.parse

    def touched(buf, read=None):
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        return real(buf, read)
    monkeypatch.setattr(file_weights, "parse", touched)
    _refused(path, "changed while it was read")


def test_a_file_that_shrinks_while_its_weights_are_read_is_not_a_model(tmp_path, small_files, monkeypatch):
    path = _save(_mixed_model(), tmp_path)
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, offset: real(fd, n // 2, offset))   # a short read
    _refused(path, "not an ONNX model")



# the calls that hand a ModelProto (or a copy of one) to onnxruntime, onnx or a file: in onnx_mrvl/
# each takes file_weights.inline(...) or is replaced by file_weights.serialized(...), but for these,
# which serialize no model (a TypeProto, an attribute, a FunctionProto, a graph or tensor digest)
_HANDOFF = {"SerializeToString", "SerializePartialToString", "ReferenceEvaluator", "check_model", "infer_shapes",
            "onnx.save", "onnx.save_model", "save_model", "convert_model_to_external_data",
            "write_external_data_tensors"}
_NO_MODEL = {("legalize/prepare.py", "tp.SerializeToString"), ("inspection/canonical.py", "t.SerializeToString"),
             ("inspection/canonical.py", "a.SerializeToString"), ("inspection/canonical.py", "g.SerializeToString"),
             ("inspection/diff.py", "f.SerializeToString")}


def _hand_offs(source: str):
    """(callee, line) of each call in ``source`` that hands on a model not through file_weights.inline."""
    import ast
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        callee = ast.unparse(node.func)
        if not (callee in _HANDOFF or callee.rsplit(".", 1)[-1] in _HANDOFF - {"onnx.save"}):
            continue
        first = node.args[0] if node.args else None
        if not (isinstance(first, ast.Call) and ast.unparse(first.func) == "file_weights.inline"):
            yield callee, node.lineno


def test_every_hand_off_of_a_model_passes_the_serialization_boundary():
    """Structure: a model leaves onnx_mrvl's code (onnxruntime, onnx.reference / checker / shape
    inference, a file) only through ``file_weights.inline`` / ``serialized``, which write the held
    payloads back (a held tensor elsewhere: onnxruntime refuses the model, a shape probe fails and
    the conversion changes: minilm-l6_ortopt lost its last encoder layer). The test helpers
    (onnx_mrvl/testing, legalize/testing.py) build their own models and are not scanned."""
    root = os.path.dirname(onnx_mrvl.__file__)
    found = []
    for folder, _, files in os.walk(root):
        rel_folder = os.path.relpath(folder, root).replace(os.sep, "/")
        if rel_folder.split("/")[0] == "testing":
            continue
        for f in files:
            rel = f if rel_folder == "." else f"{rel_folder}/{f}"
            if not f.endswith(".py") or rel in ("file_weights.py", "legalize/testing.py"):
                continue
            with open(os.path.join(folder, f), encoding="utf-8") as src:
                found += [f"{rel}:{line}: {callee}" for callee, line in _hand_offs(src.read())
                          if (rel, callee) not in _NO_MODEL]
    assert not found, "a model handed on without file_weights.inline / serialized:\n" + "\n".join(found)


def test_the_boundary_scan_finds_a_bypass():
    """The scan itself: a bare serialization, check or save is found; the boundary's forms are not."""
    bad = "sess = ort.InferenceSession(probe.SerializeToString())\nonnx.checker.check_model(m)\nonnx.save(m, p)\n"
    assert sorted(c for c, _ in _hand_offs(bad)) == ["onnx.checker.check_model", "onnx.save", "probe.SerializeToString"]
    good = ("sess = ort.InferenceSession(file_weights.serialized(probe))\n"
            "onnx.checker.check_model(file_weights.inline(m))\nonnx.save(file_weights.inline(m), p)\n")
    assert list(_hand_offs(good)) == []
