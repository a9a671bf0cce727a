"""Legalization: a layer norm whose centering onnxruntime's transpose optimizer moved before the
Transpose (``quant_pre_process`` of paddle2onnx's SVTR neck: ``Transpose -> LayerNorm(last axis)``
becomes ``m = ReduceMean(x, [1]); Transpose(x - m) -> Pow -> ReduceMean(-1) ...``) gets its centering
back after the Transpose (center_before_transpose): exact, then a layer norm again (float:
layernorm_canonical; QDQ: fuse's qdq_layernorm, whose axes check now reads [2] and [-1] alike).
PP-OCRv5 rec quantize="int8": ReduceMean + Sub on the CPU, 2 regions -> 1."""
import collections
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import onnx_mrvl
from onnx_mrvl.artifact import load
from onnx_mrvl.legalize.testing import legalize_and_compare, make_model
from onnx_mrvl.ort_plan import strided_mean
from onnx_mrvl.testing.ort_sessions import exact_session
from onnx_mrvl.testing.int8_zoo import quantize_static_qdq

mk = helper.make_node
C, T = 64, 40


def _split_layernorm(seed: int = 0, conv: bool = False, split: bool = True, batch: int = 1) -> onnx.ModelProto:
    """x [batch, C, T] -> mean over C, centred, then Transpose [0, 2, 1] -> variance over the last
    axis, eps, Sqrt, Div, gamma, beta; the residual reads its own Transpose of x (as the optimizer
    leaves it); a MatMul after both. ``conv``: x is a 1x1 Conv1d's output (SVTR's neck: a Conv, then
    flatten / transpose / LayerNorm), so a QDQ model quantizes it; ``split`` False: the layer norm
    as exported, after the Transpose."""
    rng = np.random.default_rng(seed)
    inits = {"two": np.array(2.0, np.float32), "eps": np.array(1e-6, np.float32),
             "gamma": (1 + 0.2 * rng.standard_normal(C)).astype(np.float32),
             "beta": (0.1 * rng.standard_normal(C)).astype(np.float32),
             "w": (rng.standard_normal((C, 8)) / 4).astype(np.float32)}
    x = "x"
    pre = []
    if conv:
        inits["cw"] = (rng.standard_normal((C, C, 1)) / 8).astype(np.float32)
        x, pre = "x1", [mk("Conv", ["x", "cw"], ["x1"], name="conv")]
    if split:
        head = [mk("ReduceMean", [x], ["m"], name="mean", axes=[1], keepdims=1),
                mk("Sub", [x, "m"], ["d"], name="center"),
                mk("Transpose", ["d"], ["dt"], name="tr", perm=[0, 2, 1])]
    else:
        head = [mk("Transpose", [x], ["xt0"], name="tr", perm=[0, 2, 1]),
                mk("ReduceMean", ["xt0"], ["m"], name="mean", axes=[-1], keepdims=1),
                mk("Sub", ["xt0", "m"], ["dt"], name="center")]
    nodes = pre + head + [
             mk("Pow", ["dt", "two"], ["sq"], name="sq"),
             mk("ReduceMean", ["sq"], ["v"], name="var", axes=[-1], keepdims=1),
             mk("Add", ["v", "eps"], ["ve"], name="addeps"),
             mk("Sqrt", ["ve"], ["sd"], name="sqrt"),
             mk("Div", ["dt", "sd"], ["n"], name="div"),
             mk("Mul", ["n", "gamma"], ["g"], name="scale"),
             mk("Add", ["g", "beta"], ["ln"], name="shift"),
             mk("Transpose", [x], ["xt"], name="tr_res", perm=[0, 2, 1]),
             mk("Add", ["ln", "xt"], ["r"], name="residual"),
             mk("MatMul", ["r", "w"], ["y"], name="fc")]
    return make_model(nodes, [("x", [batch, C, T])], ["y"], inits, opset=13)


def _feeds(n, seed=1, batch=1):
    rng = np.random.default_rng(seed)
    return [{"x": (rng.standard_normal((batch, C, T)) * 2 + 0.5).astype(np.float32)} for _ in range(n)]


def test_centering_moves_after_the_transpose_and_is_a_layernorm():
    out, log = legalize_and_compare(_split_layernorm(), tol=1e-5)
    rules = [r for r, _, _ in log]
    assert "center_before_transpose" in rules and "layernorm_canonical" in rules
    ops = collections.Counter(n.op_type for n in out.graph.node)
    assert ops["LayerNormalization"] == 1 and ops["ReduceMean"] == 0 and ops["Sub"] == 0


