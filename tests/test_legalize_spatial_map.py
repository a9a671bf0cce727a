"""legalize gathered_spatial_map: dynamo's adaptive_avg_pool2d at a non-dividing size (a GatherND of
windows, masked_fill, sums, a division) -> one MatMul by a constant; one accelerator region."""
from __future__ import annotations

import pytest
import numpy as np
import onnxruntime as ort
from onnx import helper

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import compare, make_model, op_types

mk = helper.make_node
F16_TOL = 1e-2


def windows(size: int, out: int):
    """torch's decomposition: start, the largest window's indices (clamped) and the mask beyond each."""
    start = np.array([i * size // out for i in range(out)])
    end = np.array([-(-(i + 1) * size // out) for i in range(out)])
    k = int((end - start).max())
    idx = start[:, None] + np.arange(k)[None]
    return np.minimum(idx, size - 1), idx >= end[:, None], (end - start)


def adaptive_pool_model(c=8, h=4, w=4, oh=6, ow=6, mixes_planes=False):
    """Conv -> adaptive avg pool (h, w) -> (oh, ow) as dynamo writes it -> Conv 1x1."""
    rng = np.random.default_rng(0)
    ih, mh, ch = windows(h, oh)
    iw, mw, cw = windows(w, ow)
    kh, kw = ih.shape[1], iw.shape[1]
    idx = np.zeros((oh, kh, ow, kw, 2), np.int64)
    idx[..., 0] = ih[:, :, None, None]
    idx[..., 1] = iw[None, None, :, :]
    nodes = [mk("Conv", ["x", "w0"], ["a"], name="conv0", pads=[1, 1, 1, 1]),
             mk("Transpose", ["a"], ["t"], name="to_hwnc", perm=[2, 3, 0, 1]),
             mk("GatherND", ["t", "idx"], ["g"], name="windows"),
             mk("Transpose", ["g"], ["gt"], name="to_nc", perm=[4, 5, 0, 1, 2, 3]),
             mk("Where", ["mask_h", "zero", "gt"], ["m1"], name="fill_h"),
             mk("Where", ["mask_w", "zero", "m1"], ["m2"], name="fill_w"),
             mk("ReduceSum", ["m2", "axes"], ["s"], name="sum", keepdims=0),
             mk("Div", ["s", "counts"], ["p"], name="divide")]
    inits = {"w0": (rng.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32), "idx": idx,
             "mask_h": mh[:, :, None, None], "mask_w": mw, "zero": np.array(0.0, np.float32),
             "axes": np.array([-3, -1], np.int64), "counts": (ch[:, None] * cw[None, :]).astype(np.float32),
             "w1": (rng.standard_normal((5, c, 1, 1)) * 0.3).astype(np.float32)}
    if mixes_planes:   # channels reversed too: the same shape, but not one map per (n, c) plane
        nodes.append(mk("Gather", ["p", "reverse"], ["p2"], name="reverse_channels", axis=1))
        inits["reverse"] = np.arange(c)[::-1].astype(np.int64)
    nodes.append(mk("Conv", ["p2" if mixes_planes else "p", "w1"], ["y"], name="conv1"))
    return make_model(nodes, [("x", [1, 3, h, w])], ["y"], inits, opset=18)


def test_adaptive_pool_gathers_become_one_matmul(tmp_path):
    m = adaptive_pool_model()
    out = legalize(m).model
    ops = op_types(out)
    assert not {"GatherND", "Where", "ReduceSum", "Transpose"} & set(ops), ops
    assert ops.count("MatMul") == 1 or ops.count("Gemm") == 1, ops
    assert compare(m, out) <= 1e-5
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 3, 4, 4)).astype(np.float32)}
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    res = onnx_mrvl.convert(m)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes()
    assert np.isfinite(got[0]).all()
    assert float(np.abs(ref[0] - got[0]).max()) <= F16_TOL * float(np.abs(ref[0]).max())


def test_uniform_windows_and_larger_plane():
    """8 x 8 -> 3 x 3 (windows of 3 or 4) and 8 x 8 -> 5 x 5; each one MatMul, exact in fp32."""
    for oh in (3, 5):
        m = adaptive_pool_model(c=4, h=8, w=8, oh=oh, ow=oh)
        out = legalize(m).model
        assert "GatherND" not in op_types(out)
        assert compare(m, out, seed=3) <= 1e-5


def test_map_mixing_planes_is_refused():
    """A Gather reversing the channels inside the subgraph: the measured map is checked, the
    rule refuses it (whatever later rules make of the pieces, the result stays exact)."""
    from onnx_mrvl.legalize.rules import gathered_spatial_map as rule
    from onnx_mrvl.legalize.graph import Graph
    from onnx_mrvl.legalize import shapes
    m = adaptive_pool_model(mixes_planes=True)
    g = Graph(adaptive_pool_model(mixes_planes=True))
    shapes.infer(g, list(m.graph.input), list(m.graph.output))
    node = next(n for n in g.nodes_of(("GatherND",)))
    reason = rule.check(rule.match(node, g), g, None)
    assert reason is not None and "mixes planes" in reason
    assert compare(m, legalize(m).model) <= 1e-5


def unrolled_pool_model(c=4, h=32, w=32, oh=3, ow=3):
    """The same pool as torch 2.13's dynamo writes it for PSPNet at 256 (a 32 x 32 map, bins of 3):
    one Gather per window offset of H, one per offset of W on each, an Add chain over the k_h * k_w
    offsets, a division: ~300 nodes."""
    rng = np.random.default_rng(0)
    ih, mh, ch = windows(h, oh)
    iw, mw, cw = windows(w, ow)
    kh, kw = ih.shape[1], iw.shape[1]
    idx = np.zeros((oh, kh, ow, kw, 2), np.int64)
    idx[..., 0] = ih[:, :, None, None]
    idx[..., 1] = iw[None, None, :, :]
    nodes = [mk("Conv", ["x", "w0"], ["a"], name="conv0", pads=[1, 1, 1, 1]),
             mk("Transpose", ["a"], ["t"], name="to_hwnc", perm=[2, 3, 0, 1]),
             mk("GatherND", ["t", "idx"], ["g"], name="windows"),
             mk("Transpose", ["g"], ["gt"], name="to_nc", perm=[4, 5, 0, 1, 2, 3]),
             mk("Where", ["mask_h", "zero", "gt"], ["m1"], name="fill_h"),
             mk("Where", ["mask_w", "zero", "m1"], ["m2"], name="fill_w")]
    inits = {"w0": (rng.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32), "idx": idx,
             "mask_h": mh[:, :, None, None], "mask_w": mw, "zero": np.array(0.0, np.float32),
             "counts": (ch[:, None] * cw[None, :]).astype(np.float32),
             "w1": (rng.standard_normal((5, c, 1, 1)) * 0.3).astype(np.float32)}
    acc = None
    for i in range(kh):
        inits[f"i{i}"] = np.array(i, np.int64)
        nodes.append(mk("Gather", ["m2", f"i{i}"], [f"r{i}"], name=f"row{i}", axis=3))
        for j in range(kw):
            nodes.append(mk("Gather", [f"r{i}", f"i{j}"], [f"s{i}_{j}"], name=f"col{i}_{j}", axis=4))
            if acc is None:
                acc = f"s{i}_{j}"
            else:
                nodes.append(mk("Add", [acc, f"s{i}_{j}"], [f"acc{i}_{j}"], name=f"add{i}_{j}"))
                acc = f"acc{i}_{j}"
    nodes += [mk("Div", [acc, "counts"], ["p"], name="divide"), mk("Conv", ["p", "w1"], ["y"], name="conv1")]
    return make_model(nodes, [("x", [1, 3, h, w])], ["y"], inits, opset=18)


def test_unrolled_window_sums_of_hundreds_of_nodes(tmp_path):
    """12 x 12 window offsets unrolled (300 nodes, beyond the former bound of 64): one MatMul,
    exact in fp32; the converted model is one region within the fp16 bound."""
    m = unrolled_pool_model()
    assert len(m.graph.node) > 250
    out = legalize(m).model
    ops = op_types(out)
    assert not {"GatherND", "Gather", "Where", "Add", "Transpose"} & set(ops), ops
    assert compare(m, out, seed=2) <= 1e-5
    feeds = {"x": np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    res = onnx_mrvl.convert(m)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes()
    assert float(np.abs(ref[0] - got[0]).max()) <= F16_TOL * float(np.abs(ref[0]).max())


def _qdq(m, tmp_path, act="s8"):
    """onnxruntime's quantize_static of ``m`` (QDQ, per-channel weights, MinMax on seeded inputs)."""
    from onnxruntime import quantization as q
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    data = iter([{"x": np.random.default_rng(s).standard_normal(shape).astype(np.float32)} for s in range(4)])

    class Reader(q.CalibrationDataReader):
        def get_next(self):
            return next(data, None)
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / f"q_{act}.onnx")
    import onnx
    onnx.save(m, src)
    q.quantize_static(src, dst, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                      activation_type=q.QuantType.QInt8 if act == "s8" else q.QuantType.QUInt8,
                      weight_type=q.QuantType.QInt8)
    return dst, shape


@pytest.mark.parametrize("build,act", [(lambda: unrolled_pool_model(c=8), "s8"),
                                       (lambda: adaptive_pool_model(c=8, h=8, w=8, oh=3, ow=3), "u8")])
def test_qdq_pool_is_one_int8_region_identical(tmp_path, build, act):
    """The same pools quantized by onnxruntime (QDQ: ``Transpose -> Q -> DQ -> GatherND``, a Q after
    every selected offset / the mean): the pair is taken on x and each result is an int8 MatMul of
    0 / 1 codes with the window's coefficient as scale, ending in the result's own Q. Was: the
    selection on the CPU in fp32 between two regions."""
    import onnx
    path, shape = _qdq(build(), tmp_path, act)
    m = onnx.load(path)
    out = legalize(m).model
    ops = op_types(out)
    assert not {"GatherND", "Gather", "Where", "Transpose"} & set(ops), ops
    int8_maps = [t for t in out.graph.initializer if t.name.endswith("_codes") and t.data_type == onnx.TensorProto.INT8]
    assert int8_maps
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    res = onnx_mrvl.convert(path)
    ours = onnx_mrvl.InferenceSession(res.save(str(tmp_path / "conv")))
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes(), res.report.cpu_nodes()
    same = total = 0
    for s in range(10, 13):
        feeds = {"x": np.random.default_rng(s).standard_normal(shape).astype(np.float32)}
        a, b = ours.run(None, feeds)[0], sess.run(None, feeds)[0]
        same, total = same + int(np.count_nonzero(a == b)), total + a.size
    assert same == total, f"{same} of {total} identical"
