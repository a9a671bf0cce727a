"""Compile casts large fp16 weights straight into the model binary's bytes (issue #20, convert
time): pack's deferred parts (artifact/assemble.py) and emit's ``Float16Cast`` (emit/fp16_cast.py).
The bytes are those of the cast-then-copy path, and no float16 copy of the weights is made first."""
import base64
import hashlib
import threading
import tracemalloc

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.artifact import assemble, pack_sha256
from onnx_mrvl.emit import build_program, compile_program_sha256
from onnx_mrvl.emit.fp16_cast import Float16Cast


class _Part:
    """A deferred part writing ``data`` (or raising, ``fail``)."""

    def __init__(self, data: np.ndarray, fail: bool = False):
        self.data, self.fail, self.nbytes, self.shape, self.dtype = data, fail, data.nbytes, data.shape, data.dtype

    def write_into(self, out):
        if self.fail:
            raise ValueError("this part cannot be written")
        out[:] = self.data


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("parallel_min", [0, 1 << 40])
def test_deferred_parts_are_written_in_place_and_hashed(monkeypatch, workers, parallel_min):
    monkeypatch.setenv("ONNX_MRVL_CONVERT_THREADS", workers)
    monkeypatch.setattr(assemble, "PARALLEL_MIN", parallel_min)
    monkeypatch.setattr(assemble, "COPY_BLOCK", 1 << 12)
    rng = np.random.default_rng(3)
    raw = [rng.integers(0, 256, n, dtype=np.uint8) for n in (100, 70000, 5, 33333, 9)]
    parts = [raw[0].tobytes(), _Part(raw[1]), raw[2], _Part(raw[3]), raw[4].tobytes()]
    data, digest = assemble.join_with_digest(parts)
    body = b"".join(r.tobytes() for r in raw)
    assert type(data) is bytes and data == body + hashlib.sha256(body).digest()
    assert digest == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("parallel_min", [0, 1 << 40])
def test_a_failing_deferred_part_raises_and_stops_the_hash(monkeypatch, parallel_min):
    monkeypatch.setenv("ONNX_MRVL_CONVERT_THREADS", "2")
    monkeypatch.setattr(assemble, "PARALLEL_MIN", parallel_min)
    parts = [b"head", _Part(np.ones(5000, np.uint8)), _Part(np.zeros(10, np.uint8), fail=True), b"tail"]
    with pytest.raises(ValueError, match="cannot be written"):
        assemble.join_with_digest(parts)
    assert not any(t.name == "onnx_mrvl-pack-sha256" for t in threading.enumerate())


def _fc(o=4096, k=2048):
    """input [1, k] -> Gemm (o x k weights; 4096 x 2048: a 16 MB fp16 binary, pack's parallel
    path) -> Relu."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((o, k), dtype=np.float32) * 0.02)
    b = rng.standard_normal(o, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["h"], "fc", transB=1), helper.make_node("Relu", ["h"], ["y"], "relu")],
        "fc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, o])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def converted():
    model = _fc()
    return model, onnx_mrvl.convert(model)


def test_compile_writes_the_same_binary_without_a_float16_copy(converted):
    _, result = converted
    sg = result.subgraphs[0]
    meta, weights = build_program(sg.nodes_json, sg.consts_json, defer=True)
    assert any(isinstance(w, Float16Cast) for w in weights.values())         # the kernel is cast in pack
    eager_meta, eager = build_program(sg.nodes_json, sg.consts_json)          # cast first, then copied
    assert all(isinstance(w, np.ndarray) for w in eager.values())
    want, want_digest = pack_sha256(eager_meta, eager)
    del eager
    assert len(want) >= assemble.PARALLEL_MIN
    tracemalloc.start()
    try:
        binary, _, digest = compile_program_sha256(sg.nodes_json, sg.consts_json)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert binary == sg.binary == want and digest == want_digest == hashlib.sha256(binary).hexdigest()
    # the binary's bytes and little else: a float16 copy of the kernel first would add 16 MB
    assert peak < 1.25 * len(binary), (peak, len(binary))


def test_the_converted_model_matches_onnxruntime(converted, tmp_path):
    model, result = converted
    out = str(tmp_path / "out")
    result.save(out)
    x = np.random.default_rng(1).standard_normal((1, 2048), dtype=np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = onnx_mrvl.InferenceSession(f"{out}/model.onnx").run(None, {"x": x})[0]
    # the fp16 tolerance of docs/conformance.md
    assert np.allclose(got, want, rtol=1e-2, atol=1e-3 * max(1.0, float(np.abs(want).max())))


def test_a_weight_not_finite_in_fp16_fails_as_before():
    """The finiteness check moved with the cast into pack: compiling a JSON pair whose kernel has a
    value beyond fp16 raises the same error, naming the weight, as the cast-first path."""
    sg = onnx_mrvl.convert(_fc(512, 256)).subgraphs[0]
    consts = dict(sg.consts_json)
    name = max(consts, key=lambda k: int(np.prod(consts[k]["shape"])))
    a = np.frombuffer(base64.b64decode(consts[name]["data_base64"]), np.float32).copy()
    a[-1] = 7e4
    consts[name] = dict(consts[name], data_base64=base64.b64encode(a.tobytes()).decode())
    _, weights = build_program(sg.nodes_json, consts, defer=True)
    assert any(isinstance(w, Float16Cast) for w in weights.values())
    with pytest.raises(onnx_mrvl.errors.CompileError, match="weight '.*' has values that are not finite in fp16") as deferred:
        compile_program_sha256(sg.nodes_json, consts)
    with pytest.raises(onnx_mrvl.errors.CompileError, match="not finite in fp16") as eager:
        build_program(sg.nodes_json, consts)
    assert str(deferred.value) == str(eager.value)
