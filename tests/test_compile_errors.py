"""Malformed JSON pairs: every error is a CompileError naming the node and its original ONNX nodes."""
import base64
import copy
import json
import os

import pytest

import onnx_mrvl
from onnx_mrvl.emit import CompileOptions, compile_json
from onnx_mrvl.errors import CompileError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")


@pytest.fixture(scope="module")
def pair():
    sg = onnx_mrvl.convert(os.path.join(ROOT, "examples", "fashion_mnist.onnx")).subgraphs[0]
    return sg.nodes_json, sg.consts_json


def conv1(nodes):
    """The first conv layer: node 2 (after the input and the layout change); origin conv1, relu1."""
    node = nodes["nodes"][2]
    assert node["attrs"]["layer_name"] == ["Conv2D"]
    return node


def expect(nodes, consts, *patterns, options=None):
    with pytest.raises(CompileError) as info:
        compile_json(nodes, consts, options)
    text = str(info.value)
    for p in patterns:
        assert p in text, (p, text)
    return info.value


ORIGIN = "(original nodes: conv1, relu1)"


def test_missing_field(pair):
    nodes, consts = copy.deepcopy(pair)
    del conv1(nodes)["attrs"]["kernel_const_name"]
    err = expect(nodes, consts, "[tvmgen_mrvl_main_1]", "missing attribute 'kernel_const_name'", ORIGIN)
    assert err.node == "tvmgen_mrvl_main_1" and err.origin == ("conv1", "relu1")
    nodes, consts = copy.deepcopy(pair)
    del nodes["nodes"][3]["attrs"]["pool_size"], nodes["nodes"][3]["attrs"]["kernel_layout_shape"]
    expect(nodes, consts, "[tvmgen_mrvl_main_2]", "pool_size", "(original nodes: pool1)")
    nodes, consts = copy.deepcopy(pair)
    del nodes["nodes"][1]["attrs"]["layer_name"]
    expect(nodes, consts, "[tvmgen_mrvl_main_0]", "missing attribute 'layer_name'")
    nodes, consts = copy.deepcopy(pair)
    del nodes["heads"]
    expect(nodes, consts, "no 'heads'")


def test_unknown_layer_name(pair):
    nodes, consts = copy.deepcopy(pair)
    conv1(nodes)["attrs"]["layer_name"] = ["Conv3D"]
    expect(nodes, consts, "[tvmgen_mrvl_main_1]", "unknown layer_name 'Conv3D'", "known: ", ORIGIN)


def test_constant_bytes_do_not_match_shape(pair):
    nodes, consts = copy.deepcopy(pair)
    c = consts["tvmgen_mrvl_main_1_const_0"]
    c["data_base64"] = base64.b64encode(base64.b64decode(c["data_base64"])[:-4]).decode()
    expect(nodes, consts, "[tvmgen_mrvl_main_1]", "has 1020 bytes but shape [64, 2, 2, 1] of float32 needs 1024",
           ORIGIN)
    nodes, consts = copy.deepcopy(pair)
    consts["tvmgen_mrvl_main_1_const_1"]["data_base64"] = "not*base64"
    expect(nodes, consts, "[tvmgen_mrvl_main_1]", "'tvmgen_mrvl_main_1_const_1' is malformed", ORIGIN)
    nodes, consts = copy.deepcopy(pair)
    del consts["tvmgen_mrvl_main_1_const_1"]
    expect(nodes, consts, "constant 'tvmgen_mrvl_main_1_const_1' is not in the Constants-JSON", ORIGIN)
    nodes, consts = copy.deepcopy(pair)
    consts["tvmgen_mrvl_main_1_const_0"]["dtype"] = "int8"
    expect(nodes, consts, "int8", ORIGIN)


def test_dangling_and_forward_input_references(pair):
    nodes, consts = copy.deepcopy(pair)
    conv1(nodes)["inputs"] = [[99, 0, 0]]
    expect(nodes, consts, "[tvmgen_mrvl_main_1]", "points to node 99", ORIGIN)
    nodes, consts = copy.deepcopy(pair)
    conv1(nodes)["inputs"] = [[5, 0, 0]]                  # a node listed later
    expect(nodes, consts, "points to node 5", "execution order", ORIGIN)
    nodes, consts = copy.deepcopy(pair)
    conv1(nodes)["inputs"] = ["x"]
    expect(nodes, consts, "malformed input reference", ORIGIN)
    nodes, consts = copy.deepcopy(pair)
    nodes["heads"] = [[42, 0, 0]]
    expect(nodes, consts, "head 0 refers to node 42")


