"""Quantize in the flow (onnx_mrvl/quantize/, docs/quantize.md): convert(fp32 model, quantize="int8",
calibration=...) quantizes with onnxruntime's quantizer and imports the QDQ model as int8 layers;
quantize="mixed" keeps fp16 where int8 falls under the SNR budget."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

import onnx_mrvl
from onnx_mrvl.testing.cli_run import run_cli
from onnx_mrvl.errors import UsageError
from onnx_mrvl.testing.models import GraphBuilder, classifier_model, tiny_cnn

pytest.importorskip("onnxruntime.quantization")
from test_int8_dynamic import token_mlp  # noqa: E402  (the same seeded token MLP)

F32 = TensorProto.FLOAT


def residual_block(seed: int = 0) -> onnx.ModelProto:
    """conv-Relu-conv + skip, Add, Relu, GAP, Flatten, Gemm."""
    g = GraphBuilder(seed, 13)
    x = g.relu(g.conv("input", 3, 16, 3, "stem"), "stem_relu")
    y = g.conv(g.relu(g.conv(x, 16, 16, 3, "c1"), "r1"), 16, 16, 3, "c2")
    x = g.relu(g.node("Add", [y, x], "add"), "add_relu")
    return classifier_model(g, x, 16, 10, "residual_block", input_size=16, gap="gap")




def badly_scaled(seed: int = 0) -> onnx.ModelProto:
    """conv1 -> Relu -> conv2 (output channel 0 x 1000: one per-tensor scale for all channels
    crushes the others) -> conv3 (reads channel 0 / 1000) -> Relu -> conv4."""
    g = GraphBuilder(seed, 13)
    x = g.relu(g.conv("input", 3, 8, 3, "conv1"), "relu1")
    w2 = g.he((8, 8, 3, 3), 72)
    w2[0] *= 1000.0
    x = g.node("Conv", [x, g.const("w2", w2)], "conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    w3 = g.he((8, 8, 3, 3), 72)
    w3[:, 0] /= 1000.0
    x = g.relu(g.node("Conv", [x, g.const("w3", w3)], "conv3", kernel_shape=[3, 3], pads=[1, 1, 1, 1]), "relu3")
    g.conv(x, 8, 8, 3, "conv4")
    g.nodes[-1].output[0] = "output"
    return g.model("badly_scaled", [("input", F32, [1, 3, 16, 16])], [("output", F32, [1, 8, 16, 16])])


def feeds(model, n, seed):
    rng = np.random.default_rng(seed)
    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    return [{inp.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(n)]


def _layers(folder):
    out = []
    for f in sorted(os.listdir(folder)):
        if f.endswith("-nodes.json"):
            out += [n for n in json.load(open(os.path.join(folder, f)))["nodes"] if n["op"] == "tvm_op"]
    return out


def _at_io(model, n):
    io = {i.name for i in model.graph.input} | {o.name for o in model.graph.output}
    return bool(set(n.input[:1]) & io or set(n.output) & io)


# vs fp32: the documented 2e-2 of max|ref|; the token MLP's int8 noise (8 minmax samples, per-tensor
# activations) measures 2.2e-2 -- the import itself is checked against onnxruntime's QDQ run below
@pytest.mark.parametrize("builder,bound", [(tiny_cnn, 2e-2), (residual_block, 2e-2), (token_mlp, 3e-2)])
def test_int8_in_the_flow(tmp_path, builder, bound):
    from onnx_mrvl.quantize import quantize_model
    model = builder(seed=1)
    cal, held = feeds(model, 8, 1), feeds(model, 4, 2)
    result = onnx_mrvl.convert(model, quantize="int8", calibration=cal)
    # structure: no compute op and no Q/DQ on the CPU but at the graph I/O; every layer int8
    for n in result.model.graph.node:
        assert n.op_type.startswith("Subgraph") or (n.op_type in ("QuantizeLinear", "DequantizeLinear")
                                                   and _at_io(result.model, n)), n.op_type
    q = result.report.quantization
    assert q["mode"] == "int8" and q["method"] == "minmax" and q["samples"] == 8
    assert q["int8_layers"] == q["layers_total"] > 0
    assert all(r["precision"] == "int8" and r["snr_db"] is not None for r in q["layers"])
    folder = str(tmp_path / "out")
    path = result.save(folder)
    computes = [n for n in _layers(folder) if n["attrs"]["layer_name"][0] in ("Conv2D", "FC")]
    assert computes and all(n["attrs"].get("precision") == ["int8"] for n in computes)
    report = json.load(open(os.path.join(folder, "report.json")))
    assert report["quantization"]["samples"] == 8
    opts = json.loads(next(p.value for p in result.model.metadata_props if p.key == "mrvl.options"))
    assert opts["quantize"] == "int8" and opts["calibration"]["samples"] == 8
    # numbers: against fp32 (the documented 2e-2 of max|ref|) and against onnxruntime's run of the
    # QDQ model the quantize step wrote (>= 99% identical elements, the rest within one quantum)
    qdq = quantize_model(model, quantize="int8", calibration=cal).model
    dq = next(n for n in qdq.graph.node if n.output[0] == qdq.graph.output[0].name)
    assert dq.op_type == "DequantizeLinear"
    step = float(onnx.numpy_helper.to_array(next(t for t in qdq.graph.initializer if t.name == dq.input[1])))
    fp32 = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref_q = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(path)
    same = total = 0
    for feed in held:
        a, b, c = fp32.run(None, feed)[0], sess.run(None, feed)[0], ref_q.run(None, feed)[0]
        assert np.abs(a - b).max() <= bound * np.abs(a).max()
        assert np.abs(b - c).max() <= step * (1 + 1e-3)
        same += int((b == c).sum())
        total += b.size
    assert same >= 0.99 * total


def test_fp16_layers_are_kept_fp16(tmp_path):
    model = residual_block(seed=2)
    result = onnx_mrvl.convert(model, quantize="int8", calibration=feeds(model, 4, 1), fp16_layers=["c2", "Gemm"])
    recs = {r["layer"]: r for r in result.report.quantization["layers"]}
    assert recs["c2"]["precision"] == recs["fc"]["precision"] == "fp16"
    assert recs["c2"]["reason"] == "fp16_layers names it"
    assert recs["c1"]["precision"] == recs["stem"]["precision"] == "int8"
    folder = str(tmp_path / "out")
    result.save(folder)
    by_origin = {tuple(n["attrs"].get("origin_nodes", [[]])[0]): n for n in _layers(folder)}
    kinds = {o: n["attrs"].get("precision") for origin, n in by_origin.items() for o in origin}
    assert kinds["c2"] is None and kinds["fc"] is None and kinds["c1"] == ["int8"]
    assert [n.op_type for n in result.model.graph.node if n.op_type in ("Conv", "Gemm")] == []


def test_mixed_keeps_the_badly_scaled_activation_fp16(tmp_path):
    model = badly_scaled(seed=0)
    cal, held = feeds(model, 8, 1), feeds(model, 3, 2)
    int8 = onnx_mrvl.convert(model, quantize="int8", calibration=cal).report.quantization
    mixed = onnx_mrvl.convert(model, quantize="mixed", calibration=cal)
    q = mixed.report.quantization
    recs = {r["layer"]: r for r in q["layers"]}
    assert q["snr_budget_db"] == 30.0 and q["rounds"] >= 2
    assert recs["conv2"]["precision"] == recs["conv3"]["precision"] == "fp16"
    assert "conv2" in recs["conv2"]["reason"] or "dB < budget 30 dB" in recs["conv2"]["reason"]
    assert "< budget 30 dB" in recs["conv3"]["reason"]
    assert recs["conv1"]["precision"] == recs["conv4"]["precision"] == "int8"
    assert recs["conv1"]["snr_db"] >= 30 and recs["conv4"]["snr_db"] >= 30
    assert {r["layer"]: r for r in int8["layers"]}["conv3"]["output_snr_db"] < 10   # what "mixed" avoided
    assert recs["conv3"]["output_snr_db"] < 10        # recorded as measured in int8
    assert q["output_snr_db"]["output"] > int8["output_snr_db"]["output"] + 10
    folder = str(tmp_path / "out")
    path = mixed.save(folder)
    fp32 = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(path)
    sig = noise = 0.0
    for feed in held:   # the accelerator run keeps the budget against fp32 on held-out inputs
        a, b = fp32.run(None, feed)[0].astype(np.float64), sess.run(None, feed)[0]
        sig, noise = sig + float((a * a).sum()), noise + float(((a - b) ** 2).sum())
    assert 10 * np.log10(sig / noise) >= 30
    assert q["int8_layers"] == 2 and int8["int8_layers"] == int8["layers_total"] == 4


def test_calibration_forms(tmp_path):
    model = tiny_cnn(seed=0)
    cal = feeds(model, 3, 1)
    stacked = tmp_path / "stack.npz"
    np.savez(stacked, input=np.stack([c["input"] for c in cal]))
    folder = tmp_path / "cal"
    folder.mkdir()
    for i, c in enumerate(cal):
        np.savez(folder / f"s{i}.npz", **c)
    np.save(folder / "s9.npy", cal[0]["input"])
    from onnx_mrvl.quantize.calibration import load_calibration
    a, _ = load_calibration(str(stacked), model)
    b, _ = load_calibration(str(folder), model)
    c, _ = load_calibration((x for x in cal), model)
    assert len(a) == 3 and len(b) == 4 and len(c) == 3
    assert all(np.array_equal(x["input"], y["input"]) for x, y in zip(a, cal))
    r1 = onnx_mrvl.convert(model, quantize="int8", calibration=str(stacked)).model
    r2 = onnx_mrvl.convert(model, quantize="int8", calibration=cal).model
    assert [n.op_type for n in r1.graph.node] == [n.op_type for n in r2.graph.node]


@pytest.mark.parametrize("calibration,kwargs,error,match", [
    (None, {}, UsageError, "needs calibration data"),
    ("missing.npz", {}, UsageError, "does not exist"),
    ("bad.npz", {}, UsageError, "cannot read inputs"),
    ("wrongname.npz", {}, UsageError, "no array for input 'input'"),
    ("wrongshape", {}, UsageError, r"has shape \[1, 3, 8, 8\], the model takes \[1, 3, 32, 32\]"),
    ("wrongdtype", {}, UsageError, "is float64, the model takes float32"),
    ("nan", {}, UsageError, "NaN or inf"),
    ("empty", {}, UsageError, "holds no sample"),
    ("onedict", {}, UsageError, "one feed dict"),
    ("notdict", {}, UsageError, "sample 0 is a ndarray"),
    ("extra", {}, UsageError, r"unknown \['mask'\]"),
    ("emptydir", {}, UsageError, "holds no .npz or .npy"),
    ("calib.txt", {}, UsageError, "is not a .npz / .npy file or a folder"),
    ("ok", {"calibration_method": "kl"}, UsageError, "calibration_method='kl'"),
    ("ok", {"quantize": "int4"}, UsageError, "quantize='int4'"),
    ("ok", {"quantize": "float16"}, UsageError, "quantize='float16'"),
    ("ok", {"fp16_layers": ["convv1"]}, UsageError, "did you mean 'conv1'"),
    ("ok", {"quantize": "mixed", "snr_budget_db": -3}, UsageError, "snr_budget_db=-3"),
])
def test_errors(tmp_path, calibration, kwargs, error, match):
    model = tiny_cnn(seed=0)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    np.savez(tmp_path / "wrongname.npz", inptu=x)
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "calib.txt").write_text("1 2 3")
    data = {"wrongshape": [{"input": x[:, :, :8, :8]}], "wrongdtype": [{"input": x.astype(np.float64)}],
            "nan": [{"input": np.full_like(x, np.nan)}], "empty": [], "onedict": {"input": x},
            "notdict": [x], "extra": [{"input": x, "mask": x}],
            "ok": [{"input": x}]}.get(calibration, calibration)
    if isinstance(data, str):
        data = str(tmp_path / data)
    with pytest.raises(error, match=match):
        onnx_mrvl.convert(model, **{"quantize": "int8", "calibration": data, **kwargs})


def test_cli(tmp_path):
    model = tiny_cnn(seed=0)
    src = str(tmp_path / "m.onnx")
    onnx.save(model, src)
    np.savez(tmp_path / "cal.npz", input=np.stack([f["input"] for f in feeds(model, 4, 1)]))

    def cli(*args):
        return run_cli(*args, cwd=str(tmp_path))
    h = cli("convert", "--help")
    assert h.returncode == 0
    for flag in ("--quantize", "--calibration", "--calibration-method", "--fp16-layer", "--snr-budget"):
        assert flag in h.stdout
    ok = cli("convert", src, "-o", "out", "--quantize", "int8", "--calibration", "cal.npz",
             "--calibration-method", "percentile", "--json")
    assert ok.returncode == 0, ok.stderr
    summary = json.loads(ok.stdout)
    assert summary["quantization"]["method"] == "percentile" and summary["quantization"]["samples"] == 4
    missing = cli("convert", src, "-o", "out2", "--quantize", "int8")
    assert missing.returncode == 3 and "needs calibration data" in missing.stderr and "Fix:" in missing.stderr
    bad = cli("convert", src, "-o", "out3", "--quantize", "int8", "--calibration", "cal.npz",
              "--calibration-method", "kl")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_float_op_output_read_by_int8_and_float_layers(tmp_path):
    """A LeakyRelu (float: no int8 mode) read by a conv (int8) and a Concat (float): onnxruntime's
    quantizer gives both the one DQ; the quantize step gives the Concat the float tensor back, so
    no Q/DQ pair is left on the CPU. The QDQ model is result.stages["quantize"]; ours matches
    onnxruntime's run of it within one output quantum."""
    g = GraphBuilder(3, 13)
    x = g.node("LeakyRelu", [g.conv("input", 3, 8, 3, "c0")], "leaky", alpha=0.1)
    y = g.relu(g.conv(x, 8, 8, 3, "c1"), "r1")
    g.conv(g.node("Concat", [x, y], "cat", axis=1), 16, 8, 3, "c2")
    g.nodes[-1].output[0] = "output"
    model = g.model("leaky_concat", [("input", F32, [1, 3, 16, 16])], [("output", F32, [1, 8, 16, 16])])
    cal, held = feeds(model, 6, 1), feeds(model, 3, 2)
    # LeakyRelu and Concat float: quantize_options elementwise=False (by default both are int8 now)
    result = onnx_mrvl.convert(model, quantize="int8", calibration=cal, quantize_options={"elementwise": False})
    for n in result.model.graph.node:
        assert n.op_type.startswith("Subgraph") or _at_io(result.model, n), (n.op_type, n.name)
    qdq = result.stages["quantize"]
    cat = next(n for n in qdq.graph.node if n.name == "cat")
    producer = {o: n for n in qdq.graph.node for o in n.output}
    assert producer[cat.input[0]].op_type == "LeakyRelu"          # the float tensor, not a DQ of it
    assert {r["layer"]: r["precision"] for r in result.report.quantization["layers"]} == \
        {"c0": "int8", "c1": "int8", "c2": "int8"}
    path = result.save(str(tmp_path / "out"), stages=True)
    assert os.path.exists(os.path.join(os.path.dirname(path), "stage-quantize.onnx"))
    dq = next(n for n in qdq.graph.node if n.output[0] == "output")
    step = float(onnx.numpy_helper.to_array(next(t for t in qdq.graph.initializer if t.name == dq.input[1])))
    ref = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(path)
    for feed in held:
        assert np.abs(ref.run(None, feed)[0] - sess.run(None, feed)[0]).max() <= step * (1 + 1e-3)


