"""The command line tells user mistakes (exit 3 with a Fix: line, or 2 for usage) from our bugs
(exit 4), checks names and sizes instead of accepting typos, takes -v/-q after the command and
prints strict JSON. Calls ``main([...])`` in-process."""
import argparse
import json
import os

import numpy as np
import onnx
import pytest
from onnx import helper

import onnx_mrvl
from onnx_mrvl.cli.common import parse_size, strict_json
from onnx_mrvl.cli.main import main
from onnx_mrvl.errors import UsageError
from onnx_mrvl.legalize.testing import make_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "fashion_mnist.onnx")   # input 'input' [1, 1, 28, 28]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    """A converted example: OUT_DIR with model.onnx, the region's JSON pair and binary, and inputs."""
    d = tmp_path_factory.mktemp("conv")
    onnx_mrvl.convert(EXAMPLE).save(str(d / "out"))
    x = np.random.default_rng(0).standard_normal((1, 1, 28, 28)).astype(np.float32)
    np.savez(d / "in.npz", input=x)
    return d


def _strict(text: str):
    def refuse(const):
        raise AssertionError(f"not strict JSON: {const}")
    return json.loads(text, parse_constant=refuse)


def _err(capsys) -> str:
    return capsys.readouterr().err


# ---- user mistakes are exit 3 with a Fix: line, not "internal error, please report it" -----------

@pytest.mark.parametrize("kind", ["missing", "truncated", "not_onnx"])
def test_run_compare_with_missing_or_truncated_model_is_a_user_error(out, kind, capsys):
    ref = out / f"{kind}.onnx"
    if kind == "truncated":
        ref.write_bytes(open(EXAMPLE, "rb").read()[:500])
    elif kind == "not_onnx":
        ref.write_text("hello")
    code = main(["run", str(out / "out" / "model.onnx"), "--compare", str(ref)])
    err = _err(capsys)
    assert code == 3, err
    assert "--compare" in err and "Fix:" in err and "please report" not in err


@pytest.mark.parametrize("arrays,words", [
    ({"input": np.zeros((1, 1, 27, 28), np.float32)}, ["shape [1, 1, 27, 28]", "[1, 1, 28, 28]"]),
    ({"input": np.zeros((1, 1, 28), np.float32)}, ["shape [1, 1, 28]"]),
    ({"input": np.zeros((1, 1, 28, 28), np.float64)}, ["float64", "float32"]),
    ({"inptu": np.zeros((1, 1, 28, 28), np.float32)}, ["no array for input 'input'", "rename the array 'inptu'"]),
    ({"input": np.zeros((1, 1, 28, 28), np.float32), "mask": np.zeros(3, np.float32)}, ["['mask']"]),
])
def test_run_inputs_that_do_not_fit_the_model_are_user_errors(out, tmp_path, arrays, words, capsys):
    np.savez(tmp_path / "x.npz", **arrays)
    code = main(["run", str(out / "out" / "model.onnx"), "--inputs", str(tmp_path / "x.npz")])
    err = _err(capsys)
    assert code == 3, err
    assert "Fix:" in err and "please report" not in err
    for w in words:
        assert w in err


def test_run_npy_for_a_model_of_two_inputs_is_a_user_error(tmp_path, capsys):
    model = make_model([helper.make_node("Add", ["a", "b"], ["y"], name="add")], [("a", [1, 4]), ("b", [1, 4])], ["y"])
    onnx.save(model, str(tmp_path / "add.onnx"))
    onnx_mrvl.convert(str(tmp_path / "add.onnx")).save(str(tmp_path / "o"))
    np.save(tmp_path / "a.npy", np.zeros((1, 4), np.float32))
    assert main(["run", str(tmp_path / "o" / "model.onnx"), "--inputs", str(tmp_path / "a.npy")]) == 3
    assert "takes 2 inputs" in _err(capsys)


