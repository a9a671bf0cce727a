"""``onnx-mrvl compare``: per-tensor errors of converted models against the original, layouts mapped,
regions compared layer by layer on the simulator, and a deliberately broken layer named first."""
import base64
import hashlib
import json
import os
import shutil

import numpy as np
import onnx
import pytest
from onnx_mrvl.testing.models import fashion_mnist_cnn, tiny_cnn

import onnx_mrvl
from onnx_mrvl.cli.main import main
from onnx_mrvl.inspection.compare import compare_models
from onnx_mrvl.inspection.tensors import NHWC, Storage, error_stats, logical_name


def _convert(model, out, **kw):
    result = onnx_mrvl.convert(model, **kw)
    result.save(str(out), stages=True)
    return result


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """tiny_cnn (one region), tiny_cnn with pool1 on the CPU (two regions), fashion-MNIST (a folded
    Transpose before Flatten), each with its original next to it."""
    base = tmp_path_factory.mktemp("cmp")
    out = {}
    for key, build, kw in (("tiny", tiny_cnn, {}), ("split", tiny_cnn, {"exclude": ["pool1"]}),
                           ("fashion", fashion_mnist_cnn, {})):
        d = base / key
        d.mkdir()
        m = build()
        onnx.save(m, str(d / "orig.onnx"))
        out[key] = (str(d / "orig.onnx"), str(d / "out"), _convert(m, d / "out", **kw))
    return out


def test_deployable_model_passes_with_every_layer_compared(converted):
    orig, out, result = converted["tiny"]
    res = compare_models(orig, os.path.join(out, "model.onnx"))
    names = [r.tensor for r in res.rows]
    assert names == ["relu1_out", "pool1_out", "conv2_out", "gap_out", "flatten_out", "output"]
    assert res.passed and res.first_failure is None
    by = {r.tensor: r for r in res.rows}
    # inside the region only the simulator sees the tensors; the region output is visible to onnxruntime
    assert [r.source for r in res.rows] == ["simulator"] * 5 + ["onnxruntime"]
    assert by["relu1_out"].origin == ["conv1", "relu1"] and by["relu1_out"].storage == "NHWC"
    assert by["output"].is_output and by["output"].region == "mrvl_region_0"
    for r in res.rows:  # fp16 is not exact, but well within the fp16-aware tolerance
        assert 0 < r.max_abs <= 1e-4 + 1e-2 * r.ref_max_abs and r.max_rel < 5e-3 and r.cosine > 0.9999
    # 7 layers: the input layout change is skipped, the FC layer is the region output (onnxruntime row)
    assert res.regions == [{"region": "mrvl_region_0", "layers": 7, "compared": 6}]
    outer = compare_models(orig, os.path.join(out, "model.onnx"), simulate=False)
    assert [(r.tensor, r.source) for r in outer.rows] == [("output", "onnxruntime")] and not outer.regions
    assert outer.rows[0].max_abs == by["output"].max_abs    # same inputs, same simulator, same numbers


def test_fused_stage_runs_in_plain_onnxruntime_and_maps_nhwc_tensors(converted):
    orig, out, _ = converted["tiny"]
    res = compare_models(orig, os.path.join(out, "stage-fuse.onnx"))
    assert res.passed and all(r.source == "onnxruntime" for r in res.rows)
    by = {r.tensor: r for r in res.rows}
    assert by["conv2_out"].storage == "NHWC" and by["conv2_out"].b_node == "mrvl_conv2"
    assert all(r.max_abs < 1e-4 for r in res.rows)   # fp32 reference bodies
    # the legalized stage keeps every tensor of the original
    leg = compare_models(orig, os.path.join(out, "stage-legalize.onnx"))
    assert leg.passed and len(leg.rows) == 7 and max(r.max_abs for r in leg.rows) < 1e-5


def test_flatten_after_a_folded_transpose_compares_in_the_right_element_order(converted):
    orig, out, _ = converted["fashion"]
    for b in ("model.onnx", "stage-fuse.onnx"):
        res = compare_models(orig, os.path.join(out, b))
        by = {r.tensor: r for r in res.rows}
        assert res.passed, res.to_text()
        # Transpose(NCHW->NHWC) folded into the NHWC storage: the stored order *is* the flatten's input
        # order, so no un-permuting (un-permuting as NHWC gave cosine 0.52 before this was handled)
        assert by["flatten_out"].cosine > 0.9999 and by["flatten_out"].max_rel < 5e-3
        assert "NHWC" not in by["flatten_out"].storage