def test_old_opset_sum_and_batchnorm_are_prepared():
    """Opset 11 with a BatchNormalization (folded by quant_pre_process) and a residual Sum (an Add
    for the quantizer), initializers listed as graph inputs (IR 3 style): all int8, one region."""
    g = GraphBuilder(4, 11)
    x = g.relu(g.bn(g.conv("input", 3, 8, 3, "c0", bias=False), 8, "bn0"), "r0")
    y = g.conv(x, 8, 8, 3, "c1")
    g.node("Sum", [x, y], "sum")
    g.nodes[-1].output[0] = "output"
    model = g.model("old", [("input", F32, [1, 3, 16, 16])], [("output", F32, [1, 8, 16, 16])])
    model.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                             for t in model.graph.initializer)
    result = onnx_mrvl.convert(model, quantize="int8", calibration=feeds(model, 4, 1))
    assert all(n.op_type.startswith("Subgraph") or _at_io(result.model, n) for n in result.model.graph.node)
    recs = {r["layer"]: r["precision"] for r in result.report.quantization["layers"]}
    assert recs == {"c0": "int8", "c1": "int8", "sum": "int8"}


def test_a_quantizer_failure_is_our_error(monkeypatch):
    from onnxruntime import quantization
    from onnx_mrvl.errors import UnsupportedError

    def boom(*a, **k):
        raise RuntimeError("injected")
    monkeypatch.setattr(quantization, "quantize_static", boom)
    model = tiny_cnn(seed=0)
    with pytest.raises(UnsupportedError, match="quantize_static failed on this model.*injected"):
        onnx_mrvl.convert(model, quantize="int8", calibration=feeds(model, 2, 1))


