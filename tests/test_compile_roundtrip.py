"""The JSON pair is the contract: compiling the saved JSON alone reproduces the saved binary byte for
byte; the binary stays within "fp16 weight bytes + 1% + 64 KiB" (the README's budget; the meta JSON
is zlib-compressed, format 1.1: ShuffleNet's 412 layers fit); --batch, --ocm-size and
--num-tiles change the program as they should. All model-zoo architectures: set ONNX_MRVL_FULL_ZOO=1
(or run benchmarks/bench_binary_size.py, which prints the size table)."""
import copy
import json
import os

import numpy as np
import onnx
import pytest

import onnx_mrvl
from onnx_mrvl.artifact import load
from onnx_mrvl.cli.main import main as cli_main
from onnx_mrvl.emit import CompileOptions, build_program, compile_json
from onnx_mrvl.errors import CompileError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "fashion_mnist.onnx")
DATA = os.path.join(ROOT, "tests", "data")
FAST_ZOO = ("squeezenet", "shufflenet", "inception_v1")


def zoo_names():
    from onnx_mrvl.testing.randomize_weights import zoo_model_paths
    names = list(zoo_model_paths())
    return names if os.environ.get("ONNX_MRVL_FULL_ZOO") else [n for n in names if n in FAST_ZOO]


def _model(name):
    if name == "fashion_mnist":
        return onnx.load(EXAMPLE)
    from onnx_mrvl.testing.randomize_weights import load_zoo
    return load_zoo(name, 0)


def _read(path, binary=False):
    with open(path, "rb" if binary else "r") as f:
        return f.read() if binary else json.load(f)


def _values(consts):
    return sum(int(np.prod([int(d) for d in c["shape"]])) for c in consts.values())


@pytest.mark.parametrize("name", ["fashion_mnist"] + zoo_names())
def test_saved_json_compiles_to_the_saved_binary(name, tmp_path):
    result = onnx_mrvl.convert(_model(name))
    result.save(str(tmp_path))
    assert result.subgraphs
    for sg in result.subgraphs:
        nodes = _read(tmp_path / f"{sg.name}-nodes.json")
        consts = _read(tmp_path / f"{sg.name}-consts.json")
        saved = _read(tmp_path / sg.artifact, binary=True)
        first, second = compile_json(nodes, consts, CompileOptions()), compile_json(nodes, consts, CompileOptions())
        assert first == saved and second == saved, sg.name
        assert sg.nodes_json == nodes and sg.consts_json == consts   # the JSON survives the file round trip
        fp16 = 2 * _values(consts)
        meta = load(saved).meta   # weights as fp16, plus the compressed meta
        assert len(saved) <= fp16 + fp16 // 100 + 64 * 1024, (sg.name, len(saved), fp16)
        assert [layer["origin"] for layer in meta["layers"]] and all(layer["origin"] for layer in meta["layers"])


def test_two_converts_write_identical_files(tmp_path):
    a, b = onnx_mrvl.convert(EXAMPLE), onnx_mrvl.convert(EXAMPLE)
    a.save(str(tmp_path / "a"))
    b.save(str(tmp_path / "b"))
    for f in ("mrvl_region_0.bin", "mrvl_region_0-nodes.json", "mrvl_region_0-consts.json"):
        assert _read(tmp_path / "a" / f, True) == _read(tmp_path / "b" / f, True), f


@pytest.fixture(scope="module")
def fashion(tmp_path_factory):
    out = tmp_path_factory.mktemp("fm")
    result = onnx_mrvl.convert(EXAMPLE)
    result.save(str(out))
    return result.subgraphs[0], out


def test_cli_compile_writes_the_same_binary(fashion, tmp_path, capsys):
    sg, out = fashion
    target = tmp_path / "x.bin"
    code = cli_main(["compile", "--nodes", str(out / f"{sg.name}-nodes.json"), "--consts",
                     str(out / f"{sg.name}-consts.json"), "-o", str(target), "--num-tiles", "4",
                     "--ocm-size", "0x100000", "--quantize", "float16"])
    assert code == 0 and _read(target, True) == sg.binary
    assert "8 layers" in capsys.readouterr().out
    bad = json.loads(json.dumps(sg.nodes_json))
    bad["nodes"][2]["attrs"]["layer_name"] = ["Conv9D"]
    (tmp_path / "bad-nodes.json").write_text(json.dumps(bad))
    code = cli_main(["compile", "--nodes", str(tmp_path / "bad-nodes.json"), "--consts",
                     str(out / f"{sg.name}-consts.json"), "-o", str(tmp_path / "bad.bin")])
    err = capsys.readouterr().err
    assert code != 0 and "Conv9D" in err and "conv1, relu1" in err and not (tmp_path / "bad.bin").exists()


def test_batch_option_recompiles_for_batch_n(fashion, tmp_path):
    from onnx_mrvl.sim import Simulator
    sg, out = fashion
    meta, _ = build_program(sg.nodes_json, sg.consts_json, CompileOptions(batch=3))
    assert meta["batch_size"] == 3 and meta["inputs"][0]["shape"] == [3, 1, 28, 28]
    assert meta["outputs"][0]["shape"] == [3, 10]
    flat = next(layer for layer in meta["layers"] if layer["layer_name"] == "Flatten")
    assert flat["params"]["shape"] == [3, 1568]
    target = tmp_path / "b3.bin"
    assert cli_main(["compile", "--nodes", str(out / f"{sg.name}-nodes.json"), "--consts",
                     str(out / f"{sg.name}-consts.json"), "-o", str(target), "--batch", "3"]) == 0
    x = np.random.default_rng(3).random((3, 1, 28, 28), dtype=np.float32)
    y3 = Simulator(_read(target, True)).run([x])[0]
    one = Simulator(sg.binary)
    y1 = np.concatenate([one.run([x[i:i + 1]])[0] for i in range(3)])
    np.testing.assert_allclose(y3, y1, rtol=0, atol=1e-3 * float(np.abs(y1).max()))
    assert not np.allclose(y3[0], y3[1])


