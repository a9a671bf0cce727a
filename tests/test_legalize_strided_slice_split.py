"""legalize's strided_slice_split: a stepped Slice that is not every k-th row of a whole axis (LeViT's
``x.view(B, 7, 7, C)[:, ::2, ::2]``: 7 is odd) -> a step-1 run, every k-th row of it, the last row
alone, Concat. Exact against onnxruntime (array-equal after legalize), one region, within the fp16
bound."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

import onnx_mrvl
from onnx_mrvl.legalize import legalize


def _i64(v):
    return np.array(v, np.int64)


def _subsample(grid=7, c=16, cuts=((1, 0, None, 2), (2, 0, None, 2)), seed=0) -> onnx.ModelProto:
    """tokens [1, grid^2, C] -> MatMul -> Reshape [1, grid, grid, C] -> one stepped Slice per cut
    (axis, start, end, step) -> Reshape [1, -1, C] -> MatMul (LeViT's attention subsample)."""
    r = np.random.default_rng(seed)
    inits = [nh.from_array((r.standard_normal((c, c)) * 0.3).astype(np.float32), "w1"),
             nh.from_array((r.standard_normal((c, c)) * 0.3).astype(np.float32), "w2"),
             nh.from_array(_i64([1, grid, grid, c]), "grid"), nh.from_array(_i64([1, -1, c]), "flat")]
    nodes = [helper.make_node("MatMul", ["t", "w1"], ["h"], name="fc1"),
             helper.make_node("Reshape", ["h", "grid"], ["v0"])]
    for i, (axis, start, end, step) in enumerate(cuts):
        names = [f"c{i}_{k}" for k in ("s", "e", "a", "st")]
        for name, v in zip(names, (start, 2 ** 63 - 1 if end is None else end, axis, step)):
            inits.append(nh.from_array(_i64([v]), name))
        nodes.append(helper.make_node("Slice", [f"v{i}"] + names, [f"v{i + 1}"], name=f"slice{i}"))
    nodes += [helper.make_node("Reshape", [f"v{len(cuts)}", "flat"], ["f"]),
              helper.make_node("MatMul", ["f", "w2"], ["y"], name="fc2")]
    g = helper.make_graph(nodes, "subsample",
                          [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, grid * grid, c])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _run(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


CASES = {
    "levit_7x7_every_2nd": dict(),                                        # rows 0, 2, 4, 6 of 7: last alone
    "odd_start_fits": dict(cuts=((1, 1, None, 2), (2, 1, None, 2))),      # rows 1, 3, 5 of 7: no Concat
    "start_beyond_step": dict(grid=8, cuts=((1, 3, None, 2),)),            # rows 3, 5, 7 of 8
    "early_end": dict(grid=9, cuts=((2, 0, 5, 3),)),                      # rows 0, 3 of 9 (end 5)
    "negative_start_step_3": dict(grid=10, cuts=((1, -8, None, 3),)),      # rows 2, 5, 8 of 10
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_strided_slice_on_the_accelerator(name, tmp_path):
    m = _subsample(**CASES[name])
    grid = CASES[name].get("grid", 7)
    feeds = {"t": np.random.default_rng(1).standard_normal((1, grid * grid, 16)).astype(np.float32)}
    ref = _run(m, feeds)
    leg = legalize(m)
    assert any(rule == "strided_slice_split" for rule, _, _ in leg.log)
    np.testing.assert_array_equal(_run(leg.model, feeds), ref)          # only data moves: exact
    res = onnx_mrvl.convert(m)
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes(), [d.op_type for d in res.report.cpu_nodes()]
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path / "out"))).run(None, feeds)[0]
    assert got.shape == ref.shape and np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()


def test_image_slice_read_by_a_conv_is_left_to_the_strided_conv():
    """x[:, :, ::2, ::2] of an odd NCHW image read by a Conv: fuse's strided depthwise conv takes it."""
    r = np.random.default_rng(2)
    inits = [nh.from_array((r.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32), "w"),
             nh.from_array(_i64([0]), "s"), nh.from_array(_i64([7]), "e"), nh.from_array(_i64([2]), "a"),
             nh.from_array(_i64([2]), "k")]
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a", "k"], ["h"], name="cut"),
             helper.make_node("Conv", ["h", "w"], ["y"], pads=[1] * 4)]
    g = helper.make_graph(nodes, "img", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 7, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    leg = legalize(m)
    assert not any(rule == "strided_slice_split" for rule, _, _ in leg.log)
    assert any(rule == "strided_slice_split" and "strided depthwise conv" in why for rule, _, why in leg.report.skipped)