def test_two_input_stacks_must_agree(tmp_path):
    from onnx_mrvl.quantize.calibration import load_calibration
    g = GraphBuilder(0, 13)
    g.node("Add", ["a", "b"], "add")
    g.nodes[-1].output[0] = "y"
    model = g.model("two", [("a", F32, [1, 4]), ("b", F32, [1, 4])], [("y", F32, [1, 4])])
    x = np.zeros((1, 4), np.float32)
    np.savez(tmp_path / "ok.npz", a=np.stack([x, x]), b=np.stack([x, x]))
    np.savez(tmp_path / "counts.npz", a=np.stack([x, x]), b=np.stack([x]))
    np.savez(tmp_path / "mixed.npz", a=np.stack([x, x]), b=x)
    assert len(load_calibration(str(tmp_path / "ok.npz"), model)[0]) == 2
    with pytest.raises(UsageError, match="stacks different sample counts"):
        load_calibration(str(tmp_path / "counts.npz"), model)
    with pytest.raises(UsageError, match="mixes stacked and single-sample arrays"):
        load_calibration(str(tmp_path / "mixed.npz"), model)


def test_pool_without_output_quantization_reads_the_float_tensor():
    """Concat (float) -> Q -> DQ read by a conv whose output is quantized (an int8 layer) and by a
    MaxPool whose output is not (onnxruntime leaves it so before a float op; Inception v2's 3c
    block): the MaxPool is no int8 layer and reads the float Concat output; the conv keeps the pair."""
    from onnx import helper, numpy_helper as nh
    from onnx_mrvl.quantize.static import float_readers_read_float
    s, z = nh.from_array(np.array(0.1, np.float32), "s"), nh.from_array(np.array(0, np.int8), "z")
    w = nh.from_array(np.ones((4, 8, 1, 1), np.int8), "wq")
    ws = nh.from_array(np.full(4, 0.01, np.float32), "ws")
    nodes = [helper.make_node("Concat", ["a", "b"], ["cat"], axis=1, name="cat"),
             helper.make_node("QuantizeLinear", ["cat", "s", "z"], ["cat_q"], name="q"),
             helper.make_node("DequantizeLinear", ["cat_q", "s", "z"], ["cat_dq"], name="dq"),
             helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], name="dqw", axis=0),
             helper.make_node("Conv", ["cat_dq", "w"], ["y"], name="conv"),
             helper.make_node("QuantizeLinear", ["y", "s", "z"], ["y_q"], name="qy"),
             helper.make_node("DequantizeLinear", ["y_q", "s", "z"], ["y_dq"], name="dqy"),
             helper.make_node("MaxPool", ["cat_dq"], ["p"], kernel_shape=[2, 2], name="pool")]
    vi = lambda n, c: helper.make_tensor_value_info(n, F32, [1, c, 4, 4])  # noqa: E731
    qdq = helper.make_model(helper.make_graph(nodes, "g", [vi("a", 4), vi("b", 4)],
                                              [vi("y_dq", 4), helper.make_tensor_value_info("p", F32, None)],
                                              [s, z, w, ws]))
    pre = helper.make_model(helper.make_graph([nodes[0]], "g", [vi("a", 4), vi("b", 4)], [vi("cat", 8)]))
    from onnx_mrvl.quantize.recipe import Recipe
    assert float_readers_read_float(qdq, pre, recipe=Recipe(elementwise=False)) == 1   # Concat float
    ins = {n.name: list(n.input) for n in qdq.graph.node}
    assert ins["pool"] == ["cat"] and ins["conv"][0] == "cat_dq"


