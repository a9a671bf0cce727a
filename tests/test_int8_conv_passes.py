"""int8 convs beyond the MAC array's per-pass limits (onnx_mrvl/int8_conv_passes.py, docs/fusion.md
"int8"): grouped convs that are not depthwise, kernels above ``max_kernel``, strides above
``max_stride`` (ViT patch embedding, audio front ends), dilations above ``max_dilation`` (DeepLab's ASPP). Structure: one region, no Conv / Q / DQ on
the CPU but the model's input pair, every Conv an int8 layer. Numbers: identical to onnxruntime's
run of the QDQ model (onnxruntime's quantize_static, S8 and U8)."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest

import onnx_mrvl
from onnx_mrvl import int8_conv_passes
from onnx_mrvl.sim import int8, int8_native
from onnx_mrvl.testing import int8_big_convs, int8_zoo, qdq_variants
from onnx_mrvl.testing.ort_sessions import exact_session

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")


def _quantized(name: str, act: str, folder) -> onnx.ModelProto:
    model = int8_big_convs.ALL[name](seed=3)
    src, dst = os.path.join(folder, f"{name}.onnx"), os.path.join(folder, f"{name}_{act}.onnx")
    onnx.save(model, src)
    int8_zoo.quantize_static_qdq(src, dst, [qdq_variants.feeds_for(model, k) for k in range(4)], act=act)
    return onnx.load(dst)


def _check_structure(result, q: onnx.ModelProto, layout: tuple = ()) -> None:
    """``layout``: CPU ops allowed at the region's boundary (the NCW <-> NHWC Transpose of a 1-D
    model's output, as for any QDQ Conv1d whose output pair is the model's)."""
    assert len(result.subgraphs) == 1
    nodes = result.model.graph.node
    pair_of_io = {i.name for i in q.graph.input} | {o.name for o in q.graph.output}
    pair_of_io |= {n.output[0] for n in nodes if n.op_type == "QuantizeLinear" and n.input[0] in pair_of_io}
    pair_of_io |= {n.input[0] for n in nodes if n.op_type == "DequantizeLinear" and n.output[0] in pair_of_io}
    for n in nodes:
        if n.op_type.startswith("Subgraph") or n.op_type in layout:
            continue
        assert n.op_type in ("QuantizeLinear", "DequantizeLinear"), n.op_type
        # only the model input's / output's Q -> DQ (the host's quantize / dequantize) stay on the CPU
        assert (set(n.input[:1]) | set(n.output)) & pair_of_io, n.name
    convs = [n.name for n in q.graph.node if n.op_type == "Conv"]
    for name in convs:
        d = result.report.decisions[name]
        assert d.placement == "accelerator" and d.precision == "int8", (name, d.placement, d.precision, d.reason)


@pytest.mark.parametrize("path", ["native", "numpy"])
@pytest.mark.parametrize("act", ["s8", "u8"])
@pytest.mark.parametrize("name", ["grouped_cnn", "patch_embed", "wave_front", "wave_front_1d", "big_kernels",
                                  "depthwise_large", "shared_input", "aspp"])
def test_int8_conv_beyond_limits_is_one_region_identical_to_onnxruntime(tmp_path, monkeypatch, name, act, path):
    if path == "numpy":      # the numpy kernels of sim/int8.py and sim/int8_float_conv.py
        monkeypatch.setattr(int8_native, "prepare", lambda layer: None)
    q = _quantized(name, act, str(tmp_path))
    result = onnx_mrvl.convert(q)
    _check_structure(result, q, ("Transpose",) if name.endswith("_1d") else ())
    out = str(tmp_path / "out")
    result.save(out)
    r = qdq_variants.compare(q, os.path.join(out, "model.onnx"), runs=3)
    assert r["identical"] == 1.0, r


def test_shared_input_convs_follow_onnxruntime_float_path(tmp_path):
    """S8: onnxruntime runs the 9x9 and grouped convs reading a shared DQ in float (MLAS SGEMM per
    group on the im2col columns); the layers take requant="float" and still match bit for bit."""
    from onnx_mrvl.ort_plan import ort_float_nodes
    q = _quantized("shared_input", "s8", str(tmp_path))
    assert {"k9", "g4"} <= set(ort_float_nodes(q, "Conv"))
    result = onnx_mrvl.convert(q)
    assert len(result.subgraphs) == 1 and [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    folder = str(tmp_path / "out")
    result.save(folder)
    nodes = json.load(open(os.path.join(folder, f"{result.subgraphs[0].name}-nodes.json")))["nodes"]
    convs = [n["attrs"] for n in nodes if n.get("attrs", {}).get("layer_name") == ["Conv2D"]]
    big = [a for a in convs if a["kernel_size"] == ["9", "9"]]
    grouped = [a for a in convs if a["groups"] == ["4"]]
    assert len(big) == 1 and len(grouped) == 1, [(a.get("kernel_size"), a.get("groups")) for a in convs]
    assert big[0].get("requant") == ["float"] and grouped[0].get("requant") == ["float"]
    r = qdq_variants.compare(q, os.path.join(folder, "model.onnx"), runs=4)
    assert r["identical"] == 1.0, r


def test_passes_of_the_lowering():
    big = dict(max_kernel=7, max_stride=8, max_channels=8192)
    vit = int8_conv_passes.plan([16, 16], [16, 16], [1, 1], [0, 0, 0, 0], 3, 1, **big)
    assert (vit.blocks, vit.kernel, vit.channels, vit.passes, vit.macs_per_output) == ((16, 16), (1, 1), 768, 1, 768)
    wave = int8_conv_passes.plan([1, 64], [1, 16], [1, 1], [0, 0, 0, 0], 1, 1, **big)
    assert (wave.blocks, wave.kernel, wave.channels, wave.passes) == ((1, 16), (1, 4), 16, 1)
    k9 = int8_conv_passes.plan([9, 9], [1, 1], [1, 1], [4, 4, 4, 4], 8, 1, **big)
    assert (k9.blocks, k9.tiles, k9.passes, k9.macs_per_output) == ((1, 1), (2, 2), 4, 81 * 8)
    s10 = int8_conv_passes.plan([11, 3], [10, 1], [1, 1], [3, 1, 3, 1], 16, 1, **big)   # e = 7 zero taps
    assert (s10.blocks, s10.kernel, s10.channels) == ((10, 1), (2, 3), 160)
    padded = int8_conv_passes.plan([1, 64], [1, 16], [1, 1], [0, 24, 0, 24], 1, 1, **big)
    assert (padded.kernel, padded.pads) == ((1, 5), (0, 2, 0, 2))     # 8 leading zero taps, 2 blocks of pads
    grouped = int8_conv_passes.plan([9, 3], [1, 1], [1, 1], [4, 1, 4, 1], 4, 8, **big)
    assert grouped.passes == 2 * 8
    assert "dilation" in int8_conv_passes.plan([3, 3], [16, 1], [2, 1], [0, 0, 0, 0], 4, 1, **big)
    assert "channels" in int8_conv_passes.plan([16, 16], [16, 16], [1, 1], [0] * 4, 64, 1, **dict(big, max_channels=8000))
    assert "depthwise" in int8_conv_passes.plan([3, 3], [16, 16], [1, 1], [0] * 4, 1, 8, **big, depthwise=True)
    aspp = int8_conv_passes.plan([3, 3], [1, 1], [12, 12], [12] * 4, 16, 1, **big, max_dilation=8)
    assert (aspp.tiles, aspp.passes, aspp.pads, aspp.macs_per_output) == ((3, 3), 9, (0, 0, 0, 0), 9 * 16)
    mixed = int8_conv_passes.plan([3, 3], [1, 1], [24, 6], [24, 6, 24, 6], 16, 1, **big, max_dilation=8)
    assert (mixed.tiles, mixed.pads) == ((3, 1), (0, 6, 0, 6))      # one tap per pass along H only
    assert "dilation" in int8_conv_passes.plan([3, 3], [16, 1], [12, 1], [12, 1, 12, 1], 4, 1, **big, max_dilation=8)
    dw = int8_conv_passes.plan([11, 11], [1, 1], [1, 1], [5] * 4, 1, 16, **big, depthwise=True)
    assert (dw.tiles, dw.passes) == ((2, 2), 4)     # tiles into the accumulator, not one pass per channel


def test_float_convs_beyond_limits_still_refused():
    """The fp16 patterns keep their limits (legalize splits those convs for them)."""
    from onnx_mrvl.fuse.patterns import build_conv
    from onnx_mrvl.graph_index import GraphIndex
    from onnx_mrvl.target import DEFAULT_TARGET
    m = onnx.shape_inference.infer_shapes(int8_big_convs.grouped_cnn(seed=1))
    g = GraphIndex(m)
    conv = next(n for n in m.graph.node if n.name == "g4")
    assert "not depthwise" in build_conv(g, conv, DEFAULT_TARGET)
    assert not isinstance(build_conv(g, conv, DEFAULT_TARGET, int8=True), str)


NATIVE_CASES = [   # kernel, strides, pads, dilation, groups, channels in, out
    ((16, 16), (16, 16), (0, 0, 0, 0), (1, 1), 1, 3, 32),        # ViT patch embedding
    ((1, 64), (1, 16), (0, 0, 0, 0), (1, 1), 1, 1, 16),          # audio front end
    ((9, 9), (1, 1), (4, 4, 4, 4), (1, 1), 1, 8, 16),            # 2x2 passes
    ((11, 3), (10, 1), (3, 1, 3, 1), (1, 1), 1, 16, 20),         # stride 10, begin pad 3
    ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8, 64, 64),           # ResNeXt 3x3, group 8
    ((3, 8), (2, 1), (1, 7, 1, 7), (1, 2), 2, 16, 8),            # grouped, dilated, kernel 8
    ((1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 4, 32, 48),           # grouped 1x1
    ((11, 11), (1, 1), (5, 5, 5, 5), (1, 1), 24, 24, 24),        # depthwise 11x11
    ((13, 9), (2, 1), (6, 4, 6, 4), (1, 1), 16, 16, 32),         # depthwise, multiplier 2
]


@pytest.mark.skipif(int8_native.lib() is None, reason=int8_native.why_disabled() or "no native int8")
@pytest.mark.parametrize("case", NATIVE_CASES)
def test_native_kernels_equal_numpy_beyond_limits(case):
    """The VNNI GEMM kernel (any kernel, stride, groups) and the fp32 float-path kernel against numpy."""
    from onnx_mrvl.sim.int8_float_conv import FloatPathConv2D
    k, st, pads, dil, groups, c, o = case
    rng = np.random.default_rng(sum(k) + c + o)
    kernel = rng.integers(-128, 128, (o, *k, c // groups)).astype(np.int8)
    bias = rng.integers(-3000, 3000, o).astype(np.int32)
    ws = (rng.random(o) * 0.01 + 0.001).astype(np.float32)
    for dt_in, dt_out, act in (("int8", "int8", "none"), ("uint8", "uint8", "relu")):
        zx = int(rng.integers(0, 256)) if dt_in == "uint8" else int(rng.integers(-40, 40))
        params = dict(in_scale=0.05, in_zero_point=zx, in_dtype=dt_in, out_scale=0.3 * np.sqrt(c), out_zero_point=3,
                      out_dtype=dt_out)
        lo, hi = int8.QRANGE[dt_in]
        x = ((rng.integers(lo, hi + 1, (2, 33, 70, c)) - zx) * np.float32(0.05)).astype(np.float32)
        x.reshape(-1)[::97] = rng.standard_normal(x.reshape(-1)[::97].size).astype(np.float32)   # off the grid
        geo = (kernel, bias, ws, params, st, pads, dil, groups, act)
        for layer in (int8.Int8Conv2D(*geo), FloatPathConv2D(*geo, bias_scale=(ws * np.float32(0.05)).astype(np.float32))):
            fn = int8_native.prepare(layer)
            if fn is None:
                continue
            got, ok = fn(x)
            ref, _ = layer.apply(x)
            assert ok
            np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("name", ["grouped_cnn", "big_kernels"])
def test_fused_model_runs_in_plain_onnxruntime(tmp_path, name):
    """The int8 Conv2D's reference body (Q -> DQ around a float Conv with the original groups,
    kernel and strides) reproduces the QDQ model in plain onnxruntime, within one output step."""
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.legalize import legalize
    q = _quantized(name, "u8", str(tmp_path))
    legal = legalize(q).model
    fused = fuse(getattr(legal, "model", legal)).model
    convs = [n for n in fused.graph.node if n.domain == "mrvl" and n.op_type == "Conv2D"]
    assert len(convs) == 3 and all(any(a.name == "precision" and a.s == b"int8" for a in n.attribute) for n in convs)
    step = qdq_variants.output_step(q, "output")
    for k in range(2):
        f = qdq_variants.feeds_for(q, k)
        # onnxruntime against itself: both sessions with exact integer sums (testing/ort_sessions.exact_session), as on a
        # VNNI host; on AVX2 its U8S8 kernel clamps pairs, and it fuses the reference bodies onto other kernels
        a = exact_session(q.SerializeToString()).run(None, f)[0]
        b = exact_session(fused.SerializeToString()).run(None, f)[0]
        assert np.abs(a - b).max() <= step * (1 + 1e-3)


def test_program_layers_carry_passes_and_the_perf_model_charges_them(tmp_path):
    from onnx_mrvl.artifact import load
    from onnx_mrvl.costmodel import perf_report
    q = _quantized("big_kernels", "s8", str(tmp_path))
    result = onnx_mrvl.convert(q)
    meta = load(result.subgraphs[0].binary).meta
    convs = [la for la in meta["layers"] if la["layer_name"] == "Conv2D"]
    # 9x9: 2x2 tiles; 11x3 stride 10: space-to-depth, 2x3 over 160 channels (7 leading zero taps), one
    # pass; 3x8 dilated group 2: 1x2 tiles x 2 groups
    assert [la.get("passes", 1) for la in convs] == [4, 1, 4]
    assert convs[0]["macs"] == 40 * 20 * 16 * 81 * 8 and convs[1]["macs"] == 4 * 20 * 16 * 2 * 3 * 160
    rep = perf_report(meta)
    overhead = int(meta["arch"]["layer_overhead_cycles"])
    for row, la in zip((r for r in rep.layers if r.layer_name == "Conv2D"), convs):
        assert row.cycles == max(row.compute_cycles, row.memory_cycles) + overhead * la.get("passes", 1)
