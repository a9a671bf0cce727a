"""compile_json() on JSON pairs written by hand in TVM's field layout (tests/data/tvm_*.json), run on
the simulator against a numpy reference; and the spellings of ours and TVM's it accepts."""
import base64
import copy
import json
import os

import numpy as np
import pytest

import onnx_mrvl
from onnx_mrvl.artifact import load
from onnx_mrvl.emit import CompileOptions, build_program, compile_json

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytest.importorskip("onnx_mrvl.sim")
from onnx_mrvl.sim import Simulator  # noqa: E402


def pair(name):
    with open(os.path.join(DATA, f"{name}-nodes.json")) as f:
        nodes = json.load(f)
    with open(os.path.join(DATA, f"{name}-consts.json")) as f:
        consts = json.load(f)
    return nodes, consts


def const(consts, name):
    c = consts[name]
    return np.frombuffer(base64.b64decode(c["data_base64"]), dtype="<f4").reshape(c["shape"])


def conv_nchw(x, w_ohwi, b, pad):
    w = w_ohwi.transpose(0, 3, 1, 2)                      # OIHW
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    h, wd = xp.shape[2] - kh + 1, xp.shape[3] - kw + 1
    y = np.zeros((x.shape[0], o, h, wd), np.float64)
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return y + b.reshape(1, -1, 1, 1)


def close(got, ref):
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-2 * max(1.0, float(np.abs(ref).max())))


def test_tvm_conv_pool_fc_runs_and_matches_numpy():
    nodes, consts = pair("tvm_cnn")
    binary = compile_json(nodes, consts, CompileOptions(num_tiles=8, ocm_size=0x80000))
    meta = load(binary).meta
    assert [layer["layer_name"] for layer in meta["layers"]] == [
        "layout_transform", "Conv2D", "Maxpool2D", "Flatten", "FC"]   # TVM's fc swallowed the flatten
    assert meta["layers"][1]["params"]["activation"] == "relu" and meta["layers"][1]["params"]["padding"] == [1] * 4
    assert meta["inputs"][0]["shape"] == [1, 3, 8, 8] and meta["outputs"][0]["shape"] == [1, 5]
    assert meta["arch"]["num_tiles"] == 8 and meta["arch"]["ocm_size"] == 0x80000
    assert meta["weights"][0]["layout"] == "OHWI" and meta["weights"][0]["dtype"] == "float16"
    x = np.random.default_rng(1).standard_normal((2, 1, 3, 8, 8)).astype(np.float32)
    w, b = const(consts, "tvmgen_mrvl_main_1_const_0"), const(consts, "tvmgen_mrvl_main_1_const_1")
    fw, fb = const(consts, "tvmgen_mrvl_main_3_const_0"), const(consts, "tvmgen_mrvl_main_3_const_1")
    sim = Simulator(binary)
    for xi in x:
        y = np.maximum(conv_nchw(xi, w, b, 1), 0)
        y = y.reshape(1, 4, 4, 2, 4, 2).max(axis=(3, 5))            # maxpool 2x2 / 2
        ref = y.reshape(1, -1) @ fw.T + fb.reshape(1, -1)             # the kernel follows an NCHW flatten
        close(sim.run([xi])[0], ref)