def test_two_regions_with_a_cpu_node_between(converted):
    orig, out, _ = converted["split"]
    res = compare_models(orig, os.path.join(out, "model.onnx"))
    assert res.passed
    assert [r["region"] for r in res.regions] == ["mrvl_region_0", "mrvl_region_1"]
    by = {r.tensor: r for r in res.rows}
    assert by["pool1_out"].source == "onnxruntime" and by["pool1_out"].b_node == "pool1"
    assert by["conv2_out"].source == "simulator" and by["conv2_out"].region == "mrvl_region_1"
    assert by["relu1_out"].b_tensor == "relu1_out__nchw"   # region output handed to the CPU in NCHW


def _break_layer(out_dir, original_node, scale=1.0, seed=0):
    """Alter the kernel of the layer that ``original_node`` went into in <region>-consts.json,
    recompile with ``onnx-mrvl compile``, replace the .bin and update the node's sha256 (and drop
    manifest.json: the folder no longer holds the files of one conversion, on purpose)."""
    os.remove(os.path.join(out_dir, "manifest.json"))
    with open(os.path.join(out_dir, "report.json")) as f:
        dec = {d["node"]: d for d in json.load(f)["nodes"]}[original_node]
    region, layer = dec["subgraph"], dec["layer"]
    cpath = os.path.join(out_dir, f"{region}-consts.json")
    with open(cpath) as f:
        consts = json.load(f)
    key = max((k for k in consts if k.startswith(layer + "_const_")),
              key=lambda k: int(np.prod(consts[k]["shape"])))
    w = np.frombuffer(base64.b64decode(consts[key]["data_base64"]), np.float32).copy()
    w += scale * w.std() * np.random.default_rng(seed).standard_normal(w.shape).astype(np.float32)
    consts[key].update(data_base64=base64.b64encode(w.tobytes()).decode(), min=str(w.min()), max=str(w.max()))
    with open(cpath, "w") as f:
        json.dump(consts, f)
    binary = os.path.join(out_dir, f"{region}.bin")
    assert main(["compile", "--nodes", os.path.join(out_dir, f"{region}-nodes.json"), "--consts", cpath,
                 "-o", binary]) == 0
    model_path = os.path.join(out_dir, "model.onnx")
    m = onnx.load(model_path)
    node = next(n for n in m.graph.node if n.name == region)
    attr = next(a for a in node.attribute if a.name == "sha256")
    with open(binary, "rb") as f:
        attr.s = hashlib.sha256(f.read()).hexdigest().encode()
    onnx.save(m, model_path)
    return region, layer


