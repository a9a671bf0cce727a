"""A layer norm written out op by op (ReduceMean, Sub, Pow | Mul, ReduceMean, Add eps, Sqrt, Div, * gamma,
+ beta) with Q -> DQ pairs between its elementwise steps: onnxruntime's quantizer pairs ``d`` and
``d * d`` when the square is a Mul (a quantized op), and every step when the toolkit quantizes every
op (``op_types_to_quantize``; AMD Quark's placement). fuse/qdq_layernorm.py takes the pairs after the
mean, the difference, the square and the square root too (eight interior points): one Mrvl LayerNorm,
element for element equal to onnxruntime's run of the QDQ model. Before, the Sub / ReduceMean / Div
stayed on the CPU between regions."""
from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_mrvl.testing import qdq_transformers as qt

ALL_STEPS = ("Add", "Mul", "Sub", "Div", "Sqrt", "Pow", "ReduceMean")


def written_layernorm(square: str = "mul", tokens: int = 16, d: int = 32, seed: int = 0) -> onnx.ModelProto:
    """x + bias (a quantized producer) -> the layer norm over the last axis written out -> y."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "ax"), numpy_helper.from_array(np.float32(1e-5), "eps"),
             numpy_helper.from_array(np.float32(2), "two"),
             numpy_helper.from_array((0.2 * rng.standard_normal(d)).astype(np.float32), "bias"),
             numpy_helper.from_array((1 + 0.2 * rng.standard_normal(d)).astype(np.float32), "gamma"),
             numpy_helper.from_array((0.2 * rng.standard_normal(d)).astype(np.float32), "beta")]
    mk = helper.make_node
    nodes = [mk("Add", ["x", "bias"], ["a"]), mk("ReduceMean", ["a", "ax"], ["m"], keepdims=1), mk("Sub", ["a", "m"], ["d"]),
             mk("Mul", ["d", "d"], ["d2"]) if square == "mul" else mk("Pow", ["d", "two"], ["d2"]),
             mk("ReduceMean", ["d2", "ax"], ["v"], keepdims=1), mk("Add", ["v", "eps"], ["ve"]), mk("Sqrt", ["ve"], ["sd"]),
             mk("Div", ["d", "sd"], ["n"]), mk("Mul", ["n", "gamma"], ["ng"]), mk("Add", ["ng", "beta"], ["y"])]
    g = helper.make_graph(nodes, "written_layernorm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, tokens, d])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _quantize(model, path: str, act: str, ops=None) -> str:
    from onnxruntime import quantization as q
    src = path + ".float.onnx"
    onnx.save(model, src)
    data = iter([qt.feeds(model, 100 + i) for i in range(4)])

    class Reader(q.CalibrationDataReader):
        def get_next(self):
            return next(data, None)
    q.quantize_static(src, path, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                      weight_type=q.QuantType.QInt8,
                      activation_type=q.QuantType.QInt8 if act == "s8" else q.QuantType.QUInt8,
                      **({"op_types_to_quantize": list(ops)} if ops else {}))
    return path


def _measure(tmp_path, square: str, act: str, ops=None, seed: int = 0):
    import onnx_mrvl
    qpath = _quantize(written_layernorm(square, seed=seed), str(tmp_path / "q.onnx"), act, ops)
    result = onnx_mrvl.convert(qpath, force=True)   # one layer norm alone: below the minimum-work rule
    result.save(str(tmp_path / "out"), overwrite=True)
    cpu = collections.Counter(n.op_type for n in result.model.graph.node if not n.op_type.startswith("Subgraph"))
    agree = qt.agreement(qpath, str(tmp_path / "out" / "model.onnx"), runs=3)["y"]
    return qpath, len(result.subgraphs), dict(cpu), agree


@pytest.mark.parametrize("act", ["s8", "u8"])
@pytest.mark.parametrize("square", ["mul", "pow"])
def test_layernorm_paired_after_every_step_is_one_layer_bit_exact(tmp_path, square, act):
    """Pairs after the mean, difference, square, variance, + eps, sqrt, quotient, * gamma (every op
    quantized): one LayerNorm with 8 interior points; before, 5 regions (both ReduceMeans, the Sub
    and the Div on the CPU)."""
    qpath, regions, cpu, agree = _measure(tmp_path, square, act, ALL_STEPS)
    assert sum(n.op_type == "QuantizeLinear" for n in onnx.load(qpath).graph.node) == 11
    assert regions == 1 and not cpu, cpu
    assert agree["identical"] == 1.0 and agree["steps"] == 0.0, agree


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_layernorm_mul_square_default_quantizer_is_one_layer(tmp_path, act):
    """onnxruntime's default op types with ``d * d``: pairs on d and on the square (the Mul's) as well
    as var, vareps, norm, scaled; before, 2 regions (the first ReduceMean and the Sub on the CPU)."""
    _, regions, cpu, agree = _measure(tmp_path, "mul", act)
    assert regions == 1 and not cpu, cpu
    assert agree["identical"] == 1.0 and agree["steps"] == 0.0, agree


def test_layernorm_eight_points_reference_body(tmp_path):
    """The fused LayerNorm with 8 interior points runs in plain onnxruntime through its reference
    body, equal to the QDQ model."""
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.legalize import legalize
    qpath = _quantize(written_layernorm("mul", seed=1), str(tmp_path / "q.onnx"), "u8", ALL_STEPS)
    legal = legalize(onnx.load(qpath))
    fused = fuse(getattr(legal, "model", legal)).model
    lns = [n for n in fused.graph.node if n.domain == "mrvl" and n.op_type == "LayerNorm"]
    assert len(lns) == 1
    scales = list({x.name: x for x in lns[0].attribute}["inner_scales"].floats)
    assert len(scales) == 8 and all(s > 0 for s in scales), scales
    for seed in range(3):
        x = qt.feeds(fused, seed)
        ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"]).run(None, x)[0]
        got = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
        np.testing.assert_array_equal(got, ref)


def _two_layernorms(c: int = 4, h: int = 8, w: int = 16, seed: int = 0) -> onnx.ModelProto:
    """x -> LN1 -> CumSum (no accelerator op) -> LN2 -> depthwise Conv: both written-out layer norms
    (over the last axis) read one ``eps`` initializer (one DequantizeLinear the quantizer shares)."""
    rng = np.random.default_rng(seed)
    mk = helper.make_node
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "ax"), numpy_helper.from_array(np.float32(1e-5), "eps"),
             numpy_helper.from_array(np.array(-1, np.int64), "cax"),
             numpy_helper.from_array((rng.standard_normal((c, 1, 3, 3)) * 0.3).astype(np.float32), "wd")]
    nodes = []
    for k, (x, y) in enumerate((("x", "y1"), ("e", "y2")), 1):
        inits += [numpy_helper.from_array((s + 0.2 * rng.standard_normal(w)).astype(np.float32), f"{r}{k}")
                  for r, s in (("bias", 0), ("gamma", 1), ("beta", 0))]
        p = f"l{k}_"
        nodes += [mk("Add", [x, f"bias{k}"], [p + "a"]), mk("ReduceMean", [p + "a", "ax"], [p + "m"], keepdims=1),
                  mk("Sub", [p + "a", p + "m"], [p + "d"]), mk("Mul", [p + "d", p + "d"], [p + "d2"]),
                  mk("ReduceMean", [p + "d2", "ax"], [p + "v"], keepdims=1), mk("Add", [p + "v", "eps"], [p + "ve"]),
                  mk("Sqrt", [p + "ve"], [p + "sd"]), mk("Div", [p + "d", p + "sd"], [p + "n"]),
                  mk("Mul", [p + "n", f"gamma{k}"], [p + "ng"]), mk("Add", [p + "ng", f"beta{k}"], [y])]
        if k == 1:
            nodes.append(mk("CumSum", ["y1", "cax"], ["e"]))
    nodes.append(mk("Conv", ["y2", "wd"], ["y"], group=c, pads=[1, 1, 1, 1]))
    g = helper.make_graph(nodes, "two_layernorms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, h, w])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_dropped_layernorm_keeps_the_shared_eps_dq_of_the_next(tmp_path, act):
    """The first layer norm's region (no conv / FC) is dropped by the minimum-work rule; the eps
    DequantizeLinear it shares (legalize copies it per reader, one origin) must not take the second
    layer norm to the CPU with it (placement_records.newly_cpu leaves a constant's DQ out). Before: both
    layer norms on the CPU (4 ReduceMeans)."""
    import onnx_mrvl
    qpath = _quantize(_two_layernorms(), str(tmp_path / "q.onnx"), act, ALL_STEPS + ("Conv",))
    result = onnx_mrvl.convert(qpath)
    result.save(str(tmp_path / "out"), overwrite=True)
    cpu = collections.Counter(n.op_type for n in result.model.graph.node if not n.op_type.startswith("Subgraph"))
    assert len(result.subgraphs) == 1 and cpu["ReduceMean"] == 2 and cpu["Div"] == 1, cpu
    agree = qt.agreement(qpath, str(tmp_path / "out" / "model.onnx"), runs=3)["y"]
    assert agree["identical"] == 1.0 and agree["steps"] == 0.0, agree


def _with_mean_correction(qpath: str) -> str:
    from onnx_mrvl.testing.quark_qdq import with_mean_correction
    out = qpath[:-5] + "_k.onnx"
    onnx.save(with_mean_correction(onnx.load(qpath)), out)
    return out


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_layernorm_with_mean_correction_is_one_layer_bit_exact(tmp_path, act):
    """``ReduceMean -> Mul(0.99609375) -> Q/DQ`` for both means (Quark XINT8's PP-OCRv4 rec): one
    LayerNorm with ``mean_muls``, element for element equal to onnxruntime's run and its reference
    body; before, 4 regions (the first ReduceMean, the Sub and the Div on the CPU)."""
    import onnx_mrvl
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.legalize import legalize
    qpath = _with_mean_correction(_quantize(written_layernorm("pow", seed=2), str(tmp_path / "q.onnx"), act, ALL_STEPS))
    result = onnx_mrvl.convert(qpath, force=True)
    result.save(str(tmp_path / "out"), overwrite=True)
    cpu = collections.Counter(n.op_type for n in result.model.graph.node if not n.op_type.startswith("Subgraph"))
    assert len(result.subgraphs) == 1 and not cpu, cpu
    agree = qt.agreement(qpath, str(tmp_path / "out" / "model.onnx"), runs=3)["y"]
    assert agree["identical"] == 1.0 and agree["steps"] == 0.0, agree
    fused = fuse(getattr(legalize(onnx.load(qpath)), "model", None) or legalize(onnx.load(qpath))).model
    ln = [n for n in fused.graph.node if n.domain == "mrvl" and n.op_type == "LayerNorm"]
    assert len(ln) == 1 and list({x.name: x for x in ln[0].attribute}["mean_muls"].floats) == [0.99609375] * 2
    for seed in range(3):
        x = qt.feeds(fused, seed)
        ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"]).run(None, x)[0]
        got = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("mean_muls", [False, True])
def test_interior_points_are_charged_to_the_vector_unit(tmp_path, mean_muls):
    """Perf model (emit/transformer_layers.py): a layer norm with interior quantization points costs
    LAYERNORM_OPS_PER_ELEMENT plus QUANT_POINT_OPS for each point on a per-element value, with or
    without the strided mean sum or the mean factors (the charge once sat inside those branches)."""
    import onnx_mrvl
    from onnx_mrvl.artifact import load
    from onnx_mrvl.costmodel import vector_ops
    from onnx_mrvl.emit.transformer_layers import ELEMENT_POINTS, LAYERNORM_OPS_PER_ELEMENT, QUANT_POINT_OPS
    from onnx_mrvl.target import DEFAULT_TARGET, norm_blocked_extra_ops
    qpath = _quantize(written_layernorm("mul", seed=1), str(tmp_path / "q.onnx"), "u8", ALL_STEPS)
    result = onnx_mrvl.convert(_with_mean_correction(qpath) if mean_muls else qpath, force=True)
    meta = load(result.subgraphs[0].binary).meta
    shapes = {int(t["id"]): list(t["shape"]) for t in meta["tensors"]}
    lns = [lay for lay in meta["layers"] if lay["layer_name"] == "LayerNorm"]
    assert len(lns) == 1
    p = lns[0]["params"]
    assert "mean_sum" not in p and ("mean_muls" in p) == mean_muls and len(p["inner_scales"]) == 8
    points = sum(1 for k in ELEMENT_POINTS["layernorm8"] if p["inner_scales"][k] != 0)
    assert points == 4
    shape = shapes[lns[0]["outputs"][0]]
    blocked = norm_blocked_extra_ops(shape[p["axis"]], DEFAULT_TARGET)
    assert vector_ops(lns[0], shapes) == int(np.prod(shape)) * (LAYERNORM_OPS_PER_ELEMENT + QUANT_POINT_OPS * points + blocked)
