"""Models with If / Loop bodies convert into models onnxruntime loads and runs.

Bodies read outer tensors by name. Before the fix, fuse wrote an outer conv region's output under its
logical name in NHWC storage, so a body read [1,16,16,8] for a [1,8,16,16] tensor (wrong numbers, or
onnxruntime refusing the model when a body's op checked the shape). Bodies with static shapes are
converted too (bodies.py): their convs run in regions whose Subgraph nodes sit inside the body.
"""
import numpy as np
import onnxruntime as ort
import pytest

import onnx
import onnx_mrvl
from onnx_mrvl.split.deploy import is_subgraph

from onnx_mrvl.testing import control_flow_models as cfm  # onnx_mrvl.testing.control_flow_models


def _feeds(model, extra, seed=1):
    rng = np.random.default_rng(seed)
    x = model.graph.input[0]
    feeds = {x.name: rng.standard_normal([d.dim_value for d in x.type.tensor_type.shape.dim]).astype(np.float32)}
    for vi in model.graph.input[1:]:
        if vi.name in extra:
            feeds[vi.name] = extra[vi.name]
        elif vi.type.tensor_type.elem_type == 1:
            feeds[vi.name] = rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32)
    return feeds


def _body_subgraphs(model):
    """{attribute name: Subgraph nodes} of the bodies of the main graph's nodes."""
    out = {}
    for n in model.graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                out[a.name] = [x for x in a.g.node if is_subgraph(x)]
    return out


def _check(model, tmp_path, runs, regions, **kw):
    result = onnx_mrvl.convert(model, **kw)
    path = result.save(str(tmp_path))
    assert len(result.subgraphs) == regions
    for sg in result.subgraphs:
        assert (tmp_path / sg.artifact).exists()
    sess = onnx_mrvl.InferenceSession(path)        # loads: bodies and their outer reads are valid
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for extra in runs:
        feeds = _feeds(model, extra)
        for got, want in zip(sess.run(None, feeds), ref.run(None, feeds)):
            assert got.shape == want.shape
            assert np.abs(got - want).max() <= 1e-2 * np.abs(want).max()
    return result


@pytest.mark.parametrize("computed", [False, True])
def test_if_with_conv_branches(tmp_path, computed):
    model = cfm.if_convs(computed_cond=computed)
    runs = [{}] if computed else [{"cond": np.array(True)}, {"cond": np.array(False)}]
    result = _check(model, tmp_path, runs, regions=4)       # 2 outer + one per branch
    ifs = [n for n in result.model.graph.node if n.op_type == "If"]
    assert len(ifs) == 1
    assert result.report.decisions["conv0"].placement == "accelerator"
    reason = result.report.decisions["If_0"].reason
    assert "control flow (If)" in reason and "then_branch: 1 regions" in reason and "else_branch: 1 regions" in reason
    bodies = _body_subgraphs(result.model)
    assert len(bodies["then_branch"]) == len(bodies["else_branch"]) == 1
    # the branches still read the outer tensor 'y' by its own name, written in the logical layout
    assert list(bodies["then_branch"][0].input) == ["y"]
    names = {r["name"] for r in result.report.to_dict()["regions"]}
    assert {"If_0.then_branch.mrvl_region_0", "If_0.else_branch.mrvl_region_0"} <= names


def test_nested_if_regions_load_from_their_artifacts(tmp_path):
    """An If inside an If branch: its regions are renamed with both prefixes, and so are the
    artifacts their Subgraph nodes (inside the inner body) name (they named the inner prefix only:
    ArtifactError at load, openWakeWord's Silero VAD)."""
    model = cfm.nested_if_convs()
    runs = [{"outer": np.array(o), "cond": np.array(c)} for o in (True, False) for c in (True, False)]
    result = _check(model, tmp_path, runs, regions=6)       # 2 outer, outer then / else, inner then / else
    names = {r["name"] for r in result.report.to_dict()["regions"]}
    assert {"If_outer.then_branch.If_0.then_branch.mrvl_region_0",
            "If_outer.then_branch.If_0.else_branch.mrvl_region_0"} <= names
    inner = next(n for n in next(a.g for a in next(n for n in result.model.graph.node if n.op_type == "If").attribute
                                 if a.name == "then_branch").node if n.op_type == "If")
    arts = {x.s.decode() for a in inner.attribute for n in a.g.node if is_subgraph(n) for x in n.attribute
            if x.name == "artifact"}
    assert arts == {"If_outer.then_branch.If_0.then_branch.mrvl_region_0.bin",
                    "If_outer.then_branch.If_0.else_branch.mrvl_region_0.bin"}