def test_run_compare_with_a_model_of_other_inputs_is_a_user_error(out, tmp_path, capsys):
    other = make_model([helper.make_node("Relu", ["x"], ["output"], name="r")], [("x", [1, 1, 28, 28])], ["output"])
    onnx.save(other, str(tmp_path / "other.onnx"))
    code = main(["run", str(out / "out" / "model.onnx"), "--compare", str(tmp_path / "other.onnx")])
    err = _err(capsys)
    assert code == 3, err
    assert "no input 'input'" in err and "'x'" in err and "Fix:" in err
    shaped = make_model([helper.make_node("Relu", ["input"], ["output"], name="r")], [("input", [1, 1, 32, 32])],
                        ["output"])
    onnx.save(shaped, str(tmp_path / "shaped.onnx"))
    assert main(["run", str(out / "out" / "model.onnx"), "--compare", str(tmp_path / "shaped.onnx")]) == 3
    assert "[1, 1, 32, 32]" in _err(capsys)


# ---- typos are refused: node names, tile counts, sizes --------------------------------------------

@pytest.mark.parametrize("flag,name,close", [("--exclude", "conv_1", "conv1"), ("--cut-after", "Relu2", "relu2"),
                                             ("--exclude", "conv", "Conv")])
def test_convert_names_that_match_nothing_are_refused_with_close_matches(out, flag, name, close, capsys):
    code = main(["convert", EXAMPLE, "-o", str(out / "typo"), flag, name])
    err = _err(capsys)
    assert code == 3, err
    assert repr(name) in err and repr(close) in err and "Fix:" in err
    assert not (out / "typo").exists()


def test_convert_api_refuses_unknown_names_and_takes_a_bare_string():
    with pytest.raises(UsageError, match="did you mean 'conv1'"):
        onnx_mrvl.convert(EXAMPLE, exclude=["conv_1"])
    with pytest.raises(UsageError, match="cut_after"):
        onnx_mrvl.convert(EXAMPLE, cut_after=["nothing"])
    res = onnx_mrvl.convert(EXAMPLE, exclude="conv1")       # one name, not the letters c, o, n, ...
    assert res.report.decisions["conv1"].placement == "cpu"
    assert onnx_mrvl.convert(EXAMPLE, exclude=["Conv"]).report.decisions["conv2"].placement == "cpu"


def test_stage_fuse_checks_exclude_names(out, capsys):
    assert main(["convert", EXAMPLE, "-o", str(out / "st"), "--stage", "fuse", "--exclude", "pool9"]) == 3
    err = _err(capsys)
    assert "'pool9'" in err and "Fix:" in err
    assert not (out / "st").exists()


@pytest.mark.parametrize("argv", [["--num-tiles", "0"], ["--ocm-size", "0"], ["--num-tiles", "-2"],
                                  ["--ocm-size", "2X"], ["--ocm-size", "1.5M"]])
def test_convert_zero_or_bad_arch_options_are_usage_errors(out, argv, capsys):
    assert main(["convert", EXAMPLE, "-o", str(out / "z"), *argv]) == 2
    err = _err(capsys)
    assert "usage:" in err and argv[0] in err
    if argv[0] == "--ocm-size":
        assert "512K" in err and "1MiB" in err and "<lambda>" not in err


def test_compile_zero_tiles_is_a_usage_error_and_sizes_take_units(out, tmp_path, capsys):
    pair = ["--nodes", str(out / "out" / "mrvl_region_0-nodes.json"),
            "--consts", str(out / "out" / "mrvl_region_0-consts.json")]
    assert main(["compile", *pair, "-o", str(tmp_path / "a.bin"), "--num-tiles", "0"]) == 2
    assert main(["compile", *pair, "-o", str(tmp_path / "a.bin"), "--ocm-size", "0x0"]) == 2
    capsys.readouterr()
    assert main(["compile", *pair, "-o", str(tmp_path / "a.bin"), "--ocm-size", "1MiB"]) == 0
    assert main(["compile", *pair, "-o", str(tmp_path / "b.bin"), "--ocm-size", "1048576"]) == 0
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()


