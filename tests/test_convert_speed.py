"""The speed work of issue #20 changes no output: the streaming JSON writer gives json.dumps's bytes,
region models are the bytes helper.make_model gave, the cached topological order follows every edit,
and convert / save leave the garbage collector as they found it."""
import gc
import io
import json
import os
import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_mrvl import json_stream
from onnx_mrvl.gcpause import gc_paused
from onnx_mrvl.json_stream import dump_json


def _random_doc(rng: random.Random, depth: int = 0):
    leaves = ["a", "", "é\"x\\\n\t", "x" * 1500, "ü" * 1100, 0, -7, 2 ** 70, True, False, None, 1.5, 0.1,
              -0.0, 1e300, float("nan"), float("inf"), float("-inf"), ("t", 1)]
    r = rng.random()
    if depth > 4 or r < 0.35:
        return rng.choice(leaves)
    if r < 0.65:
        return [_random_doc(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ["k", "é", 1, 2.5, True, False, None, 'q"', "z", -3]
    return {rng.choice(keys): _random_doc(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def _dumped(obj) -> bytes:
    sink = io.BytesIO()
    dump_json(obj, sink)
    return sink.getvalue()


def test_json_writer_matches_json_dumps_on_random_documents():
    rng = random.Random(0)
    for _ in range(1500):
        doc = _random_doc(rng)
        assert _dumped(doc) == (json.dumps(doc, indent=1) + "\n").encode(), doc


@pytest.mark.parametrize("tail", ['"', "\\", "\u00e9", "\x01", "~"])
def test_json_writer_long_string_with_an_escape_in_a_later_slice(monkeypatch, tail):
    monkeypatch.setattr(json_stream, "STRING_CHUNK", 1 << 17)   # several slices without a huge string
    s = "A" * (3 << 17) + tail + "B" * 100
    doc = {"w": [s, {"d": s[:70000]}], "n": 1}
    assert _dumped(doc) == (json.dumps(doc, indent=1) + "\n").encode()


def test_json_writer_refuses_what_json_refuses():
    for bad in ({"a": object()}, {(1, 2): 3}, [np.float32(1.0)]):
        with pytest.raises(TypeError):
            json.dumps(bad)
        with pytest.raises(TypeError):
            _dumped(bad)


def test_gc_paused_restores_the_collector():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError):
        with gc_paused():
            raise ValueError
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def _conv_model():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], [w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_convert_and_save_leave_the_collector_enabled(tmp_path):
    import onnx_mrvl
    result = onnx_mrvl.convert(_conv_model())
    assert gc.isenabled()
    result.save(str(tmp_path / "out"))
    assert gc.isenabled()


def test_region_model_is_what_make_model_built():
    """split.deploy.region_model fills the ModelProto in place; the bytes are those of the
    helper.make_graph + helper.make_model construction it replaced."""
    import onnx_mrvl
    from onnx_mrvl.graph_index import GraphIndex
    from onnx_mrvl.split import deploy
    fused = onnx_mrvl.convert(_conv_model()).stages["fuse"]
    g = GraphIndex(fused)
    nodes = [n for n in fused.graph.node if n.domain == "mrvl"]
    produced = {o for n in nodes for o in n.output}
    ins = sorted({i for n in nodes for i in n.input if i and i not in produced and i not in g.initializers})
    outs = [o.name for o in fused.graph.output]
    got = deploy.region_model(fused, g, nodes, ins, outs, "r")
    used = {i for n in nodes for i in n.input}
    vi = lambda t: helper.make_tensor_value_info(t, g.elem_type(t) or TensorProto.FLOAT, g.shape(t))  # noqa: E731
    vis = [vi(t) for t in sorted(produced - set(outs)) if g.shape(t) is not None]
    graph = helper.make_graph([onnx.NodeProto.FromString(n.SerializeToString()) for n in nodes], "r",
                              [vi(t) for t in ins], [vi(t) for t in outs],
                              [t for t in fused.graph.initializer if t.name in used], value_info=vis)
    live = {(n.op_type, n.overload) for n in nodes}
    funcs = [f for f in fused.functions if f.domain == "mrvl" and (f.name, f.overload) in live]
    want = helper.make_model(graph, opset_imports=list(fused.opset_import), functions=funcs, producer_name="onnx_mrvl")
    want.ir_version = max(fused.ir_version, 10)
    assert got.SerializeToString() == want.SerializeToString()


def test_legalize_topological_order_follows_edits():
    from onnx_mrvl.legalize.graph import Graph
    m = _conv_model()
    g = Graph(m)
    first = g.toposort()
    assert [n.name for n in first] == ["conv", "relu"]
    assert g.toposort() == first and g.toposort() is not first      # cached, handed out as a copy
    relu = next(n for n in first if n.op_type == "Relu")
    g.make("Sigmoid", ["y"], ["z"], near=relu, origin=["relu"], name="sig")
    assert [n.name for n in g.toposort()] == ["conv", "relu", "sig"]
    g.remove(relu)
    assert [n.name for n in g.toposort()] == ["conv", "sig"]
    sig = g.toposort()[1]
    g.set_input(sig, 0, "c")
    assert [n.name for n in g.toposort()] == ["conv", "sig"]


def test_subgraph_sha256_is_the_binarys_digest():
    """The Subgraph node's sha256 comes from the hash pack computes anyway (not a second pass over
    the binary): it is the binary's sha256, embedded or not."""
    import hashlib

    import onnx_mrvl
    from onnx_mrvl.split.deploy import is_subgraph, subgraph_attrs
    from onnx_mrvl.testing.models import resnet18_like
    for embed in (False, True):
        r = onnx_mrvl.convert(resnet18_like(seed=0, input_size=32), embed=embed, partition="single")
        by_name = {sg.name: sg for sg in r.subgraphs}
        nodes = [n for n in r.model.graph.node if is_subgraph(n)]
        assert nodes and len(nodes) == len(by_name)
        for n in nodes:
            assert subgraph_attrs(n)["sha256"] == hashlib.sha256(by_name[n.name].binary).hexdigest()


@pytest.mark.parametrize("build", ["conv", "yolov5_like"])
def test_split_consume_gives_the_same_models(build):
    """split(consume=True) makes its heaviest region out of the fused model itself (no weight copied):
    the deployable model and every region model are the bytes split gives without it."""
    import onnx_mrvl
    from onnx_mrvl.split import split
    from onnx_mrvl.testing.arch_detect_classify import yolov5_like
    model = _conv_model() if build == "conv" else yolov5_like()
    fused = onnx_mrvl.convert(model).stages["fuse"]
    kept = split(fused, partition="max")
    taken_from = onnx.ModelProto.FromString(fused.SerializeToString())
    taken = split(taken_from, partition="max", consume=True)
    assert taken.model.SerializeToString() == kept.model.SerializeToString()
    assert [r.name for r in taken.regions] == [r.name for r in kept.regions]
    assert any(r.model is taken_from for r in taken.regions)
    for a, b in zip(taken.regions, kept.regions):
        assert a.model.SerializeToString() == b.model.SerializeToString()


def _legal_big_fc():
    from onnx_mrvl.legalize import legalize
    from onnx_mrvl.testing.big_weights import big_fc_model
    return legalize(big_fc_model(fc_width=512)).model


def test_fuse_consume_gives_the_same_model_and_the_arrays_written():
    """fuse(consume=True) turns the given model into the fused one (kept FC kernels renamed in place,
    sorted into materialize's order): the same bytes as fuse() writes into a new model; ``arrays``
    holds, read-only, exactly what numpy_helper.to_array reads back from each initializer."""
    from onnx_mrvl.fuse import fuse
    legal = _legal_big_fc()
    kept = fuse(legal, keep_weights=False)
    given = onnx.ModelProto.FromString(legal.SerializeToString())
    taken = fuse(given, keep_weights=False, consume=True)
    assert kept.arrays is None and taken.model is given
    assert taken.model.SerializeToString() == kept.model.SerializeToString()
    names = [t.name for t in taken.model.graph.initializer]
    assert taken.arrays and set(taken.arrays) <= set(names)
    assert any(n.endswith("_kernel_oi") for n in taken.arrays)
    for t in taken.model.graph.initializer:
        if t.name in taken.arrays:
            arr, ref = taken.arrays[t.name], numpy_helper.to_array(t)
            assert arr.dtype == ref.dtype and arr.shape == ref.shape and arr.tobytes() == ref.tobytes()
            assert not arr.flags.writeable


def test_fuse_consume_copies_when_most_weights_are_rewritten():
    """A conv model (its kernels rewritten OHWI: little kept as it is) is copied, not taken: the
    replaced weights would stay in the taken model's memory."""
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.legalize import legalize
    from onnx_mrvl.testing.models import resnet18_like
    legal = legalize(resnet18_like()).model
    given = onnx.ModelProto.FromString(legal.SerializeToString())
    taken = fuse(given, keep_weights=False, consume=True)
    assert taken.arrays is None and taken.model is not given
    assert taken.model.SerializeToString() == fuse(legal, keep_weights=False).model.SerializeToString()


def test_emit_from_lent_arrays_gives_the_same_json():
    """The regions of a taken fused model, lent fuse's arrays (compile_regions.lend_arrays: a
    weightless model when all are lent), emit the JSON pair of the regions split copies."""
    from onnx_mrvl.compile_regions import lend_arrays
    from onnx_mrvl.emit import emit
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.split import split
    legal = _legal_big_fc()
    plain = split(fuse(legal, keep_weights=False).model)
    taken = fuse(onnx.ModelProto.FromString(legal.SerializeToString()), keep_weights=False, consume=True)
    lent = split(taken.model, consume=True)
    lend_arrays(lent.regions, taken.arrays)
    assert any(r.arrays and not any(t.HasField("raw_data") for t in r.model.graph.initializer) for r in lent.regions)
    for a, b in zip(lent.regions, plain.regions):
        got, want = emit(a.model, a.name, arrays=a.arrays), emit(b.model, b.name)
        assert json.dumps(got.nodes_json) == json.dumps(want.nodes_json)
        assert json.dumps(got.consts_json) == json.dumps(want.consts_json)


def test_convert_of_a_file_takes_the_models_and_saves_the_same_files(tmp_path, monkeypatch):
    """A model file (convert may give its private copies up: legalize, fuse and split take them)
    saves the region files a ModelProto (nothing taken) saves."""
    import hashlib
    import onnx_mrvl
    from onnx_mrvl.fuse import in_place
    from onnx_mrvl.testing.big_weights import big_fc_model
    calls = []
    real = in_place.write_in_place
    monkeypatch.setattr(in_place, "write_in_place", lambda *a: calls.append(real(*a)) or calls[-1])
    model = big_fc_model(fc_width=512)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    digests = []
    for src, out in ((path, "a"), (model, "b")):
        onnx_mrvl.convert(src).save(str(tmp_path / out))
        digests.append({f: hashlib.sha256((tmp_path / out / f).read_bytes()).hexdigest()
                        for f in sorted(os.listdir(tmp_path / out)) if f.endswith((".bin", ".json"))
                        and f not in ("report.json", "manifest.json")})
    assert calls and calls[0] is not None   # the file's fused model was taken
    assert digests[0] == digests[1] and any(f.endswith(".bin") for f in digests[0])