def token_encoder(seed: int = 0) -> onnx.ModelProto:
    """int64 token ids -> embedding Gather -> MatMul + Add -> Relu -> MatMul: a text model whose
    only input is an integer tensor (its activations are float all the same)."""
    g = GraphBuilder(seed, 13)
    table = g.const("embed", g.rng.standard_normal((50, 16)).astype(np.float32))
    x = g.node("Gather", [table, "ids"], "embed.gather", axis=0)
    x = g.node("MatMul", [x, g.const("w1", g.he((16, 32), 16))], "fc1")
    x = g.relu(g.node("Add", [x, g.const("b1", np.full(32, 0.1, np.float32))], "fc1.add"), "relu")
    g.node("MatMul", [x, g.const("w2", g.he((32, 8), 32))], "fc2")
    g.nodes[-1].output[0] = "output"
    return g.model("token_encoder", [("ids", TensorProto.INT64, [1, 12])], [("output", F32, [1, 12, 8])])


def test_integer_inputs_calibrate(tmp_path):
    """A model whose inputs are token ids calibrates on integer feeds (before: "the model has no float
    input to calibrate"): fully offloaded int8 layers, within the int8 bound of onnxruntime's run of
    the QDQ model it made."""
    m = token_encoder()
    rng = np.random.default_rng(1)
    calib = [{"ids": rng.integers(0, 50, (1, 12)).astype(np.int64)} for _ in range(16)]
    res = onnx_mrvl.convert(m, quantize="int8", calibration=calib)
    assert res.report.quantization["int8_layers"] >= 2
    assert not [d for d in res.report.cpu_nodes() if d.op_type in ("MatMul", "Gemm")]
    qdq = res.stages["quantize"]
    feed = {"ids": rng.integers(0, 50, (1, 12)).astype(np.int64)}
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feed)[0]
    want = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    dq = next(n for n in qdq.graph.node if n.output[0] == "output")    # the output's own quantum
    assert dq.op_type == "DequantizeLinear"
    step = float(onnx.numpy_helper.to_array(next(t for t in qdq.graph.initializer if t.name == dq.input[1])))
    assert np.max(np.abs(got - want)) <= step * 1.0001


