"""Legalization regressions from the ONNX backend conformance run: non-tensor values pass
through, the graph interface is kept, control-flow conditions stay computed, Dropout masks."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.rules import fold_constants
from onnx_mrvl.legalize.testing import legalize_and_compare, make_model, op_types

mk = helper.make_node
F = TensorProto.FLOAT


def _session(model, optimize=True):
    so = ort.SessionOptions()
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _model(nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def test_sequence_and_optional_values_pass_through():
    seq_t = helper.make_tensor_sequence_value_info("seq", F, [2, 3])
    opt_t = helper.make_value_info("opt", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(F, [4])))
    m = _model([mk("Identity", ["seq"], ["seq_out"], name="id_seq"),
                mk("SequenceAt", ["seq", "zero"], ["t"], name="at"),
                mk("Relu", ["t"], ["r"], name="relu"),
                mk("Dropout", ["r"], ["y"], name="drop"),
                mk("Identity", ["opt"], ["opt_out"], name="id_opt")],
               [seq_t, opt_t],
               [helper.make_tensor_sequence_value_info("seq_out", F, [2, 3]),
                helper.make_tensor_value_info("y", F, None),
                helper.make_value_info("opt_out", opt_t.type)],
               [numpy_helper.from_array(np.array(0, np.int64), "zero")], opset=16)
    res = legalize(m)
    out, report = res.model, res.report
    onnx.checker.check_model(out)
    # declared types of the non-tensor inputs and outputs are untouched
    assert out.graph.input[0].type == m.graph.input[0].type
    assert out.graph.input[1].type == m.graph.input[1].type
    assert out.graph.output[0].type == m.graph.output[0].type
    assert out.graph.output[2].type == m.graph.output[2].type
    assert [d.dim_value for d in out.graph.output[1].type.tensor_type.shape.dim] == [2, 3]
    assert "Dropout" not in op_types(out)
    assert not {vi.name for vi in out.graph.value_info} & {"seq_out", "opt_out"}
    rng = np.random.default_rng(0)
    seq = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2)]
    opt = rng.standard_normal(4).astype(np.float32)
    got = _session(out).run(None, {"seq": seq, "opt": opt})
    want = _session(m).run(None, {"seq": seq, "opt": opt})
    assert len(got[0]) == 2 and all(np.array_equal(a, b) for a, b in zip(got[0], seq))
    np.testing.assert_array_equal(got[1], np.maximum(seq[0], 0))
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], opt)


def _scan_sum_opset8():
    body = helper.make_graph(
        [mk("Add", ["sum_in", "next"], ["sum_out"]), mk("Identity", ["sum_out"], ["scan_out"])],
        "body", [helper.make_tensor_value_info("sum_in", F, [2]),
                 helper.make_tensor_value_info("next", F, [2])],
        [helper.make_tensor_value_info("sum_out", F, [2]),
         helper.make_tensor_value_info("scan_out", F, [2])])
    return _model([mk("Scan", ["", "initial", "x"], ["y", "z"], num_scan_inputs=1, body=body)],
                  [helper.make_tensor_value_info("initial", F, [1, 2]),
                   helper.make_tensor_value_info("x", F, [1, 3, 2])],
                  [helper.make_tensor_value_info("y", F, [1, 2]),
                   helper.make_tensor_value_info("z", F, [1, 3, 2])], opset=8)


def test_opset_upgrade_that_changes_the_interface_is_refused():
    m = _scan_sum_opset8()
    # the onnx Scan 8 -> 9 adapter drops the batch axis of the graph inputs
    conv = onnx.version_converter.convert_version(m, 13)
    assert len(conv.graph.input[1].type.tensor_type.shape.dim) == 2
    res = legalize(m)
    out, report = res.model, res.report
    assert report.opset == (8, 8)
    for a, b in zip(list(m.graph.input) + list(m.graph.output),
                    list(out.graph.input) + list(out.graph.output)):
        assert a.name == b.name and a.type == b.type, (a, b)
    # the Scan body is untouched (its Identity stays)
    body = out.graph.node[0].attribute[0].g
    assert [n.op_type for n in body.node] == ["Add", "Identity"]
    x = np.arange(6, dtype=np.float32).reshape(1, 3, 2)
    init = np.array([[1, 2]], np.float32)
    y, z = _session(out).run(None, {"initial": init, "x": x})
    np.testing.assert_array_equal(z, init[:, None, :] + np.cumsum(x, axis=1))
    np.testing.assert_array_equal(y, z[:, -1])


def _if_condition_model():
    """AffineGrid-function shape: If(Size(size) == 4) yields a [1]-shaped bound that feeds Range
    (the spec wants a scalar; onnxruntime runs it as long as it cannot see the shape)."""
    def branch(name, src):
        return helper.make_graph([mk("Identity", [src], [f"d_{name}"])], name, [],
                                 [helper.make_tensor_value_info(f"d_{name}", TensorProto.INT64,
                                                                None)])
    c = {"four": np.array(4, np.int64), "zero": np.array(0, np.int64),
         "one": np.array(1, np.int64), "three_1d": np.array([3], np.int64)}
    return _model([mk("Constant", [], ["five_1d"], value=numpy_helper.from_array(
                       np.array([5], np.int64))),
                   mk("Size", ["size"], ["ndim"], name="size_of"),
                   mk("Equal", ["ndim", "four"], ["is_2d"], name="is_2d"),
                   mk("If", ["is_2d"], ["d"], name="if", then_branch=branch("then", "three_1d"),
                      else_branch=branch("else", "five_1d")),
                   mk("Range", ["zero", "d", "one"], ["steps"], name="range"),
                   mk("Cast", ["steps"], ["y"], name="cast", to=F)],
                  [helper.make_tensor_value_info("size", TensorProto.INT64, [4])],
                  [helper.make_tensor_value_info("y", F, None)],
                  [numpy_helper.from_array(v, k) for k, v in c.items()], opset=13)


def test_control_flow_condition_not_folded(monkeypatch):
    m = _if_condition_model()
    feeds = {"size": np.array([2, 5, 6, 7], np.int64)}
    np.testing.assert_array_equal(_session(m).run(None, feeds)[0], [0, 1, 2])
    res = legalize(m)
    out, report = res.model, res.report
    ops = op_types(out)
    assert "Size" in ops and "Equal" in ops and "Constant" not in ops
    assert not any(n.op_type == "Constant" for n in out.graph.node)
    np.testing.assert_array_equal(_session(out).run(None, feeds)[0], [0, 1, 2])  # loads, runs
    # what it guards against: a folded condition makes onnxruntime inline the branch and reject
    # the Range at load time
    monkeypatch.setattr(fold_constants, "_in_condition_cone", lambda node, g: False)
    folded = legalize(m).model
    assert "Equal" not in op_types(folded)
    with pytest.raises(Exception, match="Range"):
        _session(folded)


def test_dropout_used_mask_becomes_ones():
    m = make_model([mk("Relu", ["x"], ["r"], name="relu"),
                    mk("Dropout", ["r", "ratio"], ["d", "mask"], name="drop"),
                    mk("Cast", ["mask"], ["mf"], name="cast", to=F),
                    mk("Mul", ["d", "mf"], ["y"], name="mul")],
                   [("x", [2, 4])], ["y"], {"ratio": np.array(0.4, np.float32)})
    out, log = legalize_and_compare(m, tol=0.0)
    assert "Dropout" not in op_types(out)
    assert any(r == "remove_dropout" and "constant ones [2, 4]" in d for r, _, d in log)
    mask = [t for t in out.graph.initializer if t.name == "mask"]
    assert not mask or numpy_helper.to_array(mask[0]).all()


def test_dropout_mask_graph_output_static_and_dynamic():
    mask_vi = helper.make_tensor_value_info("mask", TensorProto.BOOL, None)
    static = _model([mk("Relu", ["x"], ["r"], name="relu"),
                     mk("Dropout", ["r"], ["y", "mask"], name="drop")],
                    [helper.make_tensor_value_info("x", F, [3, 4])],
                    [helper.make_tensor_value_info("y", F, None), mask_vi])
    out = legalize(static).model
    assert op_types(out) == ["Relu", "ConstantOfShape"]
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    y, mask = _session(out).run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert mask.dtype == np.bool_ and mask.shape == (3, 4) and mask.all()
    # data-dependent shape (after NonZero): the mask comes from ConstantOfShape(Shape(x))
    dyn = _model([mk("NonZero", ["x"], ["nz"], name="nz"),
                  mk("Cast", ["nz"], ["f"], name="cast", to=F),
                  mk("Dropout", ["f"], ["y", "mask"], name="drop")],
                 [helper.make_tensor_value_info("x", F, [3, 4])],
                 [helper.make_tensor_value_info("y", F, None), mask_vi])
    out = legalize(dyn).model
    assert "Dropout" not in op_types(out) and {"Shape", "ConstantOfShape"} <= set(op_types(out))
    x[0, :] = 0
    y, mask = _session(out).run(None, {"x": x})
    np.testing.assert_array_equal(y, np.nonzero(x))
    assert mask.dtype == np.bool_ and mask.shape == y.shape and mask.all()


def test_dropout_training_mode_true_is_kept():
    m = make_model([mk("Relu", ["x"], ["r"], name="relu"),
                    mk("Dropout", ["r", "ratio", "train"], ["y", "mask"], name="drop"),
                    mk("Cast", ["mask"], ["z"], name="cast", to=F)],
                   [("x", [2, 4])], ["y", "z"],
                   {"ratio": np.array(0.5, np.float32), "train": np.array(True)})
    res = legalize(m)
    out, report = res.model, res.report
    assert "Dropout" in op_types(out)
    assert ("remove_dropout", "drop", "training_mode is true") in report.skipped



def test_constants_feeding_a_condition_only_through_shape_are_folded():
    """torchvision detection exports: If(ReduceProd(Shape(boxes)) == 0) in the post-processing. The
    condition reads the boxes' shape, not their values: the constant arithmetic upstream of the
    boxes (the input transform, the backbone's weights) is folded as usual."""
    def branch(name, value):
        return helper.make_graph([mk("Constant", [], [f"d_{name}"], value=numpy_helper.from_array(
            np.array([value], np.float32)))], name, [], [helper.make_tensor_value_info(f"d_{name}", F, None)])
    c = {"k1": np.full(4, 0.5, np.float32), "k2": np.full(4, 1.5, np.float32), "zero": np.array(0, np.int64)}
    m = _model([mk("Add", ["k1", "k2"], ["k"], name="const_add"),
                mk("Mul", ["x", "k"], ["boxes"], name="mul"),
                mk("Shape", ["boxes"], ["s"], name="shape"),
                mk("ReduceProd", ["s"], ["n"], name="numel", keepdims=0),
                mk("Equal", ["n", "zero"], ["empty"], name="is_empty"),
                mk("If", ["empty"], ["d"], name="if", then_branch=branch("then", 0.0),
                   else_branch=branch("else", 1.0)),
                mk("Mul", ["boxes", "d"], ["y"], name="out")],
               [helper.make_tensor_value_info("x", F, [2, 4])], [helper.make_tensor_value_info("y", F, None)],
               [numpy_helper.from_array(v, k) for k, v in c.items()], opset=13)
    res = legalize(m)
    out, report = res.model, res.report
    ops = op_types(out)
    assert "Add" not in ops                                  # folded
    assert {"Shape", "ReduceProd", "Equal", "If"} <= set(ops)   # the condition itself is not
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(_session(out).run(None, {"x": x})[0], x * 2)


def _fp16_cnn(io_type):
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm with float16 weights. ``io_type`` float16:
    a ``model.half()`` export; float32: onnxconverter-common keep_io_types (Cast in and out)."""
    r = np.random.default_rng(5)
    H = TensorProto.FLOAT16
    inits = [numpy_helper.from_array((r.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(np.float16), n)
             for n, s in (("w", (8, 3, 3, 3)), ("b", (8,)), ("fw", (5, 8)), ("fb", (5,)))]
    nodes = [mk("Conv", ["xh", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             mk("Relu", ["c"], ["r"], name="relu"),
             mk("GlobalAveragePool", ["r"], ["p"], name="gap"),
             mk("Flatten", ["p"], ["f"], name="flat"),
             mk("Gemm", ["f", "fw", "fb"], ["yh"], name="fc", transB=1)]
    if io_type == H:
        nodes[0].input[0] = "x"
        nodes[-1].output[0] = "y"
    else:
        nodes = [mk("Cast", ["x"], ["xh"], name="in_cast", to=H)] + nodes + \
            [mk("Cast", ["yh"], ["y"], name="out_cast", to=F)]
    return _model(nodes, [helper.make_tensor_value_info("x", io_type, [1, 3, 8, 8])],
                  [helper.make_tensor_value_info("y", io_type, [1, 5])], inits, opset=13)


@pytest.mark.parametrize("io_type", [TensorProto.FLOAT16, TensorProto.FLOAT])
def test_float16_model_is_computed_in_float32_and_offloaded(io_type, tmp_path):
    import onnx_mrvl
    m = _fp16_cnn(io_type)
    res = legalize(m)
    out, report = res.model, res.report
    assert [i.type.tensor_type.elem_type for i in out.graph.input] == [io_type]
    assert [o.type.tensor_type.elem_type for o in out.graph.output] == [io_type]
    assert not any(t.data_type == TensorProto.FLOAT16 for t in out.graph.initializer)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(helper.tensor_dtype_to_np_dtype(io_type))}
    ref = _session(m).run(None, feeds)[0].astype(np.float32)
    got = _session(out).run(None, feeds)[0]
    assert got.dtype == ref.dtype or io_type == TensorProto.FLOAT16
    assert np.max(np.abs(got.astype(np.float32) - ref)) <= 2e-3 * np.max(np.abs(ref))
    res = onnx_mrvl.convert(m)
    assert res.report.offload_fraction == 1.0
    cpu = [n.op_type for n in res.model.graph.node if n.domain != "mrvl"]
    assert cpu == (["Cast", "Cast"] if io_type == TensorProto.FLOAT16 else [])
    sim = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)[0]
    assert np.max(np.abs(sim.astype(np.float32) - ref)) <= 1e-2 * np.max(np.abs(ref))
