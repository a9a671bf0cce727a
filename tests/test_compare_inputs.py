"""``onnx-mrvl compare``: non-finite mismatches are reported (counts and a reason, text and JSON),
the JSON is strict, and ``--input-shape`` / the defaults for symbolic input dimensions."""
import json
import os

import numpy as np
import onnx
import pytest
from onnx_mrvl.testing.models import F32, GraphBuilder

import onnx_mrvl
from onnx_mrvl.cli.main import main
from onnx_mrvl.errors import UsageError
from onnx_mrvl.inspection.compare import compare_models
from onnx_mrvl.inspection.inputs import feed_shapes
from onnx_mrvl.inspection.tensors import error_stats


def strict_loads(text):
    def bad(word):
        raise AssertionError(f"{word} in the JSON output")
    return json.loads(text, parse_constant=bad)


# ------------------------------------------------------------------------------------ error_stats
def test_error_stats_names_each_non_finite_mismatch():
    ref = np.array([1, 2, 3, 4, 5, np.inf, np.nan, -np.inf], np.float32)
    got = np.array([np.nan, np.nan, np.inf, 4, 5, -np.inf, 7, -np.inf], np.float32)
    s = error_stats(ref, got, 1e-4, 1e-2)
    assert not s["pass"] and s["max_abs"] == 0.0          # the finite values agree exactly
    assert (s["nan"], s["inf"], s["ref_nan"], s["ref_inf"]) == (2, 3, 1, 2)
    assert s["reason"] == ("2 NaN where the reference is finite; 1 +inf where the reference is finite; "
                           "1 finite value where the reference is NaN; "
                           "1 -inf where the reference is +inf")
    tol = error_stats(np.array([1.0, 2.0], np.float32), np.array([1.0, 2.5], np.float32), 0.0, 1e-2)
    assert tol["reason"] == "max_abs 0.5 > 0 + 0.01 * 2 = 0.02" and (tol["nan"], tol["inf"]) == (0, 0)
    both = error_stats(np.array([1.0, 2.0], np.float32), np.array([np.nan, 9.0], np.float32), 0.0, 1e-2)
    assert both["reason"].startswith("1 NaN where the reference is finite; max_abs 7 > ")
    ok = error_stats(np.array([np.inf, 1.0], np.float32), np.array([np.inf, 1.0], np.float32), 0, 0)
    assert ok["pass"] and "reason" not in ok and ok["inf"] == ok["ref_inf"] == 1
    ints = error_stats(np.arange(4), np.array([0, 1, 5, 5]), 0, 0)
    assert ints["reason"] == "2 of 4 values differ (integer tensors must be equal)"


# ------------------------------------------------------------------------------------ overflow
def overflowing_cnn():
    """A conv whose fp16 outputs overflow (|y| > 65504) where fp32 stays finite, then GAP."""
    g = GraphBuilder(5)
    x = g.conv("input", 3, 8, 3, "conv1", gain=15000.0)   # seed 5: one -inf
    x = g.node("GlobalAveragePool", [x], "gap")
    g.node("Flatten", [x], "flatten", axis=1)
    g.nodes[-1].output[0] = "output"
    return g.model("overflow", [("input", F32, [1, 3, 8, 8])], [("output", F32, [1, 8])])


@pytest.fixture(scope="module")
def overflow(tmp_path_factory):
    d = tmp_path_factory.mktemp("ovf")
    m = overflowing_cnn()
    onnx.save(m, str(d / "orig.onnx"))
    onnx_mrvl.convert(m).save(str(d / "out"))
    return str(d / "orig.onnx"), str(d / "out" / "model.onnx")


