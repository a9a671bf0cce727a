"""QDQ placements of quantization toolkits other than onnxruntime's (docs/surveys/qdq-toolkits.md):
NNCF's Q/DQ on the inputs of the weighted ops, float BN + activation between a Conv and the next
layer's input quantizer (onnx_mrvl/testing/nncf_qdq.py)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.testing import nncf_qdq


@pytest.fixture(scope="module")
def nncf_chain(tmp_path_factory):
    m = nncf_qdq.chain(size=24)
    r = onnx_mrvl.convert(m)
    out = tmp_path_factory.mktemp("nncf") / "out"
    r.save(str(out))
    return m, r, onnx_mrvl.InferenceSession(str(out / "model.onnx"))


def test_nncf_chain_structure(nncf_chain):
    """One region, nothing on the CPU; the convs whose float chain (BN, HardSwish / Relu) ends in the
    next layer's input quantizer are int8-in layers that apply that Q -> DQ in their epilogue."""
    _, r, _ = nncf_chain
    assert len(r.report.regions) == 1
    # the model output's Q -> DQ is the host's (docs/partition.md), as for onnxruntime's QDQ models
    assert sorted(d.node for d in r.report.cpu_nodes()) == ["out_DQ", "out_Q"]
    d = r.report.decisions
    for name in ("conv1", "dw", "pw"):
        assert d[name].precision == "int8 in, fp16 out"
        assert "applied to its fp32 result" in d[name].reason
    assert d["hs_Q"].mrvl_node == d["dw"].mrvl_node   # the next layer still quantizes its input itself


def test_nncf_chain_codes_identical_to_onnxruntime(nncf_chain):
    """The output codes equal onnxruntime's run of the QDQ model (before: the next layer quantized
    the fp16-rounded activation and codes near a rounding tie flipped, then spread)."""
    m, _, sess = nncf_chain
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    step = np.float32(6.0 / 127)
    same = total = 0
    for seed in range(6):
        f = nncf_qdq.feeds(seed, 24)
        a, b = ref.run(None, f)[0], sess.run(None, f)[0]
        assert np.abs(a - b).max() <= step * 1.001   # the rest within one output step
        same, total = same + int(np.count_nonzero(a == b)), total + a.size
    # measured: 100% (before: 99.29%, max one step; the flips grow layer by layer in a deep model)
    assert same / total >= 0.9995