def test_mean_with_other_readers_stays():
    m = _split_layernorm()
    m.graph.node.append(mk("Identity", ["m"], ["m_out"], name="peek"))
    m.graph.output.append(helper.make_tensor_value_info("m_out", onnx.TensorProto.FLOAT, None))
    out, log = legalize_and_compare(m, tol=1e-5)
    assert "center_before_transpose" not in [r for r, _, _ in log]


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_qdq_split_layernorm_is_one_region(act, tmp_path):
    src = str(tmp_path / "f.onnx")
    onnx.save(_split_layernorm(), src)
    qdq = quantize_static_qdq(src, str(tmp_path / "q.onnx"), _feeds(8), act=act, per_channel=False)
    conv = onnx_mrvl.convert(qdq)
    assert len(conv.report.regions) == 1
    assert not list(conv.report.cpu_nodes()), [(d.node, d.op_type) for d in conv.report.cpu_nodes()]
    sess = onnx_mrvl.InferenceSession(conv.save(str(tmp_path / "out")))
    ref = ort.InferenceSession(qdq, providers=["CPUExecutionProvider"])
    scale = float(next(onnx.numpy_helper.to_array(t) for t in onnx.load(qdq).graph.initializer
                       if t.name == "y_scale"))
    same = total = 0
    for f in _feeds(4, seed=7):
        a, b = sess.run(None, f)[0], ref.run(None, f)[0]
        assert np.abs(a - b).max() <= scale * 1.0001   # every difference is one output quantum
        same, total = same + int(np.count_nonzero(a == b)), total + a.size
    # not the 99% bar: x is a float graph input nothing quantizes, which onnxruntime's layer norm
    # reads in fp32 and the region stores as fp16 (boundary inputs, docs/simulator.md); the layer
    # norm on the fp32 x is bit-identical (test_qdq_split_layernorm_matches_onnxruntime: x a Conv's
    # output, as in SVTR). Measured 97.0% (S8 and U8), all differences one quantum.
    assert same >= 0.95 * total, f"{same} of {total} identical"


def _run_qdq(model, act, tmp_path, tag, seeds=(7, 11), batch=1):
    src = str(tmp_path / f"{tag}.onnx")
    onnx.save(model, src)
    qdq = quantize_static_qdq(src, str(tmp_path / f"{tag}_q.onnx"), _feeds(8, batch=batch), act=act,
                              per_channel=False)
    conv = onnx_mrvl.convert(qdq)
    out = tmp_path / f"{tag}_out"
    sess = onnx_mrvl.InferenceSession(conv.save(str(out)))
    ref = ort.InferenceSession(qdq, providers=["CPUExecutionProvider"])
    scale = float(next(onnx.numpy_helper.to_array(t) for t in onnx.load(qdq).graph.initializer
                       if t.name == "y_scale"))
    same = total = 0
    for seed in seeds:
        for f in _feeds(4, seed=seed, batch=batch):
            a, b = sess.run(None, f)[0], ref.run(None, f)[0]
            assert np.abs(a - b).max() <= scale * 1.0001   # every difference is one output quantum
            same, total = same + int(np.count_nonzero(a == b)), total + a.size
    nodes = json.load(open(f"{out}/mrvl_region_0-nodes.json"))["nodes"]
    ln = [n["attrs"] for n in nodes if n.get("attrs", {}).get("layer_name") == ["LayerNorm"]]
    return conv, same, total, ln


@pytest.mark.parametrize("act", ["s8", "u8"])
@pytest.mark.parametrize("split", [True, False])
def test_qdq_split_layernorm_matches_onnxruntime(act, split, tmp_path):
    """The split form (its mean summed over the strided axis, as onnxruntime does: mean_sum =
    "strided") and the form as exported: one region, one LayerNorm, every code onnxruntime's."""
    conv, same, total, ln = _run_qdq(_split_layernorm(conv=True, split=split), act, tmp_path, "c")
    assert len(conv.report.regions) == 1   # on the CPU only the input's Q -> DQ
    assert {d.op_type for d in conv.report.cpu_nodes()} == {"QuantizeLinear", "DequantizeLinear"}
    assert len(ln) == 1 and "inner_scales" in ln[0]
    assert ln[0].get("mean_sum") == (["strided"] if split else None)
    # a reader of program_version 2 would sum the mean in its own order: such a program says 3
    meta = load(f"{tmp_path}/c_out/mrvl_region_0.bin").meta
    assert meta["program_version"] == (3 if split else 1)
    # measured: S8 2560 of 2560, U8 2559 of 2560 in both forms (that one code differs before this
    # change too, and in the form as exported: not the layer norm's)
    assert same >= total - (1 if act == "u8" else 0), f"{same} of {total} identical"


