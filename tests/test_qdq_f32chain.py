"""Float chains between int8 values and quantizers run in fp32 (fuse/qdq_f32chain.py): Intel Neural
Compressor's QDQ YOLOv8 C2f block (onnx_mrvl/testing/inc_c2f.py) leaves the SiLU's Mul, the Split,
the residual Add and the Concat float and quantizes only the Concat's output."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.artifact import load
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing import inc_c2f

CHAIN = ("cv1_mul", "m_cv2_mul", "res_add")   # the float arithmetic of the block


def _identical_codes(m, out, size: int) -> None:
    """The converted model at ``out`` and the fused model's reference bodies give onnxruntime's output
    codes of the QDQ model ``m`` on 8 seeded inputs."""
    sess = onnx_mrvl.InferenceSession(str(out / "model.onnx"))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    body = ort.InferenceSession(fuse(legalize(m).model).model.SerializeToString(), providers=["CPUExecutionProvider"])
    for seed in range(8):
        f = inc_c2f.feeds(seed, size)
        a = ref.run(None, f)[0]
        assert np.array_equal(a, sess.run(None, f)[0]), seed
        assert np.array_equal(a, body.run(None, f)[0]), seed   # the reference bodies


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    m = inc_c2f.c2f()
    r = onnx_mrvl.convert(m)
    out = tmp_path_factory.mktemp("inc_c2f") / "out"
    r.save(str(out))
    return m, r, out


def test_chain_is_fp32_in_one_region(converted):
    """One region, nothing on the CPU; the Mul / Add are fp32 layers, their outputs and the Split /
    Concat of them float32 tensors (4 bytes an element), read by the quantizers of the next layers."""
    _, r, out = converted
    assert len(r.report.regions) == 1 and [x.node for x in r.report.cpu_nodes()] == []
    d = r.report.decisions
    for name in CHAIN:
        assert d[name].precision == "fp32", name
        assert d[name].reason.startswith("fp32 layer"), d[name].reason
    assert d["m_cv1_mul"].precision == "int8"   # the quantized SiLU stays a Lookup
    b = load(str(out / "mrvl_region_0.bin"))
    fp32 = [lay for lay in b.meta["layers"] if lay["params"].get("precision") == "fp32"]
    assert sorted(lay["layer_name"] for lay in fp32) == ["Mul2D", "Mul2D", "Sum2D"]
    assert b.meta["program_version"] == 6   # a version-5 reader refuses it (schema.program_features)
    tensors = {t["id"]: t for t in b.meta["tensors"]}
    moves = [lay for lay in b.meta["layers"] if lay["layer_name"] in ("Slice2D", "Concat")]
    assert len(moves) == 3
    for lay in fp32 + moves:
        t = tensors[lay["outputs"][0]]
        assert t["dtype"] == "float32" and t["nbytes"] == 4 * int(np.prod(t["shape"])), lay["name"]


def test_codes_identical_to_onnxruntime(converted):
    """The output codes equal onnxruntime's run of the QDQ model (before: the chain in fp16, the
    Concat's quantizer read fp16-rounded products and sums: 92.6% identical, up to 2 steps off)."""
    m, _, out = converted
    sess = onnx_mrvl.InferenceSession(str(out / "model.onnx"))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for seed in range(8):
        f = inc_c2f.feeds(seed)
        a, b = ref.run(None, f)[0], sess.run(None, f)[0]
        assert np.array_equal(a, b), (seed, float(np.mean(a == b)))


def test_reference_bodies_give_the_qdq_models_codes():
    """The fused model (fp32 Mul2D / Sum2D bodies: the float ops) runs in plain onnxruntime and gives
    the QDQ model's codes."""
    m = inc_c2f.c2f(seed=1)
    fused = fuse(legalize(m).model).model
    assert sum(1 for n in fused.graph.node for a in n.attribute if a.name == "precision" and a.s == b"fp32") == 3
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    body = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"])
    for seed in range(4):
        f = inc_c2f.feeds(seed)
        assert np.array_equal(ref.run(None, f)[0], body.run(None, f)[0])


def test_chain_reaching_a_float_reader_stays_fp16():
    """A chain value also read by something other than a quantizer (here: a model output) is no fp32
    chain: that reader takes fp16 values, as before."""
    m = inc_c2f.c2f()
    m.graph.output.append(onnx.helper.make_tensor_value_info("res", onnx.TensorProto.FLOAT, None))
    d = onnx_mrvl.convert(m).report.decisions
    assert d["res_add"].precision == "fp16"
    assert d["m_cv2_mul"].precision == "fp16"   # its only reader is the Add, no longer in a chain
    assert d["cv1_mul"].precision == "fp16"     # the Split feeds that Add too


