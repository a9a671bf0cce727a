"""emit(): the Nodes-JSON / Constants-JSON pair in TVM's Marvell field layout (docs/json-format.md)."""
import base64
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.emit import emit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "fashion_mnist.onnx")


def mixed_model(seed=0, batch=1):
    """Conv+LeakyRelu, 1x1 conv and depthwise branches summed, Add of a constant, Concat, MaxPool,
    Conv+SiLU, Flatten, Gemm: every multi-input and constant-operand case of the JSON."""
    rng = np.random.default_rng(seed)
    inits = []

    def w(name, shape, scale=0.3):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name
    n = [
        helper.make_node("Conv", ["input", w("c1w", [8, 3, 3, 3]), w("c1b", [8])], ["c1"], name="conv_a",
                         pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["c1"], ["r1"], name="leaky_a", alpha=0.1),
        helper.make_node("Conv", ["r1", w("c2w", [8, 8, 1, 1])], ["c2"], name="conv_b"),
        helper.make_node("Conv", ["r1", w("c3w", [8, 1, 3, 3]), w("c3b", [8])], ["c3"], name="conv_dw",
                         pads=[1, 1, 1, 1], group=8),
        helper.make_node("Add", ["c2", "c3"], ["s1"], name="add_branches"),
        helper.make_node("Add", ["s1", w("addc", [1, 8, 1, 1])], ["s2"], name="add_const"),
        helper.make_node("Concat", ["s2", "r1"], ["cat"], name="concat", axis=1),
        helper.make_node("MaxPool", ["cat"], ["p1"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", w("c4w", [4, 16, 3, 3]), w("c4b", [4])], ["c4"], name="conv_c",
                         pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c4"], ["sg"], name="sigmoid_c"),
        helper.make_node("Mul", ["c4", "sg"], ["sw"], name="swish_mul"),
        helper.make_node("Flatten", ["sw"], ["fl"], name="flatten", axis=1),
        helper.make_node("Gemm", ["fl", w("fw", [10, 64]), w("fb", [10])], ["output"], name="fc", transB=1),
    ]
    g = helper.make_graph(n, "mixed", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 8, 8])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def fashion():
    (sg,) = onnx_mrvl.convert(EXAMPLE).subgraphs
    return sg


@pytest.fixture(scope="module")
def mixed():
    (sg,) = onnx_mrvl.convert(mixed_model()).subgraphs
    return sg


def _layers(sg):
    return [n for n in sg.nodes_json["nodes"] if n["op"] == "tvm_op"]


def _is_str_list(v):
    return isinstance(v, list) and v and all(isinstance(x, str) for x in v)


def test_top_level_and_input_node(fashion):
    nj = fashion.nodes_json
    assert nj["batch_size"] == 1 and nj["num_subgraph_inputs"] == 1 and nj["num_subgraph_outputs"] == 1
    assert nj["arg_nodes"] == [0] and nj["heads"] == [[len(nj["nodes"]) - 1, 0, 0]]
    assert nj["attrs"]["shape"][0] == "list_shape" and nj["attrs"]["dltype"][0] == "list_str"
    assert nj["attrs"]["shape"][1][0] == [1, 1, 28, 28] and nj["attrs"]["shape"][1][-1] == [1, 10]
    assert "node_row_ptr" not in nj                       # TVM's post-processing deleted it
    inp = nj["nodes"][0]
    assert inp == {"op": "input", "name": "input", "inputs": [], "input_id": ["0"],
                   "attrs": {"dtype": ["float32"], "shape": [[1, 1, 28, 28]], "layer_name": ["input"],
                             "data_layout": ["NCHW"]}}


def test_layer_attrs_follow_tvm_conventions(fashion):
    layers = _layers(fashion)
    assert [n["name"] for n in layers] == [f"tvmgen_mrvl_main_{k}" for k in range(8)]
    for k, node in enumerate(layers):
        a = node["attrs"]
        assert a["mrvl_nodes_idx"] == [k + 1] and a["num_inputs"] == "1" and a["num_outputs"] == "1"
        assert a["dtype"] == ["float32"] and isinstance(a["shape"][0], list)
        for key in ("layer_name", "func_name", "composite_name", "data_layout", "out_layout",
                    "data_layout_shape", "out_layout_shape", "from_tuple_idx", "func_node_name"):
            assert _is_str_list(a[key]), (node["name"], key, a.get(key))
        assert a["out_layout_shape"] == [str(d) for d in a["shape"][0]]
        assert node["inputs"] == [[k, 0, 0]]              # a chain: each layer reads the previous node
        assert all(a[m] == {} for m in ("beta_const", "gamma_const", "var_const", "mean_const", "input_const"))
    lt, conv, pool = layers[0]["attrs"], layers[1]["attrs"], layers[2]["attrs"]
    assert lt["func_name"] == ["n0_layout_transform_NCHW2NHWC"] and lt["src_layout"] == ["NCHW"]
    assert conv["func_name"] == ["n1_Conv2D_NHWC"] and conv["composite_name"] == ["mrvl.conv2d_nhwc2nhwc"]
    assert conv["strides"] == ["1", "1"] and conv["padding"] == ["0", "0", "1", "1"]
    assert conv["groups"] == ["1"] and conv["channels"] == ["64"] and conv["kernel_size"] == ["2", "2"]
    assert conv["kernel_layout"] == ["OHWI"] and conv["bias_layout"] == ["---O"]
    assert conv["activation_type"] == ["relu"] and conv["data_layout_shape"] == ["1", "28", "28", "1"]
    assert conv["kernel_const_name"] == ["tvmgen_mrvl_main_1_const_0"]
    assert conv["bias_const_name"] == ["tvmgen_mrvl_main_1_const_1"]
    assert conv["kernel_const"]["shape"] == [64, 2, 2, 1] and conv["kernel_const"]["name"] == "tvmgen_mrvl_main_1_const_0"
    assert pool["pool_size"] == ["2", "2"] and pool["kernel_layout"] == ["HW"] and pool["kernel_layout_shape"] == ["2", "2"]
    flat, fc = layers[5]["attrs"], layers[6]["attrs"]
    assert flat["layer_name"] == ["nn.batch_flatten"] and flat["func_name"] == ["n5_nn.batch_flatten_NHWC2NC"]
    assert fc["kernel_layout"] == ["OI"] and fc["bias_layout"] == ["-O"] and fc["units"] == ["256"]
    assert fc["func_name"] == ["n6_FC_NC"]


def test_constants_entries(fashion):
    consts = fashion.consts_json
    assert len(consts) == 8  # kernel + bias of 2 convs and 2 fcs
    for name, c in consts.items():
        assert name.startswith("tvmgen_mrvl_main_") and set(c) == {"shape", "dtype", "min", "max", "data_base64"}
        arr = np.frombuffer(base64.b64decode(c["data_base64"]), dtype="<f4")
        assert arr.size == int(np.prod(c["shape"])) and c["dtype"] == "float32"
        assert float(c["min"]) == arr.min() and float(c["max"]) == arr.max()
    assert consts["tvmgen_mrvl_main_1_const_1"]["shape"] == [1, 64]          # bias [64] written [1, 64]
    assert consts["tvmgen_mrvl_main_6_const_0"]["shape"] == [256, 1568]
    # the conv kernel is OHWI: compare with the ONNX OIHW weight
    w = numpy_helper.to_array(next(i for i in onnx.load(EXAMPLE).graph.initializer if i.name == "conv1.weight"))
    got = np.frombuffer(base64.b64decode(consts["tvmgen_mrvl_main_1_const_0"]["data_base64"]), "<f4").reshape(64, 2, 2, 1)
    np.testing.assert_array_equal(got, w.transpose(0, 2, 3, 1))


def test_origin_nodes_on_every_layer(fashion, mixed):
    origins = {n["name"]: n["attrs"]["origin_nodes"][0] for n in _layers(fashion)}
    assert origins["tvmgen_mrvl_main_1"] == ["conv1", "relu1"]
    assert origins["tvmgen_mrvl_main_6"] == ["dense1_matmul", "dense1_add", "relu3"]
    m_origins = [n["attrs"]["origin_nodes"][0] for n in _layers(mixed)]
    assert all(m_origins) and ["conv_c", "sigmoid_c", "swish_mul"] in m_origins


def test_multi_input_and_constant_operand_layers(mixed):
    by_origin = {tuple(n["attrs"]["origin_nodes"][0]): n for n in _layers(mixed)}
    add = by_origin[("add_branches",)]["attrs"]
    assert add["layer_name"] == ["Sum2D"] and add["num_inputs"] == "2" and add["func_name"][0].endswith("_Sum2D")
    assert add["data_layout_shape_0"] == add["data_layout_shape_1"] == add["data_layout_shape"] == ["1", "8", "8", "8"]
    assert add["from_tuple_idx"] == ["-1", "-1"]
    addc = by_origin[("add_const",)]
    a = addc["attrs"]
    assert a["num_inputs"] == "1" and len(addc["inputs"]) == 1
    assert a["input_const_shape"] == ["1", "1", "1", "8"]     # NHWC, padded to 4-D
    cname = a["input_const_name"][0]
    assert cname == addc["name"] + "_const_0" and mixed.consts_json[cname]["shape"] == [1, 1, 1, 8]
    assert a["input_const"]["name"] == cname
    cat = by_origin[("concat",)]["attrs"]
    assert cat["axis"] == ["3"] and cat["num_inputs"] == "2" and cat["data_layout_shape_1"] == ["1", "8", "8", "8"]
    acts = {n["attrs"]["origin_nodes"][0][0]: n["attrs"].get("activation_type", ["-"])[0] for n in _layers(mixed)}
    assert acts["conv_a"] == "leaky_relu" and acts["conv_c"] == "silu"
    leaky = next(n for n in _layers(mixed) if n["attrs"].get("activation_type") == ["leaky_relu"])
    assert float(leaky["attrs"]["activation_alpha"][0]) == pytest.approx(0.1)
    dw = by_origin[("conv_dw",)]["attrs"]
    assert dw["groups"] == ["8"] and dw["kernel_const"]["shape"] == [8, 3, 3, 1]
    fc = by_origin[("fc",)]["attrs"]           # Flatten of an NCHW tensor that is stored NHWC
    assert fc["weights_need_transform"] == ["yes"] and fc["flatten_shape"] == ["1", "4", "4", "4"]
    assert by_origin[("flatten",)]["attrs"]["layer_name"] == ["nn.batch_flatten"]


def test_fc_kernel_is_permuted_for_the_nhwc_flatten(mixed):
    from onnx_mrvl.emit import build_program
    meta, weights = build_program(mixed.nodes_json, mixed.consts_json)
    fc = meta["layers"][-1]
    kernel = weights[fc["weights"]["kernel"]]
    w = numpy_helper.to_array(next(i for i in mixed_model().graph.initializer if i.name == "fw"))  # [10, C*H*W]
    expected = w.reshape(10, 4, 4, 4).transpose(0, 2, 3, 1).reshape(10, 64)                      # [10, H*W*C]
    np.testing.assert_array_equal(kernel, expected.astype(np.float16))
    assert fc["layer_name"] == "FC" and meta["layers"][-2]["params"]["shape"] == [1, 64]


def test_emit_is_deterministic(fashion):
    region = onnx_mrvl.convert(EXAMPLE)
    assert region.subgraphs[0].nodes_json == fashion.nodes_json
    assert region.subgraphs[0].consts_json == fashion.consts_json


def test_emit_rejects_non_mrvl_nodes():
    from onnx_mrvl.errors import CompileError
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="plain_relu")], "r",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g)
    m.ir_version = 8
    with pytest.raises(CompileError, match="plain_relu.*cannot be emitted"):
        emit(m, "r")