@pytest.mark.parametrize("batch", [1, 2])
def test_if_on_a_static_shape_is_inlined(tmp_path, batch):
    """``If(Shape(y)[0] == 1)`` with the batch fixed by input_shapes: the taken branch's nodes replace
    the If (nested Ifs too; a branch passing y on leaves no Identity): one region, no If, and the
    numbers of onnxruntime on the original model. (A condition computed from data keeps its If:
    test_if_with_conv_branches.)"""
    from onnx_mrvl.legalize import legalize
    model = cfm.shape_if_convs()
    shapes = {"x": [batch, 3, 16, 16]}
    legal = legalize(model, input_shapes=shapes)
    ops = [n.op_type for n in legal.model.graph.node]
    assert "If" not in ops and "Identity" not in ops
    convs = {n.name for n in legal.model.graph.node if n.op_type == "Conv"}
    assert convs == ({"conv0", "inner_conv", "then_conv", "conv_out"} if batch == 1 else {"conv0", "conv_out"})
    result = onnx_mrvl.convert(model, input_shapes=shapes)
    path = result.save(str(tmp_path))
    assert len(result.subgraphs) == 1 and not result.report.cpu_nodes()
    x = np.random.default_rng(3).standard_normal(shapes["x"]).astype(np.float32)
    got = onnx_mrvl.InferenceSession(path).run(None, {"x": x})[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-2 * np.abs(want).max()


def test_if_bodies_stay_on_the_cpu_with_reference_bodies(tmp_path):
    result = _check(cfm.if_convs(), tmp_path, [{"cond": np.array(True)}], regions=2, reference=True)
    assert "bodies on the CPU (not converted with reference=True)" in result.report.decisions["If_0"].reason
    assert not any(_body_subgraphs(result.model).values())


@pytest.mark.parametrize("dynamic", [False, True])
def test_loop_with_conv_body(tmp_path, dynamic):
    model = cfm.loop_conv(dynamic=dynamic)
    runs = [{"M": np.array(4, np.int64)}, {"M": np.array(1, np.int64)}] if dynamic else [{}]
    result = _check(model, tmp_path, runs, regions=3)       # the body's conv + MatMul: one region
    assert "control flow (Loop)" in result.report.decisions["Loop_0"].reason
    assert "body: 1 regions (body_conv, body_relu" in result.report.decisions["Loop_0"].reason
    assert len(_body_subgraphs(result.model)["body"]) == 1


def test_vad_like_lstm_branches_read_outer_conv(tmp_path):
    """An LSTM in each branch over the outer conv front end: the body sees [T, N, C] as declared;
    each branch's LSTM is a recurrent layer in a region of its own body."""
    model = cfm.vad_like()
    result = _check(model, tmp_path, [{"sr": np.array(16000, np.int64)}, {"sr": np.array(8000, np.int64)}],
                    regions=3)
    bodies = _body_subgraphs(result.model)
    assert len(bodies["then_branch"]) == len(bodies["else_branch"]) == 1
    reason = result.report.decisions["If_0"].reason
    assert "then_branch: 1 regions" in reason and "else_branch: 1 regions" in reason


def test_vad_branches_offload_their_convs(tmp_path):
    """Silero-VAD shape: each branch holds conv front end + LSTM + conv head, all one region inside
    its branch (the LSTM a recurrent layer between the convs)."""
    model = cfm.vad_branches()
    runs = [{"sr": np.array(16000, np.int64)}, {"sr": np.array(8000, np.int64)}]
    result = _check(model, tmp_path, runs, regions=2)
    bodies = _body_subgraphs(result.model)
    assert len(bodies["then_branch"]) == len(bodies["else_branch"]) == 1
    for a in result.model.graph.node[-1].attribute:
        assert "LSTM" not in [n.op_type for n in a.g.node]


def test_body_without_static_shapes_stays_on_the_cpu(tmp_path):
    """A Loop body whose carried value has a symbolic dimension is kept as it was, with the reason."""
    model = cfm.loop_conv()
    body = next(a.g for a in model.graph.node[1].attribute if a.name == "body")
    body.input[2].type.tensor_type.shape.dim[2].dim_param = "H"
    result = _check(model, tmp_path, [{}], regions=2)
    reason = result.report.decisions["Loop_0"].reason
    assert "body on the CPU (ShapeError" in reason and "non-static dimension" in reason
    assert not _body_subgraphs(result.model)["body"]


def test_excluded_op_type_stays_on_the_cpu_inside_bodies(tmp_path):
    """exclude=["Conv"] reaches the bodies: nothing is offloaded anywhere."""
    result = onnx_mrvl.convert(cfm.if_convs(), exclude=["Conv"])
    assert not result.subgraphs
    assert "then_branch on the CPU (nothing in it runs on the accelerator)" in result.report.decisions["If_0"].reason


def test_body_macs_count_in_the_report():
    """The VAD's convs are all inside its branches: the report counts them (every branch once)."""
    result = onnx_mrvl.convert(cfm.vad_branches())
    assert result.report.macs_total > 0 and result.report.offload_fraction == 1.0   # conv / fc MACs


def test_loop_reading_an_offloaded_feature_map_loads(tmp_path):
    """The symptom of the issue: a decoder Loop reads the encoder's output from the outer scope; with
    that tensor written NHWC under its own name onnxruntime refused the converted model at load
    (the body's MatMul shape inference: 'Graph attribute inferencing failed')."""
    model = cfm.loop_reads_feature_map()
    result = _check(model, tmp_path, [{}], regions=2)       # outer conv; the body's MatMul on [1,8,4,6]
    assert result.report.decisions["conv0"].placement == "accelerator"


def test_region_error_inside_a_body_raises(tmp_path):
    """A region inside an If branch runs guarded like the outer ones: its failure is our
    MrvlRuntimeError from run(), never a placeholder or a process abort."""
    from onnx_mrvl.errors import MrvlRuntimeError
    model = cfm.if_convs(computed_cond=False)
    path = onnx_mrvl.convert(model).save(str(tmp_path))
    sess = onnx_mrvl.InferenceSession(path)
    body = [p for p in sess._mrvl_programs if ".then_branch." in p.region]
    assert len(body) == 1
    prog = body[0]
    good = prog.simulator.run

    def broken(inputs, **kw):
        raise ValueError("forced failure inside the then branch")
    prog.simulator.run = broken
    try:
        feeds = _feeds(model, {"cond": np.array(True)})
        with pytest.raises(MrvlRuntimeError, match="forced failure inside the then branch"):
            sess.run(None, feeds)
        ok = sess.run(None, _feeds(model, {"cond": np.array(False)}))   # the other branch still runs
        assert all(np.isfinite(o).all() for o in ok)
    finally:
        prog.simulator.run = good