def test_compare_says_why_an_overflowing_tensor_fails(overflow, capsys):
    orig, conv = overflow
    res = compare_models(orig, conv)
    first = res.first_failure
    assert first is not None and first.tensor == "conv1_out"
    assert first.inf > 0 and first.ref_inf == 0 and first.nan == first.ref_nan == 0
    assert first.max_abs <= 1e-4 + 1e-2 * first.ref_max_abs    # the finite values are fine
    assert first.reason.endswith("inf where the reference is finite")
    assert first.reason == f"{first.inf} -inf where the reference is finite" or "+inf" in first.reason
    code = main(["compare", orig, conv])
    out = capsys.readouterr().out
    assert code == 1
    assert f"NaN 0 (reference 0), inf {first.inf} (reference 0): " in out
    assert "FAIL: first failing tensor 'conv1_out'" in out and "inf where the reference is finite" in \
        out.splitlines()[-1]


def test_compare_json_is_strict_and_carries_the_counts(overflow, capsys):
    orig, conv = overflow
    assert main(["compare", orig, conv, "--json"]) == 1
    text = capsys.readouterr().out
    doc = strict_loads(text)
    assert text.startswith('{\n "a": ')                       # the one style: strict_json, indent 1
    row = doc["first_failure"]
    assert row["tensor"] == "conv1_out" and row["inf"] > 0 and row["ref_inf"] == 0
    assert "inf where the reference is finite" in row["reason"]
    assert all({"nan", "inf", "ref_nan", "ref_inf", "reason"} <= set(t) for t in doc["tensors"])
    out_row = next(t for t in doc["tensors"] if t["tensor"] == "output")
    # GAP of an inf is inf: max_abs is over the values finite on both sides, within tolerance
    assert out_row["pass"] is False and out_row["inf"] > 0 and out_row["ref_inf"] == 0
    assert out_row["max_abs"] <= 1e-4 + 1e-2 * out_row["ref_max_abs"]


def test_compare_json_turns_non_finite_numbers_into_null_and_a_flag(overflow, capsys, monkeypatch):
    """max_rel is inf when the reference is all zeros: before, compare --json printed Infinity."""
    import onnx_mrvl.inspection.compare as C
    orig, conv = overflow
    real = C.compare_models

    def with_inf(*args, **kw):
        res = real(*args, **kw)
        res.rows[0].max_rel = float("inf")
        return res
    monkeypatch.setattr(C, "compare_models", with_inf)
    assert main(["compare", orig, conv, "--json"]) == 1
    doc = strict_loads(capsys.readouterr().out)
    row = doc["tensors"][0]
    assert row["max_rel"] is None and row["max_rel_non_finite"] == "inf"
    assert doc["non_finite"] == {"/tensors/0/max_rel": "inf", "/first_failure/max_rel": "inf"}


# ------------------------------------------------------------------------------------ input shapes
def reshape_net():
    """x[N,3,H,W] -> Conv -> Relu -> Reshape [1, 4096]: only H*W = 1024 runs (32x32)."""
    g = GraphBuilder(3)
    x = g.relu(g.conv("x", 3, 4, 3, "conv1"), "relu1")
    g.node("Reshape", [x, g.const("shape", np.array([1, 4096], np.int64))], "flat")
    g.nodes[-1].output[0] = "y"
    return g.model("symbolic", [("x", F32, ["N", 3, "H", "W"])], [("y", F32, [1, 4096])],
                   value_info=[("conv1_out", F32, ["N", 4, "H", "W"]),
                               ("relu1_out", F32, ["N", 4, "H", "W"])])


@pytest.fixture(scope="module")
def symbolic(tmp_path_factory):
    d = tmp_path_factory.mktemp("sym")
    m = reshape_net()
    onnx.save(m, str(d / "orig.onnx"))
    onnx_mrvl.convert(m, input_shapes={"x": [1, 3, 32, 32]}).save(str(d / "out"))
    return str(d / "orig.onnx"), str(d / "out" / "model.onnx")