def test_emit_rejects_a_conv_whose_weights_are_not_constant():
    from onnx_mrvl import opset
    from onnx_mrvl.errors import CompileError
    node = opset.make_node("Conv2D", ["x", "w"], ["y"], name="dyn_conv", origin=["Conv_7"],
                           attrs={"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "group": 1,
                                  "kernel_shape": [1, 1]})
    vi = helper.make_tensor_value_info
    g = helper.make_graph([node], "r", [vi("x", TensorProto.FLOAT, [1, 2, 2, 3]), vi("w", TensorProto.FLOAT, [4, 1, 1, 3])],
                          [vi("y", TensorProto.FLOAT, [1, 2, 2, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("mrvl", 1)])
    m.ir_version = 10
    with pytest.raises(CompileError, match=r"\[dyn_conv\].*weights must be the constants.*original nodes: Conv_7"):
        emit(m, "r")


def split_model(seed=0):
    """Conv -> Split on channels [3, 5] -> a Conv per part -> Concat, plus a channel Slice of a
    second input read only by a CPU op (stays NCHW)."""
    rng = np.random.default_rng(seed)
    inits = []

    def w(name, shape):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name))
        return name
    i64 = lambda name, v: inits.append(numpy_helper.from_array(np.array(v, np.int64), name)) or name  # noqa: E731
    n = [helper.make_node("Conv", ["input", w("c1w", [8, 3, 3, 3]), w("c1b", [8])], ["c1"], name="conv_a",
                          pads=[1, 1, 1, 1]),
         helper.make_node("Split", ["c1", i64("sp", [3, 5])], ["a", "b"], name="split", axis=1),
         helper.make_node("Conv", ["a", w("c2w", [4, 3, 1, 1])], ["c2"], name="conv_b"),
         helper.make_node("Conv", ["b", w("c3w", [4, 5, 3, 3])], ["c3"], name="conv_c", pads=[1, 1, 1, 1]),
         helper.make_node("Concat", ["c2", "c3"], ["output"], name="concat", axis=1),
         helper.make_node("Slice", ["aux", i64("s", [2]), i64("e", [5]), i64("ax", [1])], ["sl"], name="slice"),
         helper.make_node("Softplus", ["sl"], ["output2"], name="softplus")]
    g = helper.make_graph(n, "split", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 8, 8]),
                                       helper.make_tensor_value_info("aux", TensorProto.FLOAT, [1, 6, 4, 4])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 8, 8, 8]),
                           helper.make_tensor_value_info("output2", TensorProto.FLOAT, [1, 3, 4, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_channel_split_is_slice2d_layers_end_to_end(tmp_path):
    """Split -> Slice2D layers in the JSON (axis of the stored layout), compiled with the input's
    layout, simulated within fp16 tolerance of onnxruntime on the original; one region. With
    force=True the Slice of an NCHW region input is a Slice2D on axis 1 writing NCHW, in a part no
    path links to the split's: merged into the same region (docs/partition.md "Independent regions")."""
    import onnxruntime as ort
    from onnx_mrvl.emit import build_program

    m = split_model()
    rng = np.random.default_rng(1)
    feeds = {"input": rng.standard_normal((1, 3, 8, 8)).astype(np.float32),
             "aux": rng.standard_normal((1, 6, 4, 4)).astype(np.float32)}
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for force in (False, True):
        res = onnx_mrvl.convert(m, force=force)
        assert len(res.subgraphs) == 1
        assert not [n for n in res.model.graph.node if n.op_type == "Split"]
        sl = [n for sg in res.subgraphs for n in _layers(sg) if n["attrs"]["layer_name"] == ["Slice2D"]]
        assert len(sl) == (3 if force else 2)
        nhwc = [n["attrs"] for n in sl if n["attrs"]["origin_nodes"][0] == ["split"]]
        assert [(a["axis"], a["start"], a["end"]) for a in nhwc] == [(["3"], ["0"], ["3"]), (["3"], ["3"], ["8"])]
        for a in nhwc:
            assert a["data_layout"] == a["out_layout"] == ["NHWC"] and a["composite_name"] == ["mrvl.slice"]
            assert a["func_name"][0].endswith("_Slice2D_NHWC") and a["data_layout_shape"] == ["1", "8", "8", "8"]
        meta, _ = build_program(res.subgraphs[0].nodes_json, res.subgraphs[0].consts_json)
        layers = [layer for layer in meta["layers"] if layer["layer_name"] == "Slice2D" and layer["params"]["axis"] == 3]
        assert [layer["params"] for layer in layers] == [{"axis": 3, "start": 0, "end": 3},
                                                         {"axis": 3, "start": 3, "end": 8}]
        assert all(layer["macs"] == 0 for layer in layers)
        assert [meta["tensors"][layer["outputs"][0]]["layout"] for layer in layers] == ["NHWC", "NHWC"]
        if force:
            aux = next(a for a in (n["attrs"] for n in sl) if a["origin_nodes"][0] == ["slice"])
            assert (aux["axis"], aux["start"], aux["end"], aux["data_layout"]) == (["1"], ["2"], ["5"], ["NCHW"])
            (aux_out,) = [o for o in meta["outputs"] if o["shape"] == [1, 3, 4, 4]]
            assert aux_out["layout"] == "NCHW"
        out = onnx_mrvl.InferenceSession(res.save(str(tmp_path / str(force)))).run(None, feeds)
        for a, b in zip(ref, out):
            assert a.shape == b.shape
            assert float(np.max(np.abs(a - b))) <= 1e-2 * max(1.0, float(np.max(np.abs(a))))



@pytest.mark.parametrize("shape,back", [([1, 4, 2, 24], True), ([1, 4, 1, 48], False)])
def test_region_input_relabelled_by_transposes_compiles(shape, back, tmp_path):
    """x [1,8,4,6] -> Transpose(0,2,3,1) -> Reshape -> [Transpose(0,3,1,2)] -> Conv. It used to fail
    to compile ("layout_transform NHWC->NCHW reads a tensor stored NCHW": fuse converts x, which
    is t0 relabelled, with an NHWC->NCHW LayoutTransform) and the region fell back to the CPU.
    Now: with the Transpose back, fuse writes the reshape's output so that the Transpose makes it
    NHWC (one LayoutTransform before the reshape, none after); without it, the region input is
    labelled with the storage its LayoutTransform reads."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    cin = shape[3] if back else shape[1]   # y: [1, 8, 4, 2] or [1, 8, 1, 48]
    inits = [numpy_helper.from_array(np.array(shape, np.int64), "shape"),
             numpy_helper.from_array((rng.standard_normal((8, cin, 3, 3)) * 0.1).astype(np.float32), "w")]
    nodes = [helper.make_node("Transpose", ["x"], ["t0"], perm=[0, 2, 3, 1], name="tr0"),
             helper.make_node("Reshape", ["t0", "shape"], ["r0"], name="rs")]
    if back:
        nodes.append(helper.make_node("Transpose", ["r0"], ["t1"], perm=[0, 3, 1, 2], name="tr1"))
    nodes.append(helper.make_node("Conv", [nodes[-1].output[0], "w"], ["y"], pads=[1] * 4, name="conv"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8] + ([4, 2] if back else [1, 48]))],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    res = onnx_mrvl.convert(m)
    assert [n.op_type for n in res.model.graph.node] == ["Subgraph_1x1"]
    assert not [d for d in res.report.dropped if "compile" in d["reason"]]
    (sg,) = res.subgraphs
    layers = [n["attrs"]["layer_name"][0] for n in _layers(sg)]
    assert layers == ["layout_transform", "reshape", "Conv2D", "layout_transform"]
    first = _layers(sg)[0]["attrs"]
    assert sg.nodes_json["nodes"][0]["attrs"]["data_layout"] == first["src_layout"]
    feeds = {"x": rng.standard_normal((1, 8, 4, 6)).astype(np.float32)}
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path / "m"))).run(None, feeds)[0]
    assert ref.shape == got.shape
    assert float(np.max(np.abs(ref - got))) <= 1e-2 * float(np.max(np.abs(ref)))
