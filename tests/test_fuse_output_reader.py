"""fuse/materialize: a graph output stored permuted in its region (converted on the host for the user)
that an accelerator op also reads is converted in the region for that op, not read back from the
host's copy (which cut the model: arabic-name-romanizer's encoder 2 regions -> 1)."""
import numpy as np
import onnxruntime as ort

import onnx_mrvl
from onnx_mrvl.testing.output_readers import batch_first_memory


def test_accelerator_reader_of_a_permuted_graph_output_stays_in_the_region(tmp_path):
    m = batch_first_memory()
    rng = np.random.default_rng(3)
    f = {"x": rng.standard_normal((6, 2, 16)).astype(np.float32),
         "m": (rng.random((2, 6, 1)) > 0.3).astype(np.float32)}
    refs = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)
    conv = onnx_mrvl.convert(m)
    assert len(conv.report.regions) == 1
    assert not list(conv.report.cpu_nodes())
    # the host transposes the output for the user only (a cut after the region, none between)
    assert all(c["position"] == "after" for c in conv.report.cuts), conv.report.cuts
    outs = onnx_mrvl.InferenceSession(conv.save(str(tmp_path / "out"))).run(None, f)
    for y, ref in zip(outs, refs):
        assert y.shape == ref.shape
        assert np.abs(y - ref).max() <= 1e-2 * np.abs(ref).max()
