"""tools/speed_sweep.py: one row per manifest line, timings and ratio for a model that runs, its
error for one that does not, and exit code 1 when any row failed."""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_rows_for_a_model_that_runs_and_one_that_does_not(tmp_path):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["c"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "conv.onnx"))
    np.savez(tmp_path / "conv_feeds.npz", rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
    (tmp_path / "list.txt").write_text(f"conv|{tmp_path}/conv.onnx|{tmp_path}/conv_feeds.npz|src\n"
                                       f"missing|{tmp_path}/none.onnx|{tmp_path}/conv_feeds.npz\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "speed_sweep.py"), str(tmp_path / "list.txt"),
                        "--rounds", "2"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=dict(os.environ, TMPDIR=str(tmp)))
    left = list(tmp.glob("speed-sweep-*"))
    assert not left, left                                      # the converted models' folders removed
    rows = [r for r in p.stdout.splitlines() if r.startswith("| conv") or r.startswith("| missing")]
    assert p.returncode == 1, p.stdout + p.stderr              # the missing model's row failed
    assert len(rows) == 2, p.stdout
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[0] == "conv" and float(cells[1]) > 0 and float(cells[2]) > 0 and cells[4] == "1"
    ratio = float(cells[1]) / float(cells[2])                  # times of 3 significant digits
    assert abs(float(cells[3]) - ratio) <= 0.03 * ratio + 0.005
    assert rows[1].split("|")[2].strip() == "-" and "none.onnx" in rows[1]
