"""Q -> DQ pairs between data moves of codes on one grid (legalize qdq_move_chain): Swin's window
partition / reverse in a QDQ export is one region, equal to onnxruntime's run of the QDQ model."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing import qdq_transformers as qt


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_qdq_swin_windows_are_one_region_bit_exact(tmp_path, act):
    """Pad -> Reshape 6-D -> Transpose -> Reshape (window partition) and back, a pair after each:
    the inner pairs go, the 6-D moves fold as in the float model; before, the 6-D Transposes and
    their pairs stayed on the CPU (3 regions)."""
    m = qt.convert_and_measure("swin_windows", str(tmp_path), act)
    assert m["regions"] == 1 and not m["cpu"], m["cpu"]
    agree = m["agreement"]["output"]
    assert agree["identical"] == 1.0 and agree["steps"] == 0.0, agree


def _chain(scales, pad_value=None, rank: int = 6):
    """x -> Q/DQ(s0) -> Transpose -> Q/DQ(s1) -> Reshape (or Pad(pad_value)) -> Q/DQ(s2) -> Relu, on a
    6-D tensor (a window partition's view) or, ``rank`` 4, a 4-D one."""
    shape = [1, 2, 3, 2, 2, 4] if rank == 6 else [1, 3, 4, 8]
    perm = [0, 1, 3, 2, 4, 5] if rank == 6 else [0, 2, 1, 3]
    moved = [shape[p] for p in perm]
    out = list(moved)
    out[2] += 1 if pad_value is not None else 0
    inits = [numpy_helper.from_array(np.array(moved[:2] + [moved[2] * moved[3]] + moved[4:] + [1] * (rank - 5),
                                              np.int64), "shape"),
             numpy_helper.from_array(np.array([0, 0, 1] + [0] * (2 * rank - 3), np.int64), "pads"),
             numpy_helper.from_array(np.array(pad_value or 0, np.float32), "pv")]
    nodes = []

    def pair(t, k):
        inits.extend([numpy_helper.from_array(np.array(scales[k], np.float32), f"s{k}"),
                      numpy_helper.from_array(np.array(3, np.int8), f"z{k}")])
        nodes.extend([helper.make_node("QuantizeLinear", [t, f"s{k}", f"z{k}"], [f"q{k}"]),
                      helper.make_node("DequantizeLinear", [f"q{k}", f"s{k}", f"z{k}"], [f"d{k}"])])
        return f"d{k}"
    nodes.append(helper.make_node("Transpose", [pair("x", 0)], ["t"], perm=perm))
    t = pair("t", 1)
    if pad_value is not None:
        nodes.append(helper.make_node("Pad", [t, "pads", "pv"], ["m"]))
    else:
        nodes.append(helper.make_node("Reshape", [t, "shape"], ["m"]))
        out = [int(v) for v in numpy_helper.to_array(inits[0])]
    nodes.append(helper.make_node("Relu", [pair("m", 2)], ["y"]))
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("scales, pad_value, rank, kept", [
    ((0.05, 0.05, 0.05), None, 6, 2),    # one grid: the 6-D pair between Transpose and Reshape goes
    ((0.05, 0.07, 0.07), None, 6, 3),    # the Transpose's pair changes the grid: it stays
    ((0.05, 0.05, 0.05), 0.0, 6, 2),     # a zero pad keeps the grid
    ((0.05, 0.05, 0.05), 0.33, 6, 3),    # a pad value off the grid: the pair stays
    ((0.05, 0.05, 0.05), None, 4, 3),    # a 4-D pair stays (fuse's Requantize: exact, no work)
])
def test_qdq_move_chain_removes_only_identity_pairs(scales, pad_value, rank, kept):
    model = _chain(scales, pad_value, rank)
    out = legalize(model).model
    assert sum(n.op_type == "QuantizeLinear" for n in out.graph.node) == kept
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    got = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_array_equal(got, ref)