def test_convert_api_refuses_zero_tiles_and_ocm():
    for kw in ({"num_tiles": 0}, {"ocm_size": 0}, {"ocm_size": -1}):
        with pytest.raises(UsageError, match="positive"):
            onnx_mrvl.convert(EXAMPLE, **kw)


def test_parse_size_forms():
    assert parse_size("1M") == parse_size("1MiB") == parse_size("1mb") == parse_size("0x100000") == 1 << 20
    assert parse_size("512K") == parse_size("512KiB") == 512 * 1024
    assert parse_size("2G") == 2 << 30 and parse_size("4096") == 4096
    for bad in ("2X", "", "1.5M", "M", "0", "-1", "0x0"):
        with pytest.raises(argparse.ArgumentTypeError, match="512K"):
            parse_size(bad)


# ---- -v / -q work after the command too -------------------------------------------------------------

def test_verbose_and_quiet_after_the_command(out, capsys):
    assert main(["convert", EXAMPLE, "-o", str(out / "v"), "-v"]) == 0
    err = _err(capsys)
    assert "INFO onnx_mrvl" in err and "] legalize" in err   # logging and per-stage progress
    assert main(["-v", "convert", EXAMPLE, "-o", str(out / "v2"), "-v"]) == 0
    assert "INFO onnx_mrvl" in _err(capsys)
    assert main(["convert", EXAMPLE, "-o", str(out / "q"), "-q"]) == 0
    assert _err(capsys) == ""
    assert main(["run", str(out / "out" / "model.onnx"), "-q", "--repeat", "2", "-v"]) == 0
    assert main(["diff", EXAMPLE, EXAMPLE, "-v"]) == 0


# ---- strict JSON ------------------------------------------------------------------------------------

def test_strict_json_nulls_non_finite_values_with_flags():
    text = strict_json({"a": float("nan"), "b": [1.0, float("inf")], "c": {"d": np.float32("-inf")},
                        "e": np.int64(3), "f": np.arange(2)})
    data = _strict(text)
    assert data["a"] is None and data["a_non_finite"] == "nan"
    assert data["b"] == [1.0, None] and data["c"] == {"d": None, "d_non_finite": "-inf"}
    assert data["e"] == 3 and data["f"] == [0, 1]
    assert data["non_finite"] == {"/a": "nan", "/b/1": "inf", "/c/d": "-inf"}
    assert "non_finite" not in _strict(strict_json({"a": 1.5}))


def test_run_json_is_strict_when_outputs_are_not_finite(tmp_path, capsys):
    model = make_model([helper.make_node("Log", ["x"], ["y"], name="log")], [("x", [1, 8])], ["y"])
    onnx.save(model, str(tmp_path / "log.onnx"))
    onnx_mrvl.convert(str(tmp_path / "log.onnx")).save(str(tmp_path / "o"))
    np.savez(tmp_path / "in.npz", x=-np.ones((1, 8), np.float32))       # log(-1) = NaN
    code = main(["run", str(tmp_path / "o" / "model.onnx"), "--inputs", str(tmp_path / "in.npz"), "--json"])
    data = _strict(capsys.readouterr().out)
    assert code == 0
    entry = data["outputs"][0]
    assert entry["min"] is None and entry["min_non_finite"] == "nan" and "/outputs/0/mean" in data["non_finite"]


@pytest.mark.parametrize("command", ["convert", "run", "compile", "sim", "diff", "report"])
def test_every_json_output_is_strict_with_one_indentation(out, tmp_path, command, capsys):
    o = out / "out"
    argv = {"convert": ["convert", EXAMPLE, "-o", str(tmp_path / "c")],
            "run": ["run", str(o / "model.onnx"), "--compare", EXAMPLE],
            "compile": ["compile", "--nodes", str(o / "mrvl_region_0-nodes.json"),
                        "--consts", str(o / "mrvl_region_0-consts.json"), "-o", str(tmp_path / "x.bin")],
            "sim": ["sim", "-m", str(o / "mrvl_region_0.bin"), "--inputs", str(_region_inputs(out)),
                    "-o", str(tmp_path / "s")],
            "diff": ["diff", EXAMPLE, str(o / "model.onnx")],
            "report": ["report", str(o)]}[command]
    code = main([*argv, "--json"])
    text = capsys.readouterr().out
    assert code in (0, 1)
    data = _strict(text)
    assert text == strict_json(data) + "\n"      # the one writer: indent 1, no NaN