@pytest.mark.parametrize("key", ["tiny", "split"])
def test_altered_weights_name_that_layer_first(converted, tmp_path, key, capsys):
    orig, out, _ = converted[key]
    broken = str(tmp_path / "broken")
    shutil.copytree(out, broken)
    region, layer = _break_layer(broken, "conv2")
    res = compare_models(orig, os.path.join(broken, "model.onnx"))
    first = res.first_failure
    assert first is not None and first.tensor == "conv2_out"
    assert first.source == "simulator" and first.b_node == layer and first.region == region
    assert first.origin == ["conv2"] and first.max_rel > 0.05 and first.cosine < 0.999
    by = {r.tensor: r for r in res.rows}
    assert by["relu1_out"].passed and by["pool1_out"].passed and not by["output"].passed
    # the CLI: exit code 1, the first failing tensor and its original nodes named; --json is pure JSON
    assert main(["compare", orig, broken]) == 1
    text = capsys.readouterr().out
    assert f"FAIL: first failing tensor 'conv2_out' (layer {layer} of region {region}; original nodes: conv2)" in text
    assert main(["compare", orig, broken, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["pass"] is False and data["first_failure"]["tensor"] == "conv2_out"
    assert data["first_failure"]["origin"] == ["conv2"] and data["summary"]["failed"] >= 2
    # a tolerance loose enough accepts it (the rule is max_abs <= atol + rtol * max|ref|)
    assert main(["compare", orig, broken, "--rtol", "10", "--json"]) == 0
    capsys.readouterr()


def test_cli_inputs_file_embedded_binary_and_errors(converted, tmp_path, capsys):
    orig, _, _ = converted["tiny"]
    emb = tmp_path / "emb"
    _convert(onnx.load(orig), emb, embed=True)
    os.remove(emb / "mrvl_region_0.bin")             # embedded: the file is not needed
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "in.npz", input=x)
    assert main(["compare", orig, str(emb / "model.onnx"), "--inputs", str(tmp_path / "in.npz"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pass"] and data["seed"] is None and data["inputs"] == {"input": [1, 3, 32, 32]}
    assert data["summary"]["simulator"] == 5 and data["regions"][0]["compared"] == 6
    np.savez(tmp_path / "bad.npz", other=x)
    assert main(["compare", orig, str(emb / "model.onnx"), "--inputs", str(tmp_path / "bad.npz")]) == 3
    assert "has no array for input 'input'" in capsys.readouterr().err
    assert main(["compare", orig, str(tmp_path / "missing.onnx")]) == 3


def test_storage_maps_nhwc_and_flattened_nhwc_back():
    x = np.random.default_rng(0).standard_normal((1, 4, 3, 5)).astype(np.float32)
    stored = x.transpose(NHWC)
    assert np.array_equal(Storage(NHWC).to_logical(stored, x.shape), x)
    flat = np.ascontiguousarray(stored).reshape(1, -1)
    got = Storage(flat_from=stored.shape, flat_perm=NHWC).to_logical(flat, (1, 60))
    assert np.array_equal(got, x.reshape(1, 60))
    assert Storage(NHWC).to_logical(stored, (1, 4, 5, 3)) is None      # shapes that do not map
    assert logical_name("a__nhwc_3") == "a" and logical_name("a__nchw") == "a" and logical_name("a_nhwc") == "a_nhwc"


def test_error_stats_rule_and_edge_cases():
    ref = np.array([1.0, -2.0, 4.0], np.float32)
    s = error_stats(ref, ref + np.float32(0.03), atol=0.0, rtol=1e-2)
    assert s["pass"] and abs(s["max_abs"] - 0.03) < 1e-6 and abs(s["max_rel"] - 0.0075) < 1e-6
    assert not error_stats(ref, ref + np.float32(0.05), atol=0.0, rtol=1e-2)["pass"]
    assert error_stats(ref, -ref, 1e-4, 1e-2)["cosine"] == pytest.approx(-1.0)
    inf = np.array([np.inf, 1.0], np.float32)
    assert error_stats(inf, inf, 1e-4, 1e-2)["pass"]
    bad = error_stats(inf, np.array([1.0, 1.0], np.float32), 1e-4, 1e-2)
    assert not bad["pass"] and bad["nonfinite_mismatch"] == 1
    ints = np.array([1, 2, 3])
    assert error_stats(ints, ints, 0, 0)["pass"] and not error_stats(ints, ints + 1, 1, 1)["pass"]
    zeros = np.zeros(4, np.float32)
    assert error_stats(zeros, zeros + np.float32(5e-5), 1e-4, 1e-2)["pass"]


def test_each_slice2d_layer_of_a_split_compares_against_its_own_output(tmp_path):
    """A Split becomes one Slice2D layer per output, all with the Split as origin: each layer is
    compared with the output whose channel range it reads (not the Split's first output)."""
    from test_emit_json import split_model

    m = split_model()
    onnx.save(m, str(tmp_path / "orig.onnx"))
    res = compare_models(str(tmp_path / "orig.onnx"), onnx_mrvl.convert(m).save(str(tmp_path / "out")))
    rows = {r.tensor: r for r in res.rows}
    assert not res.unmapped and res.first_failure is None
    assert rows["a"].source == rows["b"].source == "simulator" and rows["a"].b_node != rows["b"].b_node


def _alter_layer(monkeypatch, name, change):
    """compare sees ``change(value)`` as the simulator's output of layer ``name``."""
    from onnx_mrvl.inspection import compare as cmp

    capture = cmp.capture_region

    def altered(*args, **kw):
        layers, meta = capture(*args, **kw)
        for layer in layers:
            if layer["name"] == name:
                layer["value"] = change(layer["value"])
        return layers, meta

    monkeypatch.setattr(cmp, "capture_region", altered)


def _if_two_outputs(tmp_path, joined=False):
    from onnx_mrvl.testing.control_flow_models import if_two_outputs

    m = if_two_outputs(joined=joined)
    orig = str(tmp_path / "orig.onnx")
    onnx.save(m, orig)
    out = onnx_mrvl.convert(m, input_shapes={"state": [1, 8]}).save(str(tmp_path / "out"))
    return orig, out


def test_each_output_of_an_inlined_if_compares_against_its_own_layer(tmp_path, monkeypatch, capsys):
    """An If decided at convert time (Silero VAD's state batch test) inlines its branch: two layers,
    both with the If as origin, hold its outputs a and b. Each is compared with the output its
    readers read (the If's first output for both: b's Sigmoid against a's Tanh, a false FAIL with
    cosine 0.80 on this model and 0.68 on Silero VAD's LSTM state); a wrong value in b's layer still fails."""
    orig, out = _if_two_outputs(tmp_path)
    shape = ["--input-shape", "state:1,8"]
    res = compare_models(orig, out, input_shapes={"state": [1, 8]})
    rows = {r.tensor: r for r in res.rows}
    assert res.passed and not res.unmapped, res.to_text()
    assert rows["a"].source == rows["b"].source == "simulator" and rows["a"].b_node != rows["b"].b_node
    assert rows["a"].origin == rows["b"].origin == ["pick"]
    assert min(rows[t].cosine for t in "ab") > 0.9999
    assert main(["compare", orig, out, *shape]) == 0
    capsys.readouterr()
    assert main(["compare", orig, out, *shape, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pass"] is True
    # the layer holding b computes a wrong value: b is the first failing tensor, a still passes
    _alter_layer(monkeypatch, rows["b"].b_node, lambda v: v * np.float32(1.1))
    res = compare_models(orig, out, input_shapes={"state": [1, 8]})
    assert res.first_failure.tensor == "b" and res.first_failure.b_node == rows["b"].b_node
    assert {r.tensor: r for r in res.rows}["a"].passed
    assert main(["compare", orig, out, *shape, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["first_failure"]["tensor"] == "b"


def test_a_layer_whose_output_of_a_multi_output_node_is_unknown_is_listed_not_compared(tmp_path):
    """``a + b`` the only reader of b: b's layer is read by a node reading both outputs, so which one
    it holds is not known -> not compared, with the reason (a, read alone by another node, is)."""
    orig, out = _if_two_outputs(tmp_path, joined=True)
    res = compare_models(orig, out, input_shapes={"state": [1, 8]})
    assert res.passed and "a" in {r.tensor for r in res.rows} and "b" not in {r.tensor for r in res.rows}
    assert len(res.unmapped) == 1
    assert "If 'pick' has outputs ['a', 'b']" in res.unmapped[0]["reason"]
    assert "its readers read ['a', 'b']" in res.unmapped[0]["reason"]


@pytest.mark.parametrize("samples,unnamed", [(28, False), (40, False), (28, True)])
def test_slices_of_a_1d_conv_compare_in_their_stored_order(tmp_path, samples, unnamed, monkeypatch):
    """A Conv1d's NHWC output squeezed to [1, W, C], then sliced / multiplied in the program (no
    declared layout): each layer carries the conv's order ([1, W, K] for a [1, K, W] slice). 28
    samples make the slices square (6 frames, 6 bins): they were compared as stored (5 false FAILs,
    cosine -0.10 .. 0.53); 40 (9 frames) listed them as not compared (shapes differ). Unnamed
    Slices are found by the name legalization gives them (``Slice_1``; they were not compared)."""
    from onnx_mrvl.testing.log_mel_models import stft_magnitude

    m = stft_magnitude(samples=samples, unnamed=unnamed)
    orig = str(tmp_path / "orig.onnx")
    onnx.save(m, orig)
    out = onnx_mrvl.convert(m).save(str(tmp_path / "out"))
    res = compare_models(orig, out)
    rows = {r.tensor: r for r in res.rows}
    assert res.passed, res.to_text()
    assert {"re", "im", "re2", "im2", "mag"} <= set(rows)
    assert all(rows[t].source == "simulator" and rows[t].cosine > 0.9999 for t in ("re", "im", "mag"))
    assert rows["im"].origin == (["Slice_2"] if unnamed else ["im"])
    assert not [u for u in res.unmapped if u["tensor"].startswith("mrvl_region")]
    # a wrong value in the layer holding ``im`` still fails there first
    _alter_layer(monkeypatch, rows["im"].b_node, lambda v: v[..., ::-1].copy())
    first = compare_models(orig, out).first_failure
    assert first.tensor == "im" and first.b_node == rows["im"].b_node


def test_carry_order_keeps_or_gives_up_the_stored_order():
    """stored_order.carry_order on program layers (no declared layout) after a Conv1d's NHWC output
    [1, 1, W, C] (logical [1, C, 1, W]): carried through unit reshapes, slices and reshapes; a slice
    of regrouped data is not known, and neither is what reads it (nothing maps: not compared)."""
    from onnx_mrvl.inspection.stored_order import carry_order
    from onnx_mrvl.inspection.tensors import LOGICAL, UNKNOWN

    def layer(kind, in_shape, out_shape):
        return {"layer_name": kind, "in_shape": in_shape, "value": np.zeros(out_shape, np.float32),
                "storage": LOGICAL}

    conv = Storage(NHWC)
    x = np.random.default_rng(0).standard_normal((1, 6, 1, 5)).astype(np.float32)   # logical [1, C, 1, W]
    sq = carry_order(layer("Squeeze", (1, 1, 5, 6), (1, 5, 6)), conv, None, {})
    assert np.array_equal(sq.to_logical(x.transpose(NHWC).reshape(1, 5, 6), (1, 6, 5)), x.reshape(1, 6, 5))
    half = carry_order(layer("Slice2D", (1, 5, 6), (1, 5, 3)), sq, None, {})   # channels 0..2, stored [1, W, 3]
    assert half == Storage(flat_from=(5, 3), flat_perm=(1, 0))   # stored non-unit axes: W, then channels
    stored = x.transpose(NHWC).reshape(1, 5, 6)[..., :3]
    assert np.array_equal(half.to_logical(stored, (1, 3, 5)), x.reshape(1, 6, 5)[:, :3])
    assert carry_order(layer("Mul2D", (1, 5, 3), (1, 5, 3)), half, None, {}) == half
    flat = Storage(flat_from=(1, 1, 5, 6), flat_perm=NHWC)                   # as compare stores the Squeeze
    regrouped = carry_order(layer("Reshape", (1, 5, 6), (1, 3, 10)), flat, None, {})
    assert regrouped == flat                                                # a reshape moves no data
    assert carry_order(layer("Slice2D", (1, 3, 10), (1, 3, 4)), regrouped, None, {}) == UNKNOWN
    assert carry_order(layer("Sum2D", (1, 3, 4), (1, 3, 4)), UNKNOWN, None, {}) == UNKNOWN
    assert UNKNOWN.to_logical(stored, stored.shape) is None
    assert carry_order(layer("Conv2D", (1, 5, 6), (1, 5, 6)), sq, None, {}) is None   # not order-keeping
    assert carry_order(layer("Mul2D", (1, 5, 6), (1, 5, 6)), LOGICAL, None, {}) is None


def test_model_whose_regions_are_all_inside_an_if_body(tmp_path, capsys):
    """A converted model whose only regions sit in If branches (Silero VAD v4 as openWakeWord ships
    it) runs in onnx_mrvl's session, not plain onnxruntime ("mrvl:Subgraph_3x3 is not a registered
    function/op", exit 3 before); its outputs compare, and a wrong reference still fails."""
    from onnx_mrvl.testing.control_flow_models import vad_branches

    m = vad_branches()
    orig = str(tmp_path / "orig.onnx")
    onnx.save(m, orig)
    out = onnx_mrvl.convert(m).save(str(tmp_path / "out"))
    assert not [n for n in onnx.load(out).graph.node if n.domain == "mrvl"]     # regions only in bodies
    res = compare_models(orig, out)
    rows = {r.tensor: r for r in res.rows}
    assert res.passed and {"output", "hn", "cn"} <= set(rows), res.to_text()
    assert rows["hn"].cosine > 0.9999
    assert main(["compare", orig, out, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pass"] is True
    other = vad_branches(seed=1)                       # other weights: the outputs differ
    onnx.save(other, str(tmp_path / "other.onnx"))
    assert main(["compare", str(tmp_path / "other.onnx"), out]) == 1
    capsys.readouterr()
