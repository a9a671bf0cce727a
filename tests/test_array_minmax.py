"""array_minmax.py: the min and max of an immutable weight are read once (fuse's check and emit's
Constants-JSON entry read the same FC kernels), the same values as numpy's, never stale."""
import gc

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl import array_minmax
from onnx_mrvl.array_minmax import minmax


def _over_bytes(values: np.ndarray) -> np.ndarray:
    return np.frombuffer(values.tobytes(), values.dtype).reshape(values.shape)


def test_the_values_are_numpys():
    rng = np.random.default_rng(0)
    for v in (rng.standard_normal((300, 400), dtype=np.float32),
              np.where(rng.random(1 << 17) < 1e-4, np.nan, 1.0).astype(np.float32),   # NaN propagates
              rng.integers(-128, 128, 1 << 17, dtype=np.int8)):
        a = _over_bytes(v)
        for _ in range(2):   # read, then remembered
            lo, hi = minmax(a)
            assert lo.dtype == v.dtype and np.array_equal([lo, hi], [v.min(), v.max()], equal_nan=True)


def test_an_immutable_array_is_read_once_and_forgotten_with_it(monkeypatch):
    a = _over_bytes(np.arange(1 << 17, dtype=np.float32))
    assert minmax(a) == (0, (1 << 17) - 1)
    ref, lo, hi = array_minmax._SEEN[id(a)]
    assert ref() is a
    array_minmax._SEEN[id(a)] = (ref, np.float32(-7), np.float32(7))   # the second call reads the entry
    assert minmax(a) == (-7, 7)
    key = id(a)
    del a, ref
    gc.collect()
    assert key not in array_minmax._SEEN


def test_an_array_that_can_change_is_read_each_time():
    w = np.arange(1 << 17, dtype=np.float32)                 # writeable
    assert minmax(w) == (0, (1 << 17) - 1)
    w[5] = -3
    assert minmax(w) == (-3, (1 << 17) - 1)
    ro = w.view()
    ro.flags.writeable = False                                # read-only, but its memory is w's
    w[6] = -9
    assert minmax(ro)[0] == -9 and id(w) not in array_minmax._SEEN and id(ro) not in array_minmax._SEEN


def test_the_constants_json_entry_of_a_kept_fc_kernel():
    """The FC kernel fuse checked is the array emit writes: the entry's min / max are its own."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((512, 256), dtype=np.float32)
    w[3, 4], w[100, 7] = -5.25, 6.5
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], "fc", transB=1)], "fc",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    consts = onnx_mrvl.convert(model).subgraphs[0].consts_json
    entry = next(e for e in consts.values() if int(np.prod(e["shape"])) == w.size)
    assert (entry["min"], entry["max"]) == ("-5.25", "6.5")