@pytest.mark.parametrize("padding", [False, True])
def test_float32_lowest_masks_stay_float(tmp_path, padding):
    """quantize="int8" on a decoder's attention with Hugging Face's mask fill, float32's lowest (a
    constant causal mask; with ``padding`` made at run time): the masked scores' range would give
    their Q a scale of ~1.3e36, every score the zero point and a uniform attention (the output 16 dB
    from fp32); the mask Add and the Softmax stay float (fp16 layers, the fill taken as a mask), one
    region, the output >= 25 dB from fp32 (35 measured)."""
    from onnx_mrvl.testing.qdq_masked_attention import causal_attention, causal_feeds
    m = causal_attention(padding=padding)
    res = onnx_mrvl.convert(m, quantize="int8", calibration=causal_feeds(8, padding=padding))
    q = res.report.quantization
    assert len(res.report.regions) == 1
    # kept float by the quantizer; emitted inside the int8 Softmax that adds the mask in fp32, as
    # onnxruntime runs that float Add between the scores' DQ and the probabilities' Q
    # (fuse/qdq_masked_softmax.py; before: an fp16 Sum2D)
    kept = [r for r in q["layers"] if r.get("planned", r["precision"]) == "fp16"]
    assert [r["layer"] for r in kept] == ["mask_add"] and "mask fill" in kept[0]["reason"], kept
    assert q["int8_layers"] >= 4
    f = causal_feeds(1, seed=11, padding=padding)[0]
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, f)[0]
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
    snr = 10 * np.log10(np.sum(ref ** 2) / np.sum((got - ref) ** 2))
    assert snr >= 25, snr


