"""Detection and classification architectures (onnx_mrvl/testing/arch_detect_classify.py) written as real
exporters write them: every model converts under partitions "max" and "single", runs through
onnx_mrvl.InferenceSession (regions on the fp16 simulator) within fp16 tolerance of plain
onnxruntime on the original, and its convolutions run on the accelerator."""
import json

import numpy as np
import onnxruntime as ort
import pytest

from onnx_mrvl.testing import arch_detect_classify as arch
import onnx_mrvl
from onnx_mrvl import opset
from onnx_mrvl.testing.randomize_weights import random_inputs

_MODELS = {}


def model(name):
    if name not in _MODELS:
        _MODELS[name] = arch.ALL[name]()
    return _MODELS[name]


def run_ort(m, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def origins(node):
    for a in node.attribute:
        if a.name == "origin":
            return json.loads(a.s.decode())
    return []


@pytest.mark.parametrize("partition", ["max", "single"])
@pytest.mark.parametrize("name", sorted(arch.ALL))
def test_convert_and_run_matches_onnxruntime(name, partition, tmp_path):
    original = model(name)
    feeds = random_inputs(original, 1)
    ref = run_ort(original, feeds)
    res = onnx_mrvl.convert(original, partition=partition)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)
    assert len(got) == len(ref)
    for a, b in zip(ref, got):
        assert a.shape == b.shape, (name, a.shape, b.shape)
        err = float(np.max(np.abs(a.astype(np.float64) - b)))
        assert err <= 2e-2 * max(1.0, float(np.max(np.abs(a)))), (name, partition, err)
    # the convolutions run inside regions: all of them under "max"; under "single" (one region fed by
    # model inputs only) at least the stem, unless the model starts with a CPU op
    convs = {n.name for n in original.graph.node if n.op_type == "Conv"}
    offloaded = {o for n in res.model.graph.node if n.domain == opset.DOMAIN for o in origins(n)}
    if partition == "max":
        assert convs and convs <= offloaded, sorted(convs - offloaded)[:10]
    elif name in CPU_FIRST:
        assert len(res.subgraphs) <= 1
    else:
        assert len(res.subgraphs) == 1 and convs & offloaded


# models whose first op runs on the CPU (no region under "single"): ViT's 16x16/s16 patch embedding
# becomes a space-to-depth (6-D Transpose, CPU) + 1x1 conv; YOLOX's Focus stem starts with Slices
CPU_FIRST = {"vit_like", "yolox_like"}


ACCEL_OPS = {"Conv", "Gemm", "MaxPool", "AveragePool", "GlobalAveragePool", "Resize", "Concat", "Add", "Mul",
             "Sigmoid", "Reshape", "Flatten"}
# why such an op may still run on the CPU: detection decoding after a CPU Split (no conv in that
# region), ViT's class-token Concat with a constant
ALLOWED = ("minimum-work rule", "a constant operand")


@pytest.mark.parametrize("name", sorted(arch.ALL))
def test_no_needless_cpu_fallback(name):
    res = onnx_mrvl.convert(model(name))
    bad = [(d.node, d.op_type, d.reason) for d in res.report.cpu_nodes()
           if d.op_type in ACCEL_OPS and not any(a in d.reason for a in ALLOWED)]
    assert not bad, bad
    assert res.report.offload_fraction >= (0.85 if name == "vit_like" else 0.999)


def test_global_pool_split_into_16x16_windows_stays_on_the_accelerator():
    """legalize splits a 64x64 GlobalAveragePool into 16x16/s16 then 4x4/s4 AveragePools: a
    non-overlapping window strides as far as it is wide (up to max_pool_kernel), above max_stride."""
    res = onnx_mrvl.convert(model("efficientnet_like"))
    pools = [d for d in res.report if d.op_type == "GlobalAveragePool"]
    assert pools and all(d.placement == "accelerator" for d in pools), [(d.node, d.reason) for d in pools]
    assert len(res.subgraphs) == 1


def test_concat_of_cpu_tensors_on_nchw_data_feeding_a_conv(tmp_path):
    """YOLOv5's Focus stem: CPU Slices -> Concat (a Mrvl Concat on the NCHW data: one conversion
    after it instead of four before) -> LayoutTransform -> Conv2D. The compile step takes the
    Concat's storage from its out_layout (it used to call every 4-D Concat NHWC and reject the
    LayoutTransform, dropping the whole region to the CPU)."""
    original = model("yolox_like")
    res = onnx_mrvl.convert(original)
    assert len(res.subgraphs) == 1 and not res.report.warnings
    concat = next(d for d in res.report if d.node == "concat_21")
    assert concat.placement == "accelerator", concat.reason
    feeds = random_inputs(original, 2)
    ref = run_ort(original, feeds)[0]
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)[0]
    assert float(np.max(np.abs(ref - got))) <= 2e-2 * max(1.0, float(np.max(np.abs(ref))))


@pytest.mark.parametrize("name,regions", [("yolov8_like", 1), ("resnetd_like", 1)])
def test_channel_splits_stay_in_the_region(name, regions):
    """Channel Splits (YOLOv8's C2f, legalize's split of a grouped conv) are Mrvl Slice2D layers, so
    they no longer cut the accelerator graph: yolov8_like 6 -> 2 regions -> 1 since its DFL head's
    Softmax (before the DFL conv) is a Mrvl Softmax (its 3-D box/class Split is a Slice2D on
    [N, C, 1, A] since legalize's split_3d_to_4d), resnetd_like 4 -> 1."""
    res = onnx_mrvl.convert(model(name), partition="max")
    assert len(res.subgraphs) == regions
    cpu_splits = [d for d in res.report.cpu_nodes() if d.op_type == "Split"]
    assert not cpu_splits, [(d.node, d.reason) for d in cpu_splits]