def test_strided_mark_only_where_onnxruntime_sums_in_order(tmp_path):
    """The moved mean is marked when the axes before it are 1 (onnxruntime's in-order RK sum), not
    at batch 2 (its KRK path sums in another order, not followed: the last-axis order stays)."""
    conv, same, total, ln = _run_qdq(_split_layernorm(conv=True, batch=2), "s8", tmp_path, "b2", seeds=(7,), batch=2)
    assert len(conv.report.regions) == 1 and len(ln) == 1 and "mean_sum" not in ln[0]
    assert same >= 0.99 * total, f"{same} of {total} identical"


def test_fused_split_layernorm_reference_body_runs_in_plain_onnxruntime(tmp_path):
    """The fused model (Mrvl LayerNorm with mean_sum = "strided") runs through its reference body
    (the attribute names a summation order only), equal to the QDQ model's codes."""
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.legalize import legalize
    src = str(tmp_path / "f.onnx")
    onnx.save(_split_layernorm(conv=True), src)
    qdq = quantize_static_qdq(src, str(tmp_path / "q.onnx"), _feeds(8), act="s8", per_channel=False)
    fused = fuse(legalize(onnx.load(qdq)).model).model
    lns = [n for n in fused.graph.node if n.domain == "mrvl" and n.op_type == "LayerNorm"]
    assert len(lns) == 1
    assert {a.name: a for a in lns[0].attribute}["mean_sum"].s == b"strided"
    # onnxruntime against itself: both sessions with exact integer sums (testing/ort_sessions.exact_session), as on a
    # VNNI host; on AVX2 its U8S8 kernel clamps pairs, and it fuses the reference bodies onto other kernels
    ref = exact_session(qdq)
    got = exact_session(fused.SerializeToString())
    for f in _feeds(2, seed=7):
        np.testing.assert_array_equal(got.run(None, f)[0], ref.run(None, f)[0])


@pytest.mark.parametrize("act", ["s8", "u8"])
@pytest.mark.parametrize("mean_mul", [False, True])
def test_quark_paired_split_layernorm_is_one_layer(act, mean_mul, tmp_path):
    """The split form with a pair after every op (Quark: PP-OCRv4 rec's first LayerNorm; the
    Transpose's pair with its input's scale) and optionally Quark XINT8's ``ReduceMean -> Mul(k)``:
    center_before_transpose moves the mean and its steps after the Transpose, drops the Transpose's
    identity pair, and the layer norm is one Mrvl LayerNorm with eight points, every code onnxruntime's.
    Before: the mean, the Sub, the Transpose ... on the CPU, 2 regions."""
    from onnxruntime import quantization as q
    src = str(tmp_path / "f.onnx")
    onnx.save(_split_layernorm(conv=True), src)
    data = iter(_feeds(8))

    class Reader(q.CalibrationDataReader):
        def get_next(self):
            return next(data, None)
    qdq = str(tmp_path / "q.onnx")
    q.quantize_static(src, qdq, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=False,
                      weight_type=q.QuantType.QInt8,
                      activation_type=q.QuantType.QInt8 if act == "s8" else q.QuantType.QUInt8,
                      op_types_to_quantize=["Conv", "ReduceMean", "Sub", "Transpose", "Pow", "Add", "Sqrt",
                                            "Div", "Mul", "MatMul"])
    if mean_mul:
        from onnx_mrvl.testing.quark_qdq import with_mean_correction
        onnx.save(with_mean_correction(onnx.load(qdq)), qdq)
    conv = onnx_mrvl.convert(qdq)
    assert len(conv.report.regions) == 1
    assert {d.op_type for d in conv.report.cpu_nodes()} == {"QuantizeLinear", "DequantizeLinear"}
    out = tmp_path / "out"
    sess = onnx_mrvl.InferenceSession(conv.save(str(out)))
    ref = ort.InferenceSession(qdq, providers=["CPUExecutionProvider"])
    nodes = json.load(open(f"{out}/mrvl_region_0-nodes.json"))["nodes"]
    ln = [n["attrs"] for n in nodes if n.get("attrs", {}).get("layer_name") == ["LayerNorm"]]
    assert len(ln) == 1 and len(ln[0]["inner_scales"]) == 8 and ln[0].get("mean_sum") == ["strided"]
    assert ("mean_muls" in ln[0]) == mean_mul
    for f in _feeds(4, seed=7):
        np.testing.assert_array_equal(sess.run(None, f)[0], ref.run(None, f)[0])