def test_one_input_function_of_codes_is_an_fp32_value_lookup(tmp_path):
    """PP-OCRv4 det's ``Q(Concat(Resize(x + x * HardSigmoid(se)), Resize(y)))`` (INC QDQ): the
    HardSigmoid of one int8 layer's output is an fp32 Lookup (a float32 table of onnxruntime's values
    for the 256 codes), the Mul / Add fp32, the Resizes and Concat move float32 values (before: fp16
    HardSigmoid / Mul / Add, 98.05% of the output codes identical over these 8 inputs)."""
    m = inc_c2f.rse_concat()
    r = onnx_mrvl.convert(m)
    assert len(r.report.regions) == 1 and [x.node for x in r.report.cpu_nodes()] == []
    d = r.report.decisions
    assert d["hsig"].precision == d["se_mul"].precision == d["res_add"].precision == "fp32"
    assert "Lookup" in d["hsig"].reason
    r.save(str(tmp_path / "out"))
    b = load(str(tmp_path / "out" / "mrvl_region_0.bin"))
    lut = [lay for lay in b.meta["layers"] if lay["layer_name"] == "Lookup"]
    assert len(lut) == 1 and lut[0]["params"]["precision"] == "fp32"
    tensors = {t["id"]: t for t in b.meta["tensors"]}
    cat = next(lay for lay in b.meta["layers"] if lay["layer_name"] == "Concat")
    assert tensors[cat["outputs"][0]]["dtype"] == "float32"
    _identical_codes(m, tmp_path / "out", 8)


def test_sppf_pools_se_block_and_constant_first_lookup(tmp_path):
    """YOLOv8's SPPF (the SiLU's float Mul through two MaxPools into the Concat's Q: the pools select
    fp32 values), PP-LCNet's SE block ``Q(a * HardSigmoid(se))`` whose Mul is an int8_out layer (fp32
    math before its own Q) reading the float affine ``DQ(x) * s + b``, and an affine ``s * DQ(y) + b -> Q``
    with the constant first (an int8 Lookup: its anchor's data input is its second). Before: the pools,
    the affine and the HardSigmoid fp16, the constant-first affine fp16 Mul2D / Sum2D: 97.24% of the
    output codes identical over these 8 inputs."""
    m = inc_c2f.sppf_se()
    r = onnx_mrvl.convert(m)
    assert len(r.report.regions) == 1 and [x.node for x in r.report.cpu_nodes()] == []
    d = r.report.decisions
    for name in ("silu_mul", "aff_mul", "aff_add", "hsig"):
        assert d[name].precision == "fp32", name
    assert d["se_mul"].precision == "fp32, int8 out"
    assert d["lut_mul"].precision == "int8" and d["lut_add"].mrvl_node == d["lut_mul"].mrvl_node
    r.save(str(tmp_path / "out"))
    b = load(str(tmp_path / "out" / "mrvl_region_0.bin"))
    tensors = {t["id"]: t for t in b.meta["tensors"]}
    pools = [lay for lay in b.meta["layers"] if lay["layer_name"] == "Maxpool2D"]
    assert len(pools) == 2 and all(tensors[lay["outputs"][0]]["dtype"] == "float32" for lay in pools)
    _identical_codes(m, tmp_path / "out", 12)


def test_dfl_softmax_of_concatenated_codes_is_fp32(tmp_path):
    """YOLOv8's DFL head (INC QDQ): a float Softmax over bins of two dequantized convs of other scales
    (Concat, Reshape, a Transpose fuse folds into the layout) whose output the DFL conv quantizes:
    onnxruntime's fp32 Softmax (MLAS), no fp16 rounding (before: 98.44% of the output codes over these
    8 inputs, 2 steps off; nudenet YOLOv8n INC QDQ: 97.9% of the DFL conv's codes)."""
    m = inc_c2f.dfl()
    r = onnx_mrvl.convert(m)
    assert len(r.report.regions) == 1 and [x.node for x in r.report.cpu_nodes()] == []
    assert r.report.decisions["softmax"].precision == "fp32"
    r.save(str(tmp_path / "out"))
    b = load(str(tmp_path / "out" / "mrvl_region_0.bin"))
    sm = [lay for lay in b.meta["layers"] if lay["layer_name"] == "Softmax"]
    assert len(sm) == 1 and sm[0]["params"]["precision"] == "fp32"
    _identical_codes(m, tmp_path / "out", 6)


