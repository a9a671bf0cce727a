"""Hostile and broken inputs: every one ends in a clear error of the MrvlError family (or, for bad
weights, in a model that keeps the node on the CPU with a reason and still computes the right thing)."""
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.errors import ArtifactError, ModelError, MrvlError, ShapeError
from onnx_mrvl.testing.models import tiny_cnn


def conv_relu(w=None, opset=13, ir=8, batch_dim=1):
    """x[1,3,8,8] -> Conv 3x3 pad 1 (weights ``w``) -> Relu -> y."""
    if w is None:
        w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    x = helper.make_tensor_value_info("x", T.FLOAT, [batch_dim, 3, 8, 8])
    y = helper.make_tensor_value_info("y", T.FLOAT, [batch_dim, 4, 8, 8])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "g", [x], [y], [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    return m


def ort_run(model_or_path, feed):
    src = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) else model_or_path
    return ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, feed)


def x_feed(seed=0):
    return {"x": np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)}


# ----------------------------------------------------------------------------- unreadable files

def test_not_an_onnx_file(tmp_path):
    p = tmp_path / "model.onnx"
    p.write_text("this is a text file, not a protobuf\n" * 20)
    with pytest.raises(ModelError, match="not an ONNX model"):
        onnx_mrvl.convert(str(p))


def test_truncated_protobuf(tmp_path):
    data = tiny_cnn().SerializeToString()
    p = tmp_path / "model.onnx"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match="not an ONNX model|complete .onnx"):
        onnx_mrvl.convert(str(p))


def test_missing_file(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        onnx_mrvl.convert(str(tmp_path / "nope.onnx"))


def test_empty_file(tmp_path):
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    with pytest.raises(ModelError):
        onnx_mrvl.convert(str(p))


# ------------------------------------------------------------------------------- invalid graphs

def test_graph_failing_the_checker():
    m = conv_relu()
    m.graph.node[0].input[0] = "undefined_tensor"
    with pytest.raises(ModelError, match="checker") as e:
        onnx_mrvl.convert(m)
    assert "undefined_tensor" in str(e.value)


def test_graph_output_without_a_shape_is_accepted(tmp_path):
    """onnx.checker refuses a tensor type without a shape; onnxruntime runs such a model and
    legalize infers the shape, so convert takes it (and the result matches)."""
    m = conv_relu()
    del m.graph.output[0].type.tensor_type.shape.dim[:]
    m.graph.output[0].type.tensor_type.ClearField("shape")
    with pytest.raises(onnx.checker.ValidationError, match="shape"):
        onnx.checker.check_model(m)
    res = onnx_mrvl.convert(m)
    assert len(res.subgraphs) == 1
    x = x_feed()
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, x)[0]
    ref = ort_run(m, x)[0]
    assert got.shape == ref.shape and np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()


def test_cycle():
    m = conv_relu()
    m.graph.node[0].input[0] = "y"          # conv reads relu's output, relu reads conv's
    with pytest.raises(ModelError) as e:
        onnx_mrvl.convert(m)
    assert "topologically sorted" in str(e.value) or "cycle" in str(e.value)


def test_duplicate_tensor_names():
    m = conv_relu()
    m.graph.node[1].output[0] = "c"
    m.graph.output[0].name = "c"
    with pytest.raises(ModelError, match="produced by two nodes") as e:
        onnx_mrvl.convert(m)
    assert e.value.node == "relu" and "'conv'" in str(e.value)


@pytest.mark.parametrize("opset,match", [(onnx.defs.onnx_opset_version() + 1, "newer than the installed onnx")])
def test_opset_out_of_range(opset, match):
    with pytest.raises(ModelError, match=match):
        onnx_mrvl.convert(conv_relu(opset=opset))


@pytest.mark.parametrize("opset", [5, 6])
def test_opset_below_7_is_converted(opset):
    """Opsets 1-6 used to be refused; legalize converts them (tests/test_legalize_old_opsets.py)."""
    m = conv_relu(opset=opset, ir=3)
    m.graph.input.append(helper.make_tensor_value_info("w", T.FLOAT, [4, 3, 3, 3]))  # IR 3 lists them
    r = onnx_mrvl.convert(m)
    assert r.report.offload_fraction == 1.0


def test_opset_7_is_accepted():
    m = conv_relu(opset=7, ir=3)
    m.graph.input.append(helper.make_tensor_value_info("w", T.FLOAT, [4, 3, 3, 3]))  # IR 3 lists them
    r = onnx_mrvl.convert(m)
    assert r.report.offload_fraction == 1.0


def test_symbolic_shapes_need_input_shapes():
    m = conv_relu(batch_dim="N")
    with pytest.raises(ShapeError, match="non-static dimension") as e:
        onnx_mrvl.convert(m)
    assert "input_shapes" in str(e.value) and e.value.node == "x"
    r = onnx_mrvl.convert(m, input_shapes={"x": [1, 3, 8, 8]})
    assert r.report.offload_fraction == 1.0


def test_symbolic_shape_hint_keeps_static_dims():
    """Regression: the hint used to propose 1 for every dim, static ones included ([1,1,1,1])."""
    with pytest.raises(ShapeError) as e:
        onnx_mrvl.convert(conv_relu(batch_dim="N"))
    assert "[1,3,8,8]" in str(e.value).replace(" ", "")


# ---------------------------------------------------------------------------------- bad weights

@pytest.mark.parametrize("bad,reason", [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "inf"),
                                        (1e6, "fp16"), (70000.0, "fp16")])
