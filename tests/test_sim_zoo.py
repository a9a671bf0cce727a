"""The simulator on every model-zoo architecture the onnx wheel ships (seeded random weights):
converted, run through onnxruntime + the simulator, and held to the practical fp16 tolerance that
docs/simulator.md states (``max |y_sim - y_ref| <= 1e-2 * max |y_ref|``, "Error bound")."""
import os
import tempfile

import numpy as np
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.testing.randomize_weights import load_zoo, random_inputs, zoo_model_paths

TOL = 1e-2          # docs/simulator.md, "Practical tolerance"
ZOO = sorted(zoo_model_paths())


@pytest.mark.skipif(not ZOO, reason="the onnx wheel has no light model-zoo files")
@pytest.mark.parametrize("name", ZOO)
def test_zoo_architecture_matches_fp32_within_the_stated_fp16_bound(name):
    model = load_zoo(name, 0)
    feeds = random_inputs(model, seed=1)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    result = onnx_mrvl.convert(model)
    assert result.subgraphs, f"{name}: nothing offloaded"
    with tempfile.TemporaryDirectory() as d:
        result.save(d)
        sess = onnx_mrvl.InferenceSession(os.path.join(d, "model.onnx"))
        got = sess.run(None, feeds)
        assert sum(s["calls"] for s in sess.mrvl_stats()) >= len(result.subgraphs)
    for g, r in zip(got, ref):
        assert g.shape == r.shape
        err, scale = float(np.abs(g - r).max()), float(np.abs(r).max())
        assert np.isfinite(g).all() and err <= TOL * scale, (name, err, scale)
    # the fp16 path is really taken: not bit-exact with fp32 on a conv net
    assert any(float(np.abs(g - r).max()) > 0 for g, r in zip(got, ref))