def test_shape_mismatches(pair):
    nodes, consts = copy.deepcopy(pair)
    conv1(nodes)["attrs"]["data_layout_shape"] = ["1", "28", "28", "3"]
    expect(nodes, consts, "data_layout_shape [1, 28, 28, 3] disagrees with the shape [1, 28, 28, 1]", ORIGIN)
    nodes, consts = copy.deepcopy(pair)
    conv1(nodes)["attrs"]["out_layout_shape"] = ["1", "28", "28", "63"]
    expect(nodes, consts, "out_layout_shape [1, 28, 28, 63] disagrees", ORIGIN)
    nodes, consts = copy.deepcopy(pair)                   # the second conv reads the first conv's 64 channels
    c = consts["tvmgen_mrvl_main_3_const_0"]
    c["shape"] = [128, 2, 2, 16]                       # same 8192 values, 16 input channels
    expect(nodes, consts, "[tvmgen_mrvl_main_3]", "does not fit an input of shape [1, 14, 14, 64]",
           "(original nodes: conv2, relu2)")
    nodes, consts = copy.deepcopy(pair)
    nodes["nodes"][7]["attrs"]["kernel_const_name"] = ["tvmgen_mrvl_main_7_const_0"]   # fc2's kernel on fc1
    expect(nodes, consts, "[tvmgen_mrvl_main_6]", "FC kernel [10, 256] (OI) does not fit an input of shape [1, 1568]")
    nodes, consts = copy.deepcopy(pair)
    nodes["nodes"][8]["attrs"]["bias_const_name"] = ["tvmgen_mrvl_main_6_const_1"]
    expect(nodes, consts, "[tvmgen_mrvl_main_7]", "bias has 256 values for 10 channels")
    nodes, consts = copy.deepcopy(pair)
    nodes["num_subgraph_outputs"] = 2
    expect(nodes, consts, "num_subgraph_outputs=2 but the Nodes-JSON has 1")


def test_bad_values_and_options(pair):
    nodes, consts = copy.deepcopy(pair)
    conv1(nodes)["attrs"]["strides"] = ["1", "x"]
    expect(nodes, consts, "attribute 'strides' is not a list of integers", ORIGIN)
    nodes, consts = copy.deepcopy(pair)
    conv1(nodes)["attrs"]["activation_type"] = ["softsign"]
    expect(nodes, consts, "unknown activation_type 'softsign'", ORIGIN)
    nodes, consts = copy.deepcopy(pair)
    expect(nodes, consts, "quantize='int8'", options=CompileOptions(quantize="int8"))
    expect(nodes, consts, "num_tiles=0", options=CompileOptions(num_tiles=0))
    with pytest.raises(CompileError, match="no 'nodes' list"):
        compile_json({"heads": []}, {})


def test_tvm_fixture_errors_name_the_layer():
    with open(os.path.join(DATA, "tvm_cnn-nodes.json")) as f:
        nodes = json.load(f)
    with open(os.path.join(DATA, "tvm_cnn-consts.json")) as f:
        consts = json.load(f)
    bad = copy.deepcopy(nodes)
    del bad["nodes"][4]["attrs"]["data_layout_shape"]      # weights_need_transform needs the NHWC shape
    expect(bad, consts, "[tvmgen_mrvl_main_3]", "weights_need_transform needs the NHWC shape")
    bad = copy.deepcopy(nodes)
    bad["nodes"][1]["attrs"]["src_layout"] = ["NCDHW"]
    expect(bad, consts, "[tvmgen_mrvl_main_0]", "layout_transform NCDHW->NHWC")


JUNK = [None, 0, -1, 7, 1.5, "", "x", "-3", [], [[]], {}, ["1"], ["a", "b"], [["1", "2"]], [1, 2, 3, 4, 5],
        {"a": 1}, True, ["NHWC"], [-1, 0, 0], "0x10"]


def _paths(obj, prefix=()):
    """Every (container, key) position inside a JSON value."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield obj, k
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield obj, i
            yield from _paths(v, prefix + (i,))


def test_random_corruptions_raise_only_compile_errors():
    """400 seeded single-field corruptions of a TVM-style pair: each either compiles or raises
    CompileError (never KeyError, TypeError, IndexError, ...)."""
    import random
    with open(os.path.join(DATA, "tvm_cnn-nodes.json")) as f:
        nodes = json.load(f)
    with open(os.path.join(DATA, "tvm_cnn-consts.json")) as f:
        consts = json.load(f)
    rng = random.Random(0)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(400):
        n, c = copy.deepcopy(nodes), copy.deepcopy(consts)
        target = n if rng.random() < 0.8 else c
        positions = [p for p in _paths(target) if not (isinstance(p[0], dict) and p[1] == "data_base64")]
        container, key = rng.choice(positions)
        if isinstance(container, dict) and rng.random() < 0.3:
            del container[key]
        else:
            container[key] = copy.deepcopy(rng.choice(JUNK))
        try:
            compile_json(n, c)
            outcomes["ok"] += 1
        except CompileError as exc:
            assert exc.message, exc
            outcomes["error"] += 1
    assert outcomes["error"] > 100 and outcomes["ok"] > 20, outcomes