def test_batch_option_on_tvm_json_and_batch_mixing_reshape():
    nodes, consts = _read(os.path.join(DATA, "tvm_cnn-nodes.json")), _read(os.path.join(DATA, "tvm_cnn-consts.json"))
    meta, _ = build_program(nodes, consts, CompileOptions(batch=2))
    assert [t["shape"] for t in meta["tensors"]][-2:] == [[2, 64], [2, 5]]
    nodes, consts = _read(os.path.join(DATA, "tvm_bn_sum-nodes.json")), _read(os.path.join(DATA, "tvm_bn_sum-consts.json"))
    bad = copy.deepcopy(nodes)
    flat = bad["nodes"][4]["attrs"]
    flat["layer_name"], flat["newshape"], flat["out_layout_shape"] = ["reshape"], ["3", "16"], ["3", "16"]
    with pytest.raises(CompileError, match=r"\[tvmgen_mrvl_main_3\] reshape to \[3, 16\] mixes the batch"):
        build_program(bad, consts, CompileOptions(batch=2))


def _dram(meta):
    return sum(layer["dram_bytes"] for layer in meta["layers"])


def test_memory_plan_follows_ocm_size_and_num_tiles(fashion):
    sg, _ = fashion
    plans = {}
    for tiles, ocm in ((4, 0x100000), (1, 0x40000), (1, 0x10000), (1, 0x4000), (8, 0x4000), (2, 0x4000)):
        meta, _ = build_program(sg.nodes_json, sg.consts_json, CompileOptions(num_tiles=tiles, ocm_size=ocm))
        assert meta["arch"]["num_tiles"] == tiles and meta["arch"]["ocm_size"] == ocm
        plan = meta["memory_plan"]
        assert plan["ocm_bytes_total"] == tiles * ocm and plan["activation_peak_bytes"] <= tiles * ocm
        placed = {t["id"]: t["placement"] for t in meta["tensors"]}
        assert sorted(plan["resident"] + plan["streamed"]) == sorted(placed)
        assert all(placed[i] == "ocm" for i in plan["resident"])
        plans[(tiles, ocm)] = meta
    dram = {k: _dram(m) for k, m in plans.items()}
    # smaller OCM -> more DRAM traffic; more tiles -> more OCM -> less
    assert dram[(4, 0x100000)] < dram[(1, 0x40000)] < dram[(1, 0x10000)] <= dram[(1, 0x4000)]
    assert dram[(8, 0x4000)] < dram[(2, 0x4000)] <= dram[(1, 0x4000)]
    big, small = plans[(4, 0x100000)], plans[(1, 0x4000)]
    assert len(small["memory_plan"]["streamed"]) > len(big["memory_plan"]["streamed"])
    # the boundary tensors always cross through DRAM; everything else fits in 4 MiB
    assert big["memory_plan"]["streamed"] == sorted({big["inputs"][0]["tensor"], big["outputs"][0]["tensor"]})


def test_mixed_region_runs_like_onnxruntime():
    """Sum2D with a constant operand, Concat, depthwise conv, leaky_relu and silu through convert ->
    JSON -> compile -> simulator, against onnxruntime on the original model."""
    import onnxruntime as ort
    from test_emit_json import mixed_model
    from onnx_mrvl.sim import Simulator
    model = mixed_model(seed=4)
    (sg,) = onnx_mrvl.convert(model).subgraphs
    x = np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, {"input": x})[0]
    got = Simulator(compile_json(sg.nodes_json, sg.consts_json)).run([x])[0]
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-2 * max(1.0, float(np.abs(ref).max())))


def test_perf_totals_follow_tiles_and_ocm_through_compile_and_simulator(fashion):
    """End to end: the same JSON compiled for more tiles or less on-chip memory; the simulator's
    performance totals move the way the model says (compute-bound layers ~halve with twice the
    tiles; a smaller OCM streams more bytes from DRAM, which costs cycles)."""
    from onnx_mrvl.sim import Simulator
    sg, _ = fashion

    def perf(tiles, ocm, overhead=None):
        meta, weights = build_program(sg.nodes_json, sg.consts_json, CompileOptions(num_tiles=tiles, ocm_size=ocm))
        if overhead is not None:
            meta["arch"]["layer_overhead_cycles"] = overhead
        sim = Simulator.from_program(meta, weights)
        sim.run([np.zeros((1, 1, 28, 28), np.float32)])
        return sim.last_perf

    # twice the tiles, same OCM per tile: every compute-bound layer's compute cycles halve
    p4, p8 = perf(4, 0x100000, 0), perf(8, 0x100000, 0)
    compute4 = {r.name: r for r in p4.layers if r.bound == "compute" and r.macs}
    assert compute4, "the example has compute-bound conv layers"
    for r in p8.layers:
        if r.name in compute4:
            assert r.compute_cycles == pytest.approx(compute4[r.name].compute_cycles / 2, rel=0.02, abs=1)
    assert p8.cycles < p4.cycles and p8.macs == p4.macs

    # less on-chip memory: more DRAM traffic and no fewer cycles, the memory-bound share grows
    big, small = perf(1, 0x100000), perf(1, 0x4000)
    assert small.dram_bytes > big.dram_bytes
    assert small.cycles >= big.cycles
    assert sum(r.memory_cycles for r in small.layers) > sum(r.memory_cycles for r in big.layers)