def _region_inputs(out):
    path = out / "region_in.npz"
    if not path.exists():
        from onnx_mrvl.sim import Simulator
        sim = Simulator(str(out / "out" / "mrvl_region_0.bin"))
        rng = np.random.default_rng(1)
        np.savez(path, **{n: rng.standard_normal(s).astype(np.float32) for n, s in zip(sim.input_names,
                                                                                      sim.input_shapes)})
    return path


# ---- the exit-code table holds for every subcommand -------------------------------------------------

def _argv(command, code, out, tmp):
    o = out / "out"
    model, region = str(o / "model.onnx"), str(o / "mrvl_region_0.bin")
    pair = ["--nodes", str(o / "mrvl_region_0-nodes.json"), "--consts", str(o / "mrvl_region_0-consts.json")]
    missing = str(tmp / "missing.onnx")
    table = {
        "convert": {0: ["convert", EXAMPLE, "-o", str(tmp / "c")], 2: ["convert", EXAMPLE],
                    3: ["convert", missing, "-o", str(tmp / "c")]},
        "run": {0: ["run", model, "--compare", EXAMPLE],
                1: ["run", model, "--compare", EXAMPLE, "--tolerance", "0", "--atol", "0"],
                2: ["run", model, "--repeat", "0"], 3: ["run", missing]},
        "compile": {0: ["compile", *pair, "-o", str(tmp / "x.bin")], 2: ["compile", *pair],
                    3: ["compile", "--nodes", missing, "--consts", missing, "-o", str(tmp / "x.bin")]},
        "sim": {0: ["sim", "-m", region, "--inputs", str(_region_inputs(out)), "-o", str(tmp / "s")],
                2: ["sim", "-m", region], 3: ["sim", "-m", str(tmp / "missing.bin"), "--inputs", str(out / "in.npz")]},
        "diff": {0: ["diff", EXAMPLE, EXAMPLE], 1: ["diff", EXAMPLE, model], 2: ["diff", EXAMPLE],
                 3: ["diff", EXAMPLE, missing]},
        "compare": {0: ["compare", EXAMPLE, model], 1: ["compare", EXAMPLE, model, "--atol", "0", "--rtol", "0"],
                    2: ["compare", EXAMPLE, model, "--atol", "x"], 3: ["compare", EXAMPLE, missing]},
        "report": {0: ["report", str(o)], 2: ["report"], 3: ["report", str(tmp / "nowhere")]},
    }
    return table[command][code]


# exit 4: an internal function raising a plain exception (a bug of ours)
INTERNAL = {"convert": "onnx_mrvl.pipeline.convert", "run": "onnx_mrvl.ep.InferenceSession",
            "compile": "onnx_mrvl.emit.build_program", "sim": "onnx_mrvl.sim.Simulator",
            "diff": "onnx_mrvl.inspection.diff.diff_models", "compare": "onnx_mrvl.inspection.compare.compare_models",
            "report": "onnx_mrvl.inspection.offload.offload_report"}


CODES = {"convert": (0, 2, 3, 4), "run": (0, 1, 2, 3, 4), "compile": (0, 2, 3, 4), "sim": (0, 2, 3, 4),
         "diff": (0, 1, 2, 3, 4), "compare": (0, 1, 2, 3, 4), "report": (0, 2, 3, 4)}


