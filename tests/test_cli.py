"""The onnx-mrvl command line: help everywhere, exit codes, JSON output."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "fashion_mnist.onnx")


def cli(*args, check=None):
    proc = subprocess.run([sys.executable, "-m", "onnx_mrvl.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    if check is not None:
        assert proc.returncode == check, proc.stdout + proc.stderr
    return proc


def _commands():
    from onnx_mrvl.cli.main import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(sub.choices)


def test_top_level_help_lists_commands():
    out = cli("--help", check=0).stdout
    for name in ("convert", "run", "compile", "sim", "diff"):
        assert name in out


@pytest.mark.parametrize("command", _commands())
def test_every_command_has_help(command):
    proc = cli(command, "--help", check=0)
    assert "usage:" in proc.stdout


def test_usage_error_exit_code():
    assert cli("convert", check=2).returncode == 2
    assert cli(check=2).returncode == 2


def test_bad_model_is_exit_3(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model at all")
    proc = cli("convert", str(bad), "-o", str(tmp_path / "out"), check=3)
    assert "error" in proc.stderr and "Traceback" not in proc.stderr


def test_convert_run_compare_json(tmp_path):
    out = tmp_path / "out"
    proc = cli("convert", EXAMPLE, "-o", str(out), "--json", check=0)
    summary = json.loads(proc.stdout)
    assert summary["offload_fraction"] == 1.0 and len(summary["regions"]) == 1
    np.savez(tmp_path / "in.npz", input=np.random.default_rng(0).random((1, 1, 28, 28), dtype=np.float32))
    proc = cli("run", str(out / "model.onnx"), "--inputs", str(tmp_path / "in.npz"), "--compare", EXAMPLE,
               "--json", check=0)
    report = json.loads(proc.stdout)
    assert report["outputs"][0]["compare"]["pass"] is True
    assert report["regions"][0]["simulated_cycles_per_call"] > 0


def test_convert_explain_and_stage(tmp_path):
    proc = cli("convert", EXAMPLE, "-o", str(tmp_path / "o"), "--explain", check=0)
    assert "conv1" in proc.stdout and "removed" in proc.stdout
    cli("convert", EXAMPLE, "-o", str(tmp_path / "l"), "--stage", "legalize", check=0)
    assert (tmp_path / "l" / "legalize.onnx").exists()


def test_compile_from_saved_json(tmp_path):
    out = tmp_path / "out"
    cli("convert", EXAMPLE, "-o", str(out), check=0)
    cli("compile", "--nodes", str(out / "mrvl_region_0-nodes.json"), "--consts", str(out / "mrvl_region_0-consts.json"),
        "-o", str(tmp_path / "again.bin"), check=0)
    assert (tmp_path / "again.bin").read_bytes() == (out / "mrvl_region_0.bin").read_bytes()


def test_run_fails_comparison_with_exit_1(tmp_path):
    out = tmp_path / "out"
    cli("convert", EXAMPLE, "-o", str(out), check=0)
    proc = cli("run", str(out / "model.onnx"), "--compare", EXAMPLE, "--tolerance", "1e-9", "--atol", "0")
    assert proc.returncode == 1 and "FAIL" in proc.stdout


def test_run_compare_has_an_absolute_floor_for_outputs_near_zero(tmp_path):
    """An output far below fp16's range (random-init nets can end there) flushes to 0 on the
    accelerator: that passes under the absolute part of the tolerance (as in `compare`), and
    fails only when it is switched off."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32) * 1e-9, "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    src, out = tmp_path / "tiny.onnx", tmp_path / "out"
    onnx.save(model, str(src))
    cli("convert", str(src), "-o", str(out), check=0)
    proc = cli("run", str(out / "model.onnx"), "--compare", str(src), "--json", check=0)
    cmp_ = json.loads(proc.stdout)["outputs"][0]["compare"]
    assert cmp_["pass"] and 0 < cmp_["ref_max_abs"] < 1e-6 and cmp_["max_rel"] > 0.5
    assert cli("run", str(out / "model.onnx"), "--compare", str(src), "--atol", "0").returncode == 1
