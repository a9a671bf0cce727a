"""Bilinear Resize of a feature map on the accelerator (mrvl.resize_bilinear): structure, reference
body (plain onnxruntime), simulator numbers and the perf model's cost, against onnxruntime."""
import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

import onnx_mrvl
from onnx_mrvl import opset
from onnx_mrvl.artifact import load
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from onnx_mrvl.sim.resize_linear import resize_bilinear
from onnx_mrvl.target import Target

R = np.random.default_rng(4)
MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def net(ctm, hw=(9, 12), out=(33, 25), scales=None, opset_version=13):
    """conv -> Resize(linear) -> conv, the Resize given output sizes or (float) scales."""
    inits = [nh.from_array((R.standard_normal([8, 4, 3, 3]) * 0.2).astype(np.float32), "W"),
             nh.from_array((R.standard_normal([4, 8, 3, 3]) * 0.2).astype(np.float32), "W2")]
    if scales:
        inits.append(nh.from_array(np.array([1, 1, *scales], np.float32), "sc"))
        ins = ["c", "", "sc"]
    else:
        inits.append(nh.from_array(np.array([1, 8, *out], np.int64), "sz"))
        ins = ["c", "", "", "sz"]
    nodes = [h.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             h.make_node("Resize", ins, ["r"], name="resize", mode="linear", coordinate_transformation_mode=ctm),
             h.make_node("Conv", ["r", "W2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, *hw])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset_version)])
    m.ir_version = 8
    return m


def _ort(m, x):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("ctm", MODES)
@pytest.mark.parametrize("kw", [dict(), dict(scales=(2.0, 2.5)), dict(out=(5, 6))], ids=["sizes", "scales", "down"])
def test_bilinear_on_the_accelerator(ctm, kw, tmp_path):
    m = net(ctm, **kw)
    x = R.standard_normal([1, 4, 9, 12]).astype(np.float32)
    want = _ort(m, x)
    fused = fuse(legalize(m))
    rs = [n for n in fused.model.graph.node if n.domain == opset.DOMAIN and n.op_type == "Resize"]
    assert len(rs) == 1 and fused.decisions["resize"].composite == "mrvl.resize_bilinear"
    a = opset.node_attrs(rs[0])
    assert a["mode"] == "linear" and a["coordinate_mode"] == ctm
    assert np.abs(_ort(fused.model, x) - want).max() <= 1e-5 * np.abs(want).max()    # reference body
    result = onnx_mrvl.convert(m)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    got = onnx_mrvl.InferenceSession(result.save(str(tmp_path))).run(None, {"x": x})[0]
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-2 * np.abs(want).max()
    layer = next(n for n in result.subgraphs[0].nodes_json["nodes"] if n.get("attrs", {}).get("method") == ["linear"])
    assert layer["attrs"]["coordinate_transformation_mode"] == [ctm]
    meta = load(result.subgraphs[0].binary).meta
    resize = next(layer for layer in meta["layers"] if layer["layer_name"] == "Resize")
    oh, ow = a["sizes"]
    assert resize["macs"] == 4 * oh * ow * 8            # 4 MACs per output value (perf model)


def test_reference_path_runs_in_plain_onnxruntime(tmp_path):
    m = net("half_pixel")
    x = R.standard_normal([1, 4, 9, 12]).astype(np.float32)
    result = onnx_mrvl.convert(m, reference=True)
    got = _ort(result.model, x)
    want = _ort(m, x)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_kernel_matches_onnx_resize_per_mode():
    """The simulator kernel alone against onnxruntime's Resize on NHWC data (fp16-exact inputs)."""
    x = R.standard_normal([2, 7, 5, 3]).astype(np.float16).astype(np.float32)
    for ctm in MODES:
        for out in ((15, 11), (3, 2), (1, 1), (7, 5)):
            ref = h.make_graph([h.make_node("Resize", ["x", "", "", "sz"], ["y"], mode="linear",
                                            coordinate_transformation_mode=ctm)], "g",
                               [h.make_tensor_value_info("x", T.FLOAT, list(x.shape))],
                               [h.make_tensor_value_info("y", T.FLOAT, None)],
                               [nh.from_array(np.array([2, *out, 3], np.int64), "sz")])
            mm = h.make_model(ref, opset_imports=[h.make_opsetid("", 13)])
            mm.ir_version = 8
            want = ort.InferenceSession(mm.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            got, ok = resize_bilinear(x, out, ctm)
            assert ok and got.shape == want.shape
            assert np.abs(got - want).max() <= 1e-3 * max(np.abs(want).max(), 1), (ctm, out)


@pytest.mark.parametrize("attrs, reason", [
    (dict(mode="cubic"), "Resize mode 'cubic'"),
    (dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize"), "coordinate mode 'tf_crop_and_resize'"),
])
def test_other_modes_stay_on_the_cpu(attrs, reason):
    m = net("half_pixel")
    rs = m.graph.node[1]
    del rs.attribute[:]
    rs.attribute.extend(h.make_attribute(k, v) for k, v in attrs.items())
    if "tf_crop_and_resize" in json.dumps(attrs):
        rs.input[1] = "roi"
        m.graph.initializer.append(nh.from_array(np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32), "roi"))
    d = fuse(legalize(m)).decisions["resize"]
    assert d.placement == "cpu" and reason in d.reason


@pytest.mark.parametrize("ctm", MODES)
@pytest.mark.parametrize("kw", [dict(out=(80, 128)), dict(scales=(16.0, 32.0)), dict(out=(37, 100))],
                         ids=["x16_x32", "scales", "odd"])
def test_segmentation_head_upsample_on_the_accelerator(ctm, kw, tmp_path):
    """A segmentation head's final x16 / x32 bilinear upsample (DeepLabV3 output stride 16, FCN-32s,
    BiSeNet, U^2-Net): beyond the nearest repeat limit 8, within resize_linear_max_scale 32; one
    region, every coordinate mode within the fp16 bound, 4 MACs per output value."""
    m = net(ctm, hw=(5, 4), **kw)
    x = R.standard_normal([1, 4, 5, 4]).astype(np.float32)
    want = _ort(m, x)
    result = onnx_mrvl.convert(m)
    assert result.report.decisions["resize"].composite == "mrvl.resize_bilinear"
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    got = onnx_mrvl.InferenceSession(result.save(str(tmp_path))).run(None, {"x": x})[0]
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-2 * np.abs(want).max()
    meta = load(result.subgraphs[0].binary).meta
    resize = next(layer for layer in meta["layers"] if layer["layer_name"] == "Resize")
    assert resize["macs"] == 4 * want.shape[2] * want.shape[3] * 8


def test_scale_above_the_limit_stays():
    m = net("half_pixel", hw=(4, 4), out=(160, 8))
    d = fuse(legalize(m)).decisions["resize"]
    assert d.placement == "cpu" and "scale 160/4 exceeds the limit 32" in d.reason
    d = fuse(legalize(net("half_pixel", hw=(4, 4), out=(40, 8))), Target(resize_linear_max_scale=8)).decisions["resize"]
    assert d.placement == "cpu" and "scale 40/4 exceeds the limit 8" in d.reason