@pytest.mark.parametrize("command,code", [(c, k) for c in sorted(CODES) for k in CODES[c]])
def test_exit_code_table(out, tmp_path, command, code, capsys, monkeypatch):
    if code == 4:
        def boom(*args, **kwargs):
            raise RuntimeError("simulated bug")
        monkeypatch.setattr(INTERNAL[command], boom)
        argv = _argv(command, 0, out, tmp_path)
    else:
        argv = _argv(command, code, out, tmp_path)
    got = main(argv)
    err = capsys.readouterr().err
    assert got == code, err
    if code == 3:
        assert "error:" in err and "Traceback" not in err and "please report" not in err
    if code == 4:
        assert "internal error: RuntimeError: simulated bug" in err and "please report" in err
    if code == 2:
        assert "usage:" in err
    if code in (2, 3, 4):   # with --json the error is the one JSON object on stdout too
        assert main([*argv, "--json"]) == code
        got = capsys.readouterr()
        error = _strict(got.out)["error"]
        assert error["exit_code"] == code and error["command"] == command and error["message"], got.out
        assert error["type"] == {2: "usage", 4: "internal"}.get(code, error["type"])
        assert (code != 3) or (error["fix"] and error["type"].endswith("Error")), error
        assert "Traceback" not in got.err


def test_every_error_of_the_table_has_a_fix_line(out, tmp_path, capsys):
    missed = {}
    for command in INTERNAL:
        assert main(_argv(command, 3, out, tmp_path)) == 3
        err = capsys.readouterr().err
        if "\n  Fix: " not in err:
            missed[command] = err
    assert not missed


def test_check_feeds_takes_any_size_on_symbolic_dims_only():
    from onnx_mrvl.feeds import check_feeds, input_mismatches
    spec = [("x", ["N", 4], np.float32)]
    check_feeds({"x": np.ones((3, 4), np.float32)}, spec)
    with pytest.raises(UsageError, match=r"takes \['\?', 4\]"):
        check_feeds({"x": np.ones((3, 5), np.float32)}, spec)
    with pytest.raises(UsageError, match="unknown \\['y'\\]"):
        check_feeds({"x": np.ones((3, 4), np.float32), "y": np.ones(1)}, spec)
    assert input_mismatches(spec, [("x", [7, 4], np.float32)]) == []
    assert input_mismatches(spec, [("x", [7, 4, 1], np.float32)]) and input_mismatches(spec, [("x", [1, 4], np.int64)])


def test_internal_error_traceback_with_vv(monkeypatch, capsys):
    def boom(*args, **kwargs):
        raise KeyError("bug")
    monkeypatch.setattr("onnx_mrvl.inspection.diff.diff_models", boom)
    assert main(["diff", EXAMPLE, EXAMPLE, "-vv"]) == 4
    err = capsys.readouterr().err
    assert "Traceback" in err and "please report" in err
    assert main(["diff", EXAMPLE, EXAMPLE]) == 4
    assert "Traceback" not in capsys.readouterr().err


def test_cut_after_takes_fused_node_names_exclude_does_not():
    res = onnx_mrvl.convert(EXAMPLE, cut_after=["mrvl_pool1"])      # the fused name split matches
    assert len(res.subgraphs) == 2
    with pytest.raises(UsageError, match="'mrvl_pool1'"):
        onnx_mrvl.convert(EXAMPLE, exclude=["mrvl_pool1"])         # fuse never sees it: it would do nothing


def test_per_channel_dq_below_opset_13_names_the_node_and_the_way_out():
    """onnxruntime's quantize_static (per_channel=True) writes DequantizeLinear with ``axis`` into an
    opset 11 model (paddle2onnx's PP-OCRv6 / seal det exports); onnxruntime refuses it too. The
    error names the node and says to raise the float model to opset 13 first."""
    from onnx_mrvl.errors import ModelError
    w = np.arange(12, dtype=np.int8).reshape(4, 3)
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wf"], name="w_DequantizeLinear", axis=0),
             helper.make_node("Add", ["x", "wf"], ["y"], name="add")]
    m = make_model(nodes, [("x", [4, 3])], ["y"], {"w": w, "s": np.full(4, 0.1, np.float32),
                                                  "z": np.zeros(4, np.int8)}, opset=11)
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 3]))
    with pytest.raises(ModelError) as e:
        onnx_mrvl.convert(m)
    assert "w_DequantizeLinear" in str(e.value) and "per-channel" in str(e.value)
    assert "opset 13" in (e.value.hint or "")
