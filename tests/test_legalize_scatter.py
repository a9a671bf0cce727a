"""legalize scatter_to_concat (+ remove_noop's Expand to x's own shape): PyTorch's in-place slice
update ``boxes[..., :2] += ref`` as TorchScript (element index tuples) and dynamo (``slice_scatter``:
the axis moved first, rows scattered) export it -> Concat of the kept slices and the update."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import compare, make_model, op_types

mk = helper.make_node
F16_TOL = 1e-2
Q, D = 20, 4


def box_head(form: str, cols=(0, 2)):
    """x [1, Q, 64] -> FC -> boxes [1, Q, 4]; boxes[..., a:b] += ref; sigmoid."""
    rng = np.random.default_rng(0)
    a, b = cols
    inits = {"w": (rng.standard_normal((64, D)) * 0.2).astype(np.float32),
             "ref": rng.standard_normal((1, Q, b - a)).astype(np.float32),
             "starts": np.array([a], np.int64), "ends": np.array([b], np.int64), "axes": np.array([2], np.int64)}
    nodes = [mk("MatMul", ["x", "w"], ["boxes"], name="bbox_fc"),
             mk("Slice", ["boxes", "starts", "ends", "axes"], ["part"], name="part"),
             mk("Add", ["part", "ref"], ["moved"], name="add_ref")]
    if form == "ts":   # every element's (0, q, c) index; the update expanded to its own shape
        grid = np.stack(np.meshgrid(np.arange(1), np.arange(Q), np.arange(a, b), indexing="ij"), -1)
        inits.update(idx=grid.astype(np.int64), eshape=np.array([1, Q, b - a], np.int64))
        nodes += [mk("Expand", ["moved", "eshape"], ["upd"], name="expand_as"),
                  mk("ScatterND", ["boxes", "idx", "upd"], ["out"], name="scatter")]
    elif form == "dynamo":   # slice_scatter: the last axis first, rows a..b-1 scattered
        inits.update(idx=np.arange(a, b).reshape(-1, 1).astype(np.int64))
        nodes += [mk("Transpose", ["boxes"], ["bt"], name="axis_first", perm=[2, 0, 1]),
                  mk("Transpose", ["moved"], ["ut"], name="upd_first", perm=[2, 0, 1]),
                  mk("ScatterND", ["bt", "idx", "ut"], ["st"], name="scatter"),
                  mk("Transpose", ["st"], ["out"], name="axis_back", perm=[1, 2, 0])]
    else:              # columns 0 and 2: no block of one axis
        grid = np.stack(np.meshgrid(np.arange(1), np.arange(Q), np.array([0, 2]), indexing="ij"), -1)
        inits.update(idx=grid.astype(np.int64))
        nodes += [mk("ScatterND", ["boxes", "idx", "moved"], ["out"], name="scatter")]
    nodes.append(mk("Sigmoid", ["out"], ["y"], name="sigmoid"))
    return make_model(nodes, [("x", [1, Q, 64])], ["y"], inits, opset=17)


@pytest.mark.parametrize("form,cols", [("ts", (0, 2)), ("ts", (2, 4)), ("ts", (1, 3)), ("dynamo", (0, 2))])
def test_in_place_slice_update_becomes_concat(form, cols, tmp_path):
    m = box_head(form, cols)
    out = legalize(m).model
    assert not {"ScatterND", "Expand"} & set(op_types(out)), op_types(out)
    assert "Concat" in op_types(out)
    assert compare(m, out) == 0.0
    feeds = {"x": np.random.default_rng(1).standard_normal((1, Q, 64)).astype(np.float32)}
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    res = onnx_mrvl.convert(m)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)[0]
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes(), [d.op_type for d in res.report.cpu_nodes()]
    assert np.isfinite(got).all() and float(np.abs(got - ref).max()) <= F16_TOL * float(np.abs(ref).max())


def test_scattered_columns_are_left_alone():
    m = box_head("columns", (0, 2))
    res = legalize(m)
    assert "ScatterND" in op_types(res.model)
    assert any(name == "scatter_to_concat" and "no block" in why for name, _, why in res.report.skipped)
    assert compare(m, res.model) == 0.0