def test_tvm_batchnorm_and_sum_constant_are_folded():
    nodes, consts = pair("tvm_bn_sum")
    meta, weights = build_program(nodes, consts)
    conv = meta["layers"][1]
    assert sorted(conv["weights"]) == ["kernel", "scale", "shift"]
    gamma, beta, mean, var = (const(consts, f"tvmgen_mrvl_main_1_const_{i}").reshape(-1) for i in range(1, 5))
    scale = gamma / np.sqrt(var + 1e-3)
    np.testing.assert_allclose(weights[conv["weights"]["scale"]], scale, rtol=1e-6)
    np.testing.assert_allclose(weights[conv["weights"]["shift"]], beta - mean * scale, rtol=1e-5, atol=1e-7)
    assert meta["layers"][2]["layer_name"] == "Sum2D" and list(weights[meta["layers"][2]["weights"]["operand"]].shape) == [1, 1, 1, 3]
    assert meta["layers"][3]["layer_name"] == "Flatten" and meta["layers"][3]["params"]["shape"] == [1, 48]
    x = np.random.default_rng(2).standard_normal((1, 2, 4, 4)).astype(np.float32)
    w = const(consts, "tvmgen_mrvl_main_1_const_0")
    y = conv_nchw(x, w, np.zeros(3), 0)
    y = np.maximum((y - mean.reshape(1, -1, 1, 1)) / np.sqrt(var.reshape(1, -1, 1, 1) + 1e-3)
                   * gamma.reshape(1, -1, 1, 1) + beta.reshape(1, -1, 1, 1), 0)
    y = y + const(consts, "tvmgen_mrvl_main_2_const_0").reshape(1, -1, 1, 1)
    ref = y.transpose(0, 2, 3, 1).reshape(1, -1) @ const(consts, "tvmgen_mrvl_main_4_const_0").T  # NHWC flatten
    close(Simulator(compile_json(nodes, consts)).run([x])[0], ref)


def _nest(obj):
    """Every list-of-strings attribute wrapped once more (TVM's raw JSON graph), numbers as strings."""
    out = copy.deepcopy(obj)
    for node in out["nodes"]:
        for k, v in node["attrs"].items():
            if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
                node["attrs"][k] = [v]
    for k in ("batch_size", "num_subgraph_inputs", "num_subgraph_outputs"):
        out[k] = str(out[k])
    return out


def test_both_spellings_compile_to_the_same_binary():
    result = onnx_mrvl.convert(os.path.join(ROOT, "examples", "fashion_mnist.onnx"))
    sg = result.subgraphs[0]
    assert compile_json(_nest(sg.nodes_json), sg.consts_json) == sg.binary
    flat = copy.deepcopy(sg.nodes_json)
    for node in flat["nodes"][1:]:
        node["attrs"]["origin_nodes"] = node["attrs"]["origin_nodes"][0]   # a flat list of strings
    assert compile_json(flat, sg.consts_json) == sg.binary
    tvm_nodes, tvm_consts = pair("tvm_cnn")
    assert compile_json(_nest(tvm_nodes), tvm_consts) == compile_json(tvm_nodes, tvm_consts)


def test_our_names_for_tvm_fields():
    """compile reads our spellings too: kernel_size for pool_size, newshape on batch_flatten, OIHW kernels."""
    nodes, consts = pair("tvm_cnn")
    base = compile_json(nodes, consts)
    alt = copy.deepcopy(nodes)
    pool = alt["nodes"][3]["attrs"]
    pool["kernel_size"] = pool.pop("pool_size")
    del pool["kernel_layout_shape"]
    alt_consts = copy.deepcopy(consts)
    w = const(consts, "tvmgen_mrvl_main_1_const_0").transpose(0, 3, 1, 2)     # OHWI -> OIHW
    alt_consts["tvmgen_mrvl_main_1_const_0"] = dict(consts["tvmgen_mrvl_main_1_const_0"], shape=list(w.shape),
                                                    data_base64=base64.b64encode(np.ascontiguousarray(w).tobytes()).decode())
    alt["nodes"][2]["attrs"]["kernel_layout"] = ["OIHW"]
    alt["nodes"][2]["attrs"]["padding"] = ["1", "1"]                        # Relay's [ph, pw]
    lt = alt["nodes"][1]["attrs"]
    lt["layer_name"], lt["axes"] = ["transpose"], ["0", "2", "3", "1"]       # TVM's transpose op node
    del lt["src_layout"], lt["dst_layout"], lt["data_layout"], lt["out_layout"]
    assert compile_json(alt, alt_consts) == base
    alt["nodes"][1]["attrs"]["axes"] = ["0", "3", "1", "2"]
    with pytest.raises(onnx_mrvl.errors.CompileError, match=r"\[tvmgen_mrvl_main_0\] layout_transform NHWC->NCHW reads a tensor stored NCHW"):
        compile_json(alt, alt_consts)
