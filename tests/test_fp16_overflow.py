"""fp16 overflow fails closed at run time: a region whose fp16 values overflow (finite inputs,
inf/NaN out) raises ``MrvlRuntimeError`` naming the layer and its original nodes, unless the user
asks for the device's infs (``fp16_overflow="inf"`` / ``run --allow-overflow``)."""
import os

import numpy as np
import pytest

import onnx_mrvl
from onnx_mrvl.cli.main import main
from onnx_mrvl.errors import MrvlRuntimeError, UsageError
from onnx_mrvl.testing.models import F32, GraphBuilder


def _overflowing(tmp_path):
    """Conv (weights 300, no bias) -> GlobalAveragePool -> Flatten: an input of 10 sums to
    300 * 10 * 27 = 81000 > 65504 inside the window: inf in fp16, finite in fp32."""
    g = GraphBuilder(0)
    y = g.node("Conv", ["input", g.const("w", np.full((4, 3, 3, 3), 300.0, np.float32))], "big_conv",
               pads=[1, 1, 1, 1])
    y = g.node("GlobalAveragePool", [y], "gap")
    g.node("Flatten", [y], "flatten", axis=1)
    g.nodes[-1].output[0] = "output"
    m = g.model("overflow", [("input", F32, [1, 3, 8, 8])], [("output", F32, [1, 4])])
    out = str(tmp_path / "out")
    onnx_mrvl.convert(m).save(out)
    return os.path.join(out, "model.onnx")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return _overflowing(tmp_path_factory.mktemp("ovf"))


def test_overflow_raises_naming_the_layer(model):
    sess = onnx_mrvl.InferenceSession(model)
    x = np.full((1, 3, 8, 8), 10.0, np.float32)
    with pytest.raises(MrvlRuntimeError, match="fp16 overflow") as e:
        sess.run(None, {"input": x})
    assert "big_conv" in str(e.value) and "exclude" in str(e.value)
    small = np.full((1, 3, 8, 8), 0.01, np.float32)         # the same session still runs good inputs
    (y,) = sess.run(None, {"input": small})
    assert np.isfinite(y).all()


def test_overflow_flows_on_when_asked(model, caplog):
    sess = onnx_mrvl.InferenceSession(model, fp16_overflow="inf")
    (y,) = sess.run(None, {"input": np.full((1, 3, 8, 8), 10.0, np.float32)})
    assert np.isinf(y).any()
    assert any("fp16 overflow" in m for m in caplog.messages)


def test_bad_policy_is_a_usage_error(model):
    with pytest.raises(UsageError, match="fp16_overflow"):
        onnx_mrvl.InferenceSession(model, fp16_overflow="ignore")


def test_cli_run_exit_codes(model, tmp_path, capsys):
    inp = str(tmp_path / "in.npz")
    np.savez(inp, input=np.full((1, 3, 8, 8), 10.0, np.float32))
    assert main(["run", model, "--inputs", inp]) == 3
    assert "fp16 overflow" in capsys.readouterr().err
    assert main(["run", model, "--inputs", inp, "--allow-overflow"]) == 0
