"""The end-to-end foundation on the RFC's Fashion-MNIST CNN: convert -> JSON + binary -> run."""
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.errors import ArtifactError, MrvlError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "fashion_mnist.onnx")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    result = onnx_mrvl.convert(EXAMPLE)
    out = tmp_path_factory.mktemp("fm")
    result.save(str(out))
    return result, str(out)


def _inputs(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.random((1, 1, 28, 28), dtype=np.float32) for _ in range(n)]


def test_example_is_the_rfc_model():
    m = onnx.load(EXAMPLE)
    assert [n.op_type for n in m.graph.node] == [
        "Conv", "Relu", "MaxPool", "Conv", "Relu", "MaxPool", "Dropout", "Transpose", "Flatten",
        "MatMul", "Add", "Relu", "MatMul", "Add"]


def test_one_subgraph_no_cpu_compute(converted):
    result, _ = converted
    nodes = result.model.graph.node
    assert len(nodes) == 1 and nodes[0].op_type.startswith("Subgraph_") and nodes[0].domain == "mrvl"
    assert [i.name for i in result.model.graph.input] == ["input"]
    assert [o.name for o in result.model.graph.output] == ["output"]
    onnx.checker.check_model(result.model)
    assert not result.report.cpu_nodes()


def test_nodes_json_holds_the_rfc_eight_layers(converted):
    result, _ = converted
    (sg,) = result.subgraphs
    layers = [n for n in sg.nodes_json["nodes"] if n["op"] != "input"]
    assert [layer["attrs"]["layer_name"][0] for layer in layers] == [
        "layout_transform", "Conv2D", "Maxpool2D", "Conv2D", "Maxpool2D", "nn.batch_flatten", "FC", "FC"]
    assert [layer["attrs"].get("activation_type", ["-"])[0] for layer in layers] == [
        "-", "relu", "-", "relu", "-", "-", "relu", "none"]
    origins = [layer["attrs"]["origin_nodes"][0] for layer in layers]
    assert origins[1] == ["conv1", "relu1"] and origins[6] == ["dense1_matmul", "dense1_add", "relu3"]
    assert all(origins), "every layer names its original nodes"
    for name in ("batch_size", "num_subgraph_inputs", "num_subgraph_outputs"):
        assert name in sg.nodes_json
    for const in sg.consts_json.values():
        assert set(const) == {"shape", "dtype", "min", "max", "data_base64"}


def test_report_covers_every_original_node(converted):
    result, _ = converted
    names = [n.name for n in onnx.load(EXAMPLE).graph.node]
    assert sorted(d.node for d in result.report) == sorted(names)
    assert result.report["dropout"].placement == "removed"
    assert result.report["conv1"].subgraph == "mrvl_region_0"
    assert result.report["conv1"].layer == "tvmgen_mrvl_main_1"


def test_saved_artifacts(converted):
    _, out = converted
    assert sorted(os.listdir(out)) == sorted([
        "model.onnx", "mrvl_region_0-nodes.json", "mrvl_region_0-consts.json", "mrvl_region_0.bin", "report.json", "manifest.json"])
    with open(os.path.join(out, "mrvl_region_0-nodes.json")) as f:
        assert json.load(f)["num_subgraph_inputs"] == 1


def test_accelerator_path_matches_onnxruntime_on_100_inputs(converted):
    _, out = converted
    sess = onnx_mrvl.InferenceSession(os.path.join(out, "model.onnx"))
    ref = ort.InferenceSession(EXAMPLE, providers=["CPUExecutionProvider"])
    for x in _inputs(100):
        want = ref.run(None, {"input": x})[0]
        got = sess.run(None, {"input": x})[0]
        assert got.dtype == np.float32 and got.shape == (1, 10)
        assert np.abs(got - want).max() <= 1e-2 * np.abs(want).max()
        assert got.argmax() == want.argmax()


def test_fused_stage_in_plain_onnxruntime(converted):
    result, _ = converted
    fused = result.stages["fuse"]
    onnx.checker.check_model(fused, full_check=True)
    sess = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = ort.InferenceSession(EXAMPLE, providers=["CPUExecutionProvider"])
    for x in _inputs(10, seed=1):
        want = ref.run(None, {"input": x})[0]
        got = sess.run(None, {"input": x})[0]
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_conversion_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    onnx_mrvl.convert(EXAMPLE).save(str(a))
    onnx_mrvl.convert(EXAMPLE).save(str(b))
    for name in os.listdir(a):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_input_model_not_mutated():
    m = onnx.load(EXAMPLE)
    before = m.SerializeToString()
    onnx_mrvl.convert(m)
    assert m.SerializeToString() == before


@pytest.fixture
def saved_copy(converted, tmp_path):
    _, out = converted
    for name in os.listdir(out):
        (tmp_path / name).write_bytes(open(os.path.join(out, name), "rb").read())
    return tmp_path


def test_flipped_byte_in_binary_is_refused(saved_copy):
    path = saved_copy / "mrvl_region_0.bin"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="mrvl_region_0"):
        onnx_mrvl.InferenceSession(str(saved_copy / "model.onnx"))


def test_missing_binary_is_refused(saved_copy):
    os.remove(saved_copy / "mrvl_region_0.bin")
    with pytest.raises(ArtifactError, match="mrvl_region_0") as info:
        onnx_mrvl.InferenceSession(str(saved_copy / "model.onnx"))
    assert isinstance(info.value, MrvlError) and "conv1" in str(info.value)


def test_reference_path_runs_in_plain_onnxruntime():
    result = onnx_mrvl.convert(EXAMPLE, reference=True)
    sess = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = ort.InferenceSession(EXAMPLE, providers=["CPUExecutionProvider"])
    x = _inputs(1)[0]
    want, got = ref.run(None, {"input": x})[0], sess.run(None, {"input": x})[0]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_embedded_binary_runs_from_bytes():
    result = onnx_mrvl.convert(EXAMPLE, embed=True)
    sess = onnx_mrvl.InferenceSession(result.model.SerializeToString())
    x = _inputs(1)[0]
    ref = ort.InferenceSession(EXAMPLE, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    got = sess.run(None, {"input": x})[0]
    assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()