def test_one_input_chain_over_several_groups_with_two_readers(tmp_path):
    """PP-LCNetV3's affine -> written-out HardSwish -> affine of one conv's codes, read by the SE mean's
    quantizer and by the SE Mul (INC QDQ PP-OCRv4 det): the function of the code up to the HardSwish's
    Sum2D (its first affine absorbed) is one fp32 Lookup tabled by onnxruntime, the affine after it fp32
    layers (before: 98.14% of the output codes identical over these 8 inputs; with the single-group
    tables only, 97.14%)."""
    m = inc_c2f.hswish_se()
    r = onnx_mrvl.convert(m)
    assert len(r.report.regions) == 1 and [x.node for x in r.report.cpu_nodes()] == []
    d = r.report.decisions
    assert d["a1_mul"].mrvl_node == d["a1_add"].mrvl_node == d["hs_div"].mrvl_node   # one Lookup
    assert "Lookup" in d["a1_add"].reason and d["a1_add"].precision == "fp32"
    assert d["a2_mul"].precision == d["a2_add"].precision == "fp32"
    r.save(str(tmp_path / "out"))
    _identical_codes(m, tmp_path / "out", 10)



def _branches(tmp_path, m, names):
    """One region, nothing on the CPU, ``names`` fp32 layers, the Concat's output float32, the codes
    onnxruntime's on 10 inputs (and the reference bodies')."""
    r = onnx_mrvl.convert(m)
    assert len(r.report.regions) == 1 and [x.node for x in r.report.cpu_nodes()] == []
    for name in names:
        assert r.report.decisions[name].precision == "fp32", name
    r.save(str(tmp_path / "out"))
    b = load(str(tmp_path / "out" / "mrvl_region_0.bin"))
    tensors = {t["id"]: t for t in b.meta["tensors"]}
    cat = next(lay for lay in b.meta["layers"] if lay["layer_name"] == "Concat")
    assert tensors[cat["outputs"][0]]["dtype"] == "float32"
    _identical_codes(m, tmp_path / "out", 10)


def test_difference_of_dequantized_values_is_an_fp32_chain(tmp_path):
    """``Concat(DQ(a) - DQ(b), DQ(a)) -> Q`` (a Sub between quantizers left float): legalize's
    sub_tensors rewrites the unquantized Sub as ``a + (-b)`` (bit for bit ``a - b`` in fp32), which the
    fp32 chain computes as onnxruntime does. Before: the Sub stayed on the CPU (no float Sub of two
    tensors in fuse: 2 regions, exact on the host)."""
    _branches(tmp_path, inc_c2f.branch_concat(op="Sub"), ["sub"])


def test_sum_with_an_exact_activation_is_an_fp32_chain(tmp_path):
    """``Concat(LeakyRelu(DQ(a) + DQ(b)), DQ(a)) -> Q``: the Sum2D's LeakyRelu is one fp32 product (as
    onnxruntime's), so the layer joins the fp32 chain with its activation (before: an fp16 Sum2D,
    96.98% of the output codes identical over these 10 inputs)."""
    _branches(tmp_path, inc_c2f.branch_concat(op="Add", act="LeakyRelu"), ["add", "act"])


def test_quotient_of_dequantized_values_is_an_fp32_chain(tmp_path):
    """``Concat(DQ(a) / (DQ(sigmoid) + 1), DQ(a)) -> Q`` (INC's placement: the Div float between
    quantizers): the Div is an fp32 Mul2D with ``divide`` (IEEE division is correctly rounded: the
    quotient is onnxruntime's bit for bit), the ``+ 1`` an fp32 Sum2D; the program says version 7.
    Before: the Div on the CPU ("no accelerator op for Div"), 2 regions, 97.83% of the codes
    identical over these 10 inputs."""
    _branches(tmp_path, inc_c2f.branch_concat(op="Div"), ["div", "plus1"])
    b = load(str(tmp_path / "out" / "mrvl_region_0.bin"))
    div = [lay for lay in b.meta["layers"] if lay["params"].get("divide")]
    assert len(div) == 1 and div[0]["layer_name"] == "Mul2D" and div[0]["params"]["precision"] == "fp32"
    assert div[0]["vector_ops"] > 0 and b.meta["program_version"] == 7


def test_float_quotient_of_two_tensors_stays_on_the_cpu():
    """Outside an fp32 chain (a float model: no fp16 division on the accelerator) a Div of two
    tensors stays on the CPU with its reason, as before, and the Relu after it stays a layer (not
    taken to the CPU with it)."""
    from onnx import TensorProto, helper
    from onnx_mrvl.fuse.qdq_f32chain import DIV_REASON
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 8, 4, 4]) for n in ("a", "b", "y")]
    w = onnx.numpy_helper.from_array(np.full((8, 8, 1, 1), 0.1, np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["a", "w"], ["c"], name="conv"),
                           helper.make_node("Div", ["c", "b"], ["q"], name="div"),
                           helper.make_node("Relu", ["q"], ["r"], name="relu"),
                           helper.make_node("Conv", ["r", "w"], ["y"], name="conv2")], "div", vi[:2], vi[2:], [w])
    r = onnx_mrvl.convert(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    assert [x.node for x in r.report.cpu_nodes()] == ["div"]
    assert r.report.decisions["div"].reason == DIV_REASON
