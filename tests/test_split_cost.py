"""The cost model: its terms, its use by partition="cost", and the CPU calibration file."""
import json
import os

import numpy as np
import pytest

from onnx_mrvl.graph_index import GraphIndex
from onnx_mrvl.errors import ModelError
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from onnx_mrvl.pipeline import convert
from onnx_mrvl.split import cost, node_macs
from onnx_mrvl.target import CPU_PROFILE_ENV, DEFAULT_TARGET, CpuProfile, Target
from test_split_strategies import chain_model, check_deployable


def _load_tool(name):
    """A script of tools/ (not a package module: it is run as ``python tools/<name>.py``)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


calibrate_cpu = _load_tool("calibrate_cpu")


def _fused_graph(model):
    return GraphIndex(fuse(legalize(model)).model)


def test_estimate_terms_add_up():
    g = _fused_graph(chain_model())
    nodes = [n for n in g.nodes if n.domain == "mrvl"]
    convs = [n for n in nodes if n.op_type == "Conv2D"]
    assert [node_macs(g, n) for n in convs] == [8 * 8 * 8 * 3 * 9] + [8 * 8 * 8 * 8 * 9] * 3
    est = cost.estimate(g, nodes, DEFAULT_TARGET)
    arch = DEFAULT_TARGET.arch
    assert est["macs"] == sum(node_macs(g, n) for n in convs)
    assert est["cycles"] >= len(nodes) * arch.layer_overhead_cycles
    assert est["transfer_s"] == pytest.approx((1 * 3 * 8 * 8 + 1 * 8 * 8 * 8) * 4 / arch.transfer_bytes_per_s)
    assert est["accel_s"] == pytest.approx(est["accel_compute_s"] + est["transfer_s"] + arch.call_overhead_s)
    cpu = DEFAULT_TARGET.cpu
    assert est["cpu_s"] > est["macs"] / cpu.macs_per_s
    assert est["offload"] == (est["accel_s"] < est["cpu_s"])
    assert cost.describe(est).startswith("cost model: accelerator ")


def test_slower_accelerator_or_faster_cpu_keeps_less():
    m = chain_model()
    base = convert(m, partition="cost", reference=True)
    assert len(base.report.regions) == 1             # 110k MACs: worth it on the default profiles
    slow = DEFAULT_TARGET.with_arch(call_overhead_s=1.0)
    r = convert(m, partition="cost", target=slow, reference=True)
    assert r.report.regions == [] and any(d["reason"].startswith("cost model") for d in r.report.dropped)
    check_deployable(m, r)
    fast_cpu = Target(cpu=CpuProfile(macs_per_s=1e14, bytes_per_s=1e14, op_overhead_s=1e-9))
    assert convert(m, partition="cost", target=fast_cpu).report.regions == []
    assert len(convert(m, partition="max", target=slow).report.regions) == 1   # "max" ignores costs


def test_default_target_ignores_calibration_files(tmp_path, monkeypatch):
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"macs_per_s": 1e9, "bytes_per_s": 2e9, "op_overhead_s": 3e-6, "measured": []}))
    monkeypatch.setenv(CPU_PROFILE_ENV, str(path))
    assert Target().cpu == CpuProfile() and DEFAULT_TARGET.cpu.source == "default"
    t = Target().with_calibration()                 # explicit: the env var's file
    assert (t.cpu.macs_per_s, t.cpu.bytes_per_s, t.cpu.op_overhead_s) == (1e9, 2e9, 3e-6)
    assert t.cpu.source == str(path) and t.arch == DEFAULT_TARGET.arch
    assert Target().with_calibration(str(path)).cpu == t.cpu


@pytest.mark.parametrize("content", ["not json", json.dumps({"macs_per_s": -1}), json.dumps({"other": 1})])
def test_bad_calibration_file_is_a_clear_error(tmp_path, content):
    path = tmp_path / "cpu.json"
    path.write_text(content)
    with pytest.raises(ModelError, match="calibrate_cpu"):
        Target().with_calibration(str(path))
    with pytest.raises(ModelError, match="calibrate_cpu"):
        Target().with_calibration(str(tmp_path / "missing.json"))


def test_fit_recovers_known_parameters():
    rng = np.random.default_rng(0)
    truth = {"macs_per_s": 5e10, "bytes_per_s": 2e10, "op_overhead_s": 1e-6, "run_overhead_s": 8e-6}
    rows = []
    for _ in range(12):
        macs, moved, ops = int(rng.integers(0, 5e7)), int(rng.integers(100, 3e7)), int(rng.integers(1, 64))
        t = (macs / truth["macs_per_s"] + moved / truth["bytes_per_s"] + ops * truth["op_overhead_s"]
             + truth["run_overhead_s"])
        rows.append((macs, moved, ops, t))
    got = calibrate_cpu.fit(rows)
    for k, v in truth.items():
        assert got[k] == pytest.approx(v, rel=1e-3)


def test_calibration_tool_writes_a_loadable_profile(tmp_path):
    out = tmp_path / "cpu.json"
    assert calibrate_cpu.main(["--quick", "--repeats", "3", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["measured"]) >= 9 and all(m["seconds"] > 0 for m in data["measured"])
    prof = CpuProfile.load(str(out))
    assert 1e8 < prof.macs_per_s < 1e14 and prof.bytes_per_s > 0 and prof.op_overhead_s > 0


def test_compiled_estimate_uses_the_simulator_cycle_model():
    from onnx_mrvl.costmodel import perf_report
    from onnx_mrvl.artifact import load
    r = convert(chain_model(), partition="cost")
    est = r.report.regions[0]["estimate"]
    binary = r.subgraphs[0].binary
    sim = cost.compiled_estimate(est, binary)
    rep = perf_report(load(binary).meta)
    assert sim["cycles"] == rep.cycles and sim["source"] == "simulator"
    assert sim["accel_s"] == pytest.approx(rep.latency_s + est["transfer_s"] + est["call_overhead_s"])
    assert sim["offload"] == (sim["accel_s"] < sim["cpu_s"]) and sim["cpu_s"] == est["cpu_s"]
    assert sim["macs"] == rep.macs == est["macs"]
    # the pre-compile estimate applies the same cycle formula without the compiler's OCM plan
    assert est["cycles"] == pytest.approx(rep.cycles, rel=0.1)


def test_convtranspose_left_on_the_cpu_counts_its_macs():
    """A ConvTranspose legalize cannot decompose (1x1 kernel, stride 2, cropping pads) stays on the CPU: its MACs are in the
    total, so the offload fraction says the model is not fully offloaded."""
    from onnx import helper
    from onnx_mrvl.legalize.testing import make_model
    r = np.random.default_rng(0)
    m = make_model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                    helper.make_node("ConvTranspose", ["c", "wt"], ["y"], name="ct", kernel_shape=[1, 1],
                                     strides=[2, 2], pads=[1, 1, 1, 1])],
                   [("x", [1, 3, 8, 8])], ["y"],
                   {"w": r.standard_normal((4, 3, 3, 3)).astype(np.float32),
                    "wt": r.standard_normal((4, 5, 1, 1)).astype(np.float32)})
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", 1, [1, 5, 13, 13]))
    res = convert(m)
    assert res.report.decisions["ct"].placement == "cpu"
    conv, ct = 8 * 8 * 4 * 3 * 9, 8 * 8 * 4 * 5 * 1
    assert res.report.macs_total == conv + ct
    assert res.report.offload_fraction == pytest.approx(conv / (conv + ct))
