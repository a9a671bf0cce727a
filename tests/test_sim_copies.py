"""Concat, Slice2D and nearest Resize as strided-copy records of the static plan (kind 12, _native_conv.c copy_blocks):
they run inside run_steps, so they no longer end a native segment, and move the same bits as numpy."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.sim import Simulator, native, static_records

pytestmark = pytest.mark.skipif(not native.on(), reason=f"native kernels off: {native.why_disabled()}")


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def _model(seed=3):
    """Conv -> Split (two channel Slice2D) -> Conv on one half; a Slice of channels 4..8; a channel
    Concat of four tensors and a constant (YOLOv8's C2f block); a 1x1 conv; a nearest Resize by
    2 x 3 (YOLO's upsampling); a Concat along H."""
    rng = np.random.default_rng(seed)

    def w(n, s):
        return numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
    ints = {"sp": [8, 8], "s0": [4], "s1": [8], "ax": [1]}
    scales = numpy_helper.from_array(np.array([1, 1, 2, 3], np.float32), "sc")
    inits = [w("w0", (16, 8, 3, 3)), w("w1", (8, 8, 3, 3)), w("w2", (16, 38, 1, 1)), w("k", (1, 2, 12, 12))] + [
        numpy_helper.from_array(np.array(v, np.int64), n) for n, v in ints.items()] + [scales]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Split", ["c0", "sp"], ["a", "b"], axis=1),
             helper.make_node("Conv", ["a", "w1"], ["ca"], pads=[1, 1, 1, 1]),
             helper.make_node("Slice", ["c0", "s0", "s1", "ax"], ["sl"]),
             helper.make_node("Concat", ["ca", "b", "k", "c0", "sl"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w2"], ["y0"]),
             helper.make_node("Resize", ["y0", "", "sc"], ["u"], mode="nearest"),
             helper.make_node("Concat", ["u", "u"], ["y"], axis=2)]
    g = helper.make_graph(nodes, "copies", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 48, 36])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def same_bits_three_ways(monkeypatch, model, flag: str):
    """``model`` (all offloaded, one region) run by the static plan with its records, layer by layer,
    and by the static plan with ``static_records.<flag>`` off: the same bits, within the practical
    fp16 bound of onnxruntime (docs/simulator.md). Returns both plans' segments (records on, off)."""
    import onnxruntime as ort
    r = onnx_mrvl.convert(model)
    assert [n.op_type for n in r.model.graph.node if not n.op_type.startswith("Subgraph")] == []
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    sim = Simulator(r.subgraphs[0].binary)
    got = sim.run([x])[0]
    dynamic = sim._run_dynamic(sim._bind_inputs([x]))[0]              # layer by layer: the numpy kernels
    monkeypatch.setattr(static_records, flag, False)
    plain = Simulator(r.subgraphs[0].binary)
    np.testing.assert_array_equal(bits(got), bits(plain.run([x])[0]))
    np.testing.assert_array_equal(bits(got), bits(dynamic))
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {model.graph.input[0].name: x})[0]
    assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()
    return sim._static.segments, plain._static.segments


def test_concat_slice_and_resize_run_inside_one_native_segment_with_numpys_bits(monkeypatch):
    segs, before = same_bits_three_ways(monkeypatch, _model(), "COPIES")
    assert [s[0] for s in segs] == ["native"]                         # nothing ends the segment
    kinds = {e.step.spec.layer_name: e.rec[0] for e in segs[0][1]
             if e.step.spec.layer_name in ("Concat", "Slice2D", "Resize")}
    assert kinds == {"Concat": 12, "Slice2D": 12, "Resize": 12}
    assert any(e.step.spec.params.get("const_positions") for e in segs[0][1])   # the constant operand
    assert sum(s[0] == "python" for s in before) == 6                 # the numpy steps of before


@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_copy_blocks_moves_every_bit_over_any_thread_split(nthreads):
    """NaN payloads, infinities, signed zeros and denormals are moved, never converted; blocks of
    different row counts and strides split over threads land where numpy's copies put them."""
    rng = np.random.default_rng(7)
    a = native.empty((3, 50, 40, 24))
    a.view(np.uint32)[...] = rng.integers(0, 2 ** 32, a.shape, dtype=np.uint32)   # every bit pattern
    b = native.empty((3, 50, 40, 8))
    b.view(np.uint32)[...] = rng.integers(0, 2 ** 32, b.shape, dtype=np.uint32)
    out = native.empty((3, 50, 40, 38))
    out.view(np.uint32)[...] = 0x7FC00123
    rows = 3 * 50 * 40
    desc = np.array([(a.ctypes.data + 4 * 5, out.ctypes.data, rows, 19, 24, 38),   # a[..., 5:24]
                     (b.ctypes.data, out.ctypes.data + 4 * 19, rows, 8, 8, 38),     # b
                     (a.ctypes.data, out.ctypes.data + 4 * 27, rows, 10, 24, 38),   # a[..., :10]
                     (b.ctypes.data + 4 * 6, out.ctypes.data + 4 * 37, rows, 1, 8, 38)], np.int64)   # b[..., 6]
    assert native.lib().copy_blocks(desc.ctypes.data, len(desc), nthreads) == 1
    want = np.concatenate([a[..., 5:24], b, a[..., :10], b[..., 6:7]], axis=3)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))


def test_overlapping_or_mismatched_copies_keep_the_numpy_step():
    """_copies refuses a slice range past the input and an output overlapping an operand."""
    class Plan:
        shapes = {0: (1, 4, 4, 8), 1: (1, 4, 4, 6)}
        ptrs = {0: 4096, 1: 4096 + 4 * 8}
    step = type("S", (), {})()
    step.ins, step.out = (0,), 1
    step.spec = type("Spec", (), {"params": {"axis": 3, "start": 2, "end": 8}})()
    e = type("E", (), {"keep": (), "rec": None})()
    assert not static_records._copies(Plan, e, step, False) and e.rec is None       # overlaps its input
    Plan.ptrs = {0: 4096, 1: 1 << 20}
    assert static_records._copies(Plan, e, step, False) and e.rec[0] == 12
    step.spec.params = {"axis": 3, "start": 4, "end": 10}
    e.rec = None
    assert not static_records._copies(Plan, e, step, False) and e.rec is None       # past the input's end