def test_feed_shapes_rules():
    m = reshape_net()
    with pytest.raises(UsageError, match=r"symbolic dimension\(s\) 2 \(H\), 3 \(W\)") as info:
        feed_shapes(m)
    assert "--input-shape x:<N>,3,<H>,<W>" in info.value.hint
    assert feed_shapes(m, None, {"x": [2, 3, 32, 32]}) == {"x": [2, 3, 32, 32]}
    for bad in ({"x": [1, 4, 32, 32]}, {"x": [1, 3, 32]}, {"x": [1, 3, 0, 32]}):
        with pytest.raises(UsageError, match="does not fit input 'x'"):
            feed_shapes(m, None, bad)
    with pytest.raises(UsageError, match=r"names \['z'\]"):
        feed_shapes(m, None, {"z": [1]})
    fixed = reshape_net()
    for d, v in zip(fixed.graph.input[0].type.tensor_type.shape.dim, (1, 3, 32, 32)):
        d.dim_value = v
    assert feed_shapes(m, fixed) == {"x": [1, 3, 32, 32]}   # the converted model's sizes
    batch_only = reshape_net()
    for d, v in zip(batch_only.graph.input[0].type.tensor_type.shape.dim[2:], (32, 32)):
        d.dim_value = v
    assert feed_shapes(batch_only) == {"x": [1, 3, 32, 32]}  # a symbolic batch is 1 (documented)


def test_compare_symbolic_inputs_take_the_converted_models_shape(symbolic):
    orig, conv = symbolic
    res = compare_models(orig, conv)
    assert res.passed, res.to_text()
    assert res.inputs == {"x": [1, 3, 32, 32]} and len(res.rows) >= 2


def test_cli_input_shape(symbolic, capsys):
    orig, conv = symbolic
    # A against itself: nothing fixes H and W -> a clear error (exit 3), not a crash
    assert main(["compare", orig, orig]) == 3
    err = capsys.readouterr().err
    assert "input 'x' has symbolic dimension(s) 2 (H), 3 (W)" in err and "--input-shape x:" in err
    assert main(["compare", orig, orig, "--input-shape", "x:1,3,32,32", "--json"]) == 0
    doc = strict_loads(capsys.readouterr().out)
    assert doc["pass"] and doc["inputs"] == {"x": [1, 3, 32, 32]}
    assert main(["compare", orig, conv, "--input-shape", "x:1,3,32,32"]) == 0
    capsys.readouterr()
    assert main(["compare", orig, conv, "--input-shape", "x:1,3,16,16"]) == 3   # B is built for 32x32
    assert "does not fit the converted model, which takes [1, 3, 32, 32]" in capsys.readouterr().err
    assert main(["compare", orig, orig, "--input-shape", "x:1,3,64"]) == 3
    assert "does not fit input 'x'" in capsys.readouterr().err
    # a size the reference itself cannot run: onnxruntime's reason, as a user error (exit 3)
    assert main(["compare", orig, orig, "--input-shape", "x:1,3,16,16"]) == 3
    err = capsys.readouterr().err
    assert "onnxruntime cannot run the reference model on inputs {'x': [1, 3, 16, 16]}" in err
    assert "internal error" not in err
    np.savez(os.path.join(os.path.dirname(conv), "in.npz"), x=np.zeros((1, 3, 32, 32), np.float32))
    assert main(["compare", orig, conv, "--inputs", os.path.join(os.path.dirname(conv), "in.npz"),
                 "--input-shape", "x:1,3,32,32"]) == 3
    assert "--input-shape and --inputs" in capsys.readouterr().err


def test_run_compare_names_non_finite_outputs(overflow, capsys):
    """run --compare: the overflowing output fails with its reason, its max_abs over finite values."""
    orig, conv = overflow
    assert main(["run", conv, "--compare", orig]) == 1
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("output:"))
    assert "FAIL (1 -inf where the reference is finite)" in line and "max abs nan" not in line
    assert main(["run", conv, "--compare", orig, "--json"]) == 1
    cmp_ = strict_loads(capsys.readouterr().out)["outputs"][0]["compare"]
    assert cmp_["pass"] is False and cmp_["inf"] == 1 and cmp_["ref_inf"] == 0
    assert cmp_["reason"] == "1 -inf where the reference is finite" and cmp_["max_abs"] is not None