def test_unrepresentable_weights_stay_on_cpu(bad, reason, tmp_path):
    w = np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32)
    w[1, 2, 0, 1] = bad
    m = conv_relu(w)
    r = onnx_mrvl.convert(m)
    assert r.subgraphs == [] and r.report.offload_fraction == 0.0
    d = r.report["conv"]
    assert d.placement == "cpu" and reason in d.reason, d.reason
    path = r.save(str(tmp_path))
    got = onnx_mrvl.InferenceSession(path).run(None, x_feed())[0]
    want = ort_run(m, x_feed())[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)   # computed on the CPU in fp32, not overflowed


def test_large_but_fp16_safe_weights_are_offloaded(tmp_path):
    w = np.random.default_rng(2).standard_normal((4, 3, 3, 3)).astype(np.float32)
    w[0, 0, 0, 0] = 60000.0                  # inside the fp16 range
    r = onnx_mrvl.convert(conv_relu(w))
    assert r.report["conv"].placement == "accelerator"


# -------------------------------------------------------------------------------- external data

def _save_external(model, folder, location="weights.bin"):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    copy = onnx.ModelProto()
    copy.CopyFrom(model)                     # save_model(save_as_external_data=True) mutates its argument
    onnx.save_model(copy, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)
    return path


def test_external_data_beside_the_model(tmp_path):
    m = tiny_cnn()
    path = _save_external(m, str(tmp_path / "in"))
    assert os.path.getsize(tmp_path / "in" / "weights.bin") > 1000
    r = onnx_mrvl.convert(path)
    assert r.report.offload_fraction == 1.0
    out = r.save(str(tmp_path / "out"))
    feed = {"input": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    got = onnx_mrvl.InferenceSession(out).run(None, feed)[0]
    np.testing.assert_allclose(got, ort_run(m, feed)[0], rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("location", ["../../etc/passwd", "/etc/passwd", "../outside.bin"])
def test_external_data_escaping_the_folder_is_refused(tmp_path, location):
    path = _save_external(tiny_cnn(), str(tmp_path / "in"))
    proto = onnx.load(path, load_external_data=False)
    for t in proto.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
    (tmp_path / "outside.bin").write_bytes(b"\0" * 4096)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())
    with pytest.raises(ModelError, match="outside the model's folder"):
        onnx_mrvl.convert(path)


def test_external_data_file_missing(tmp_path):
    path = _save_external(tiny_cnn(), str(tmp_path / "in"))
    os.unlink(tmp_path / "in" / "weights.bin")
    with pytest.raises(ModelError, match="missing"):
        onnx_mrvl.convert(path)


# --------------------------------------------------------------------------------------- saving

@pytest.mark.parametrize("below", ["", "out", "out/deeper"])
def test_output_folder_is_or_is_below_a_file(tmp_path, below):
    """Regression: save() used to let os.makedirs raise a raw FileExistsError / NotADirectoryError."""
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    r = onnx_mrvl.convert(tiny_cnn())
    with pytest.raises(ArtifactError):
        r.save(os.path.join(str(blocker), below) if below else str(blocker))


def test_output_folder_not_writable_even_for_root(tmp_path, monkeypatch):
    """Root ignores permission bits; a folder whose temp files cannot be created is simulated by
    making mkstemp fail as it does on a read-only mount (EROFS)."""
    import errno
    import tempfile

    def refuse(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")
    r = onnx_mrvl.convert(tiny_cnn())
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(ArtifactError, match="Read-only file system") as e:
        r.save(str(tmp_path / "out"))
    assert "writable" in str(e.value)
    assert os.listdir(tmp_path) == []        # no file of the failed save, and no empty folder


@pytest.mark.parametrize("fail_at", [1, 2, 3, 4, "manifest"])
def test_save_is_atomic(tmp_path, monkeypatch, fail_at):
    """A failure while writing the n-th artifact (or the manifest, the last file) leaves no partial
    file and no temp file anywhere: the folder is built beside the target and swapped in whole (one
    conversion per folder), so a new target stays absent (it used to keep the n-1 files written
    before, then was left empty)."""
    import onnx_mrvl.artifact.folder as folder
    import onnx_mrvl.modelio as modelio
    r = onnx_mrvl.convert(tiny_cnn())
    created = []
    real_create, real_replace = folder._create, os.replace

    def failing_create(path):
        created.append(path)
        if len(created) == fail_at:
            raise OSError(28, "No space left on device")
        return real_create(path)

    def failing_replace(src, dst):
        if fail_at == "manifest" and os.path.basename(dst) == "manifest.json":
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)
    monkeypatch.setattr(folder, "_create", failing_create)
    monkeypatch.setattr(modelio.os, "replace", failing_replace)
    out = tmp_path / "out"
    with pytest.raises((OSError, MrvlError)):
        r.save(str(out))
    assert fail_at == "manifest" or len(created) == fail_at   # the failure did happen where intended
    assert os.listdir(tmp_path) == []            # no staging folder beside it, no empty target (it was made
    #                                              before the work and left behind)


def test_save_then_resave_replaces_cleanly(tmp_path):
    r = onnx_mrvl.convert(tiny_cnn())
    p1 = r.save(str(tmp_path))
    first = open(p1, "rb").read()
    p2 = r.save(str(tmp_path), overwrite=True)    # a non-empty folder needs overwrite=True
    assert p1 == p2 and open(p2, "rb").read() == first
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]