@pytest.mark.parametrize("mask", ["bool_inf", "where"])
def test_minus_inf_masks_stay_float(tmp_path, mask):
    """quantize="int8" on attention with a -inf mask (a run-time boolean mask turned into
    Where(m, 0, -inf), or a causal Where(cond, scores, -inf)): the tensors holding -inf and the
    nodes reading or writing them stay float (an int8 range cannot hold -inf: onnxruntime's calibrator
    gave them an infinite scale, every masked score NaN or 0 and the block cut into 3 regions);
    the projections are int8, one region, the output close to fp32."""
    from onnx_mrvl.testing import arch_attention as A
    m = A.mha_block("legacy", mask, "Softmax")
    calib = [A.feeds(m, seed=s) for s in range(8)]
    res = onnx_mrvl.convert(m, quantize="int8", calibration=calib)
    q = res.report.quantization
    assert len(res.report.regions) == 1
    kept = [r for r in q["layers"] if r["precision"] == "fp16" and "-inf" in r["reason"]]
    if mask == "bool_inf":   # the mask Add is a quantizable layer: kept float, with the reason
        assert [r["layer"] for r in kept] == ["attn.add_mask"], [(r["layer"], r["reason"]) for r in q["layers"]]
    assert q["int8_layers"] >= 4
    qdq = res.stages["quantize"]
    scales = [onnx.numpy_helper.to_array(t) for t in qdq.graph.initializer if t.name.endswith("_scale")]
    assert all(np.isfinite(s).all() for s in scales)
    f = A.feeds(m, seed=11)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, f)[0]
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
    snr = 10 * np.log10(np.sum(ref ** 2) / np.sum((got - ref) ** 2))
    assert np.isfinite(got).all() and snr >= 25, snr
