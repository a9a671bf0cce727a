"""MLAS QLinearAdd / QLinearMul semantics (sim/int8_eltwise.py) against onnxruntime's fused QDQ Add /
Mul (com.microsoft QLinearAdd / QLinearMul) on random codes and scales: bit-exact, including
broadcast spans, scalar operands, S8 and U8, symmetric zero points (issue #19)."""
from __future__ import annotations

import json
import os
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnx_mrvl
from onnx_mrvl.sim.int8_eltwise import fma32, qlinear_add_broadcast, qlinear_mul

QR = {"int8": (-128, 127, np.int8, TensorProto.INT8), "uint8": (0, 255, np.uint8, TensorProto.UINT8)}


def _model(op, shape_a, shape_b, a, b, c, dtype):
    et = QR[dtype][3]
    nodes = [helper.make_node("DequantizeLinear", ["qa", "sa", "za"], ["fa"]),
             helper.make_node("DequantizeLinear", ["qb", "sb", "zb"], ["fb"]),
             helper.make_node(op, ["fa", "fb"], ["fc"]),
             helper.make_node("QuantizeLinear", ["fc", "sc", "zc"], ["qc"])]
    inits = []
    for k, (s, z) in zip("abc", (a, b, c)):
        inits += [helper.make_tensor(f"s{k}", TensorProto.FLOAT, [], [s]), helper.make_tensor(f"z{k}", et, [], [z])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("qa", et, shape_a),
                                       helper.make_tensor_value_info("qb", et, shape_b)],
                          [helper.make_tensor_value_info("qc", et, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _ort(op, qa, qb, a, b, c, dtype):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    m = _model(op, list(qa.shape), list(qb.shape), a, b, c, dtype)
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, {"qa": qa, "qb": qb})[0].astype(np.int32)


def _fused(op, dtype):
    """onnxruntime fuses the group into its QLinear kernel (else the test would check its float path)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    with tempfile.TemporaryDirectory() as d:
        so.optimized_model_filepath = os.path.join(d, "o.onnx")
        m = _model(op, [4], [4], (0.1, 0), (0.1, 0), (0.1, 0), dtype)
        ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return [n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node]


def _params(rng, dtype, symmetric):
    lo, hi = QR[dtype][:2]
    scales = [float(np.float32(rng.uniform(0.002, 0.1))) for _ in range(3)]
    if symmetric:
        zps = [0, 0, 0] if dtype == "int8" else [128, 128, 128]
    else:
        zps = [int(rng.integers(lo, hi + 1)) for _ in range(3)]
    return list(zip(scales, zps))


@pytest.mark.parametrize("op", ["Add", "Mul"])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_onnxruntime_fuses_the_group(op, dtype):
    assert _fused(op, dtype) == [f"QLinear{op}"]


# (shape of a, shape of b): one shape, a per-span scalar on either side, a whole scalar on either side, a vector
SHAPES = [((1, 256, 256), (1, 256, 256)), ((256, 256), (256, 1)), ((256, 1), (256, 256)), ((3, 77), (1,)),
          ((1,), (5, 33)), ((6, 40), (40,)), ((2, 3, 4, 5), (1, 3, 1, 1)), ((1, 3, 1, 1), (2, 3, 4, 5))]


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("symmetric", [False, True])
def test_qlinear_add_bit_exact(dtype, symmetric):
    rng = np.random.default_rng(7 + symmetric + 2 * (dtype == "int8"))
    lo, hi, npt = QR[dtype][:3]
    grid = np.arange(lo, hi + 1)
    differ = total = 0
    for it in range(24):
        a, b, c = _params(rng, dtype, symmetric)
        sa, sb = SHAPES[it % len(SHAPES)]
        if it % len(SHAPES) == 0:   # every pair of codes
            qa, qb = (x.astype(npt).reshape(sa) for x in np.meshgrid(grid, grid, indexing="ij"))
        else:
            qa, qb = rng.integers(lo, hi + 1, sa).astype(npt), rng.integers(lo, hi + 1, sb).astype(npt)
        ref = _ort("Add", qa, qb, a, b, c, dtype)
        got = qlinear_add_broadcast(qa, qb, a, b, c, dtype)
        assert got.shape == ref.shape
        differ += int((got != ref).sum())
        total += ref.size
    assert total > 250_000 and differ == 0, (differ, total)


def test_qlinear_add_is_not_the_float_form():
    """The float reference form (DQ, fp32 add, QuantizeLinear) differs from MLAS on some codes: the
    test above could not pass with it."""
    rng = np.random.default_rng(3)
    g = np.arange(0, 256)
    qa, qb = (x.astype(np.uint8) for x in np.meshgrid(g, g, indexing="ij"))
    differ = 0
    for _ in range(8):
        a, b, c = _params(rng, "uint8", False)
        ref = _ort("Add", qa, qb, a, b, c, "uint8")
        v = (np.float32(a[0]) * (qa.astype(np.float32) - a[1])) + (np.float32(b[0]) * (qb.astype(np.float32) - b[1]))
        flt = np.clip(np.rint(v / np.float32(c[0])) + c[1], 0, 255)
        differ += int((flt != ref).sum())
    assert differ > 0


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_qlinear_mul_bit_exact(dtype):
    rng = np.random.default_rng(11)
    lo, hi, npt = QR[dtype][:3]
    differ = total = 0
    for it in range(12):
        a, b, c = _params(rng, dtype, it % 3 == 0)
        c = (c[0] * 40, c[1])         # products of two scales: an output scale that keeps them in range
        sa, sb = SHAPES[it % len(SHAPES)]
        qa, qb = rng.integers(lo, hi + 1, sa).astype(npt), rng.integers(lo, hi + 1, sb).astype(npt)
        ref = _ort("Mul", qa, qb, a, b, c, dtype)
        got = qlinear_mul(qa, qb, a, b, c, dtype)
        differ += int((got != ref).sum())
        total += ref.size
    assert differ == 0, (differ, total)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("form", ["two inputs", "constant"])
def test_qlinear_mul_codes_of_floats_as_onnxruntime(dtype, form):
    """int8_transformer.qlinear_mul_codes (the int8_out Mul2D of a QDQ model: centered codes, natively
    from NATIVE_MIN values) against onnxruntime's QLinearMul of the same codes, broadcast operands,
    large enough for the native pass."""
    from onnx_mrvl.sim import int8
    from onnx_mrvl.sim.int8_transformer import qlinear_mul_codes
    rng = np.random.default_rng(len(dtype) + len(form))
    lo, hi, npt = QR[dtype][:3]
    for it in range(4):
        a, b, c = _params(rng, dtype, it % 2 == 0)
        c = (float(np.float32(a[0] * b[0] * 40)), c[1])       # output codes over most of the range
        qa = (a + (dtype,))
        qb, qc = (b + (dtype,)), (c + (dtype,))
        xa = (rng.standard_normal((1, 20, 30, 24)) * 60 * a[0]).astype(np.float32)
        xb = (rng.standard_normal((1, 1, 1, 24)) * 60 * b[0]).astype(np.float32)
        ca, cb = int8.quantize(xa, *qa), int8.quantize(xb, *qb)
        ref = _ort("Mul", ca.astype(npt), cb.astype(npt), a, b, c, dtype)
        if form == "constant":
            xb = ((cb - b[1]) * np.float32(b[0])).astype(np.float32)      # a DQ'd constant: its codes exactly
            y, ok = qlinear_mul_codes(xb, qa, qb, qc, False)(xa)
        else:
            y, ok = qlinear_mul_codes(None, qa, qb, qc, False)(xa, xb)
        got = np.rint(y / np.float32(c[0])).astype(np.int64) + c[1]
        assert ok and xa.size >= int8.NATIVE_MIN
        np.testing.assert_array_equal(got, ref)
        assert len(np.unique(ref)) > 20


def test_fma32_rounds_once():
    # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: a tie in fp32 (half an ulp of 1), which the addend decides;
    # float64 alone would drop a 2^-60 addend and round the tie to even
    x = np.float32(1 + 2 ** -12)
    assert fma32(x, x, np.float32(0)) == np.float32(1 + 2 ** -11)
    assert fma32(x, x, np.float32(2 ** -60)) == np.float32(1 + 2 ** -11 + 2 ** -23)
    assert fma32(x, x, np.float32(-(2 ** -60))) == np.float32(1 + 2 ** -11)
    a, b = np.float32(1 + 2 ** -23), np.float32(1 - 2 ** -23)     # a * b = 1 - 2^-46, exact in the fma
    assert fma32(a, b, np.float32(-1)) == np.float32(-(2 ** -46))


def _qdq_add_model(dtype, shared: bool, seed: int):
    """x1, x2 -> Q -> DQ -> Add -> Q -> DQ (``shared``: x1's codes also feed a second reader, a
    MaxPool, so its Q has two readers and stays int8 under onnxruntime's S8 -> U8 rewrite)."""
    rng = np.random.default_rng(seed)
    lo, hi, npt, et = QR[dtype]
    shape = [1, 16, 64, 64]            # 65536 elements: every pair of codes fits
    nodes, inits = [], []
    for k, name in enumerate(("x1", "x2", "y")):
        s, z = float(np.float32(rng.uniform(0.01, 0.05))), int(rng.integers(lo + 40, hi - 40))
        inits += [helper.make_tensor(f"s_{name}", TensorProto.FLOAT, [], [s]),
                  helper.make_tensor(f"z_{name}", et, [], [z])]
    for name in ("x1", "x2"):
        nodes += [helper.make_node("QuantizeLinear", [name, f"s_{name}", f"z_{name}"], [f"q_{name}"]),
                  helper.make_node("DequantizeLinear", [f"q_{name}", f"s_{name}", f"z_{name}"], [f"d_{name}"])]
    nodes += [helper.make_node("Add", ["d_x1", "d_x2"], ["sum"], name="the_add"),
              helper.make_node("QuantizeLinear", ["sum", "s_y", "z_y"], ["q_y"]),
              helper.make_node("DequantizeLinear", ["q_y", "s_y", "z_y"], ["y"])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)]
    if shared:
        nodes += [helper.make_node("DequantizeLinear", ["q_x1", "s_x1", "z_x1"], ["d_x1b"]),
                  helper.make_node("MaxPool", ["d_x1b"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                  helper.make_node("QuantizeLinear", ["p", "s_x1", "z_x1"], ["q_p"]),
                  helper.make_node("DequantizeLinear", ["q_p", "s_x1", "z_x1"], ["pooled"])]
        outs.append(helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, 16, 32, 32]))
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x1", "x2")]
    g = helper.make_graph(nodes, "qdq_add", ins, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _sum2d_requants(folder: str):
    """The ``requant`` of every Sum2D in a saved conversion's region JSON."""
    found = []
    for root, _, files in os.walk(folder):
        for f in files:
            if f.endswith(".json"):
                try:
                    j = json.load(open(os.path.join(root, f)))
                except ValueError:
                    continue
                if isinstance(j, dict):
                    found += [n["attrs"].get("requant") for n in j.get("nodes", [])
                              if n.get("attrs", {}).get("layer_name") == ["Sum2D"]]
    return found


@pytest.mark.parametrize("dtype, shared, mode", [("uint8", False, "qlinear"), ("int8", False, "qlinear_u8"),
                                                 ("int8", True, "float"), ("uint8", True, "qlinear")])
def test_qdq_add_model_bit_exact(tmp_path, dtype, shared, mode):
    """The converted QDQ Add (one region, an int8 Sum2D) equals onnxruntime's run of the model on
    every element: as its QLinearAdd (U8; int8 codes all turned to uint8 by its S8 -> U8 rewrite) or
    as its float Add (an int8 pair with two readers is not turned: operand types differ, no fusion)."""
    path = str(tmp_path / "m.onnx")
    onnx.save(_qdq_add_model(dtype, shared, 21), path)   # seed 21: int8 and uint8 QLinearAdd differ
    r = onnx_mrvl.convert(path, force=True)   # an add alone: below the minimum-work rule
    out = str(tmp_path / "out")
    r.save(out)
    assert _sum2d_requants(out) == [[mode]]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(os.path.join(out, "model.onnx"))
    init = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    lo, hi = QR[dtype][:2]
    grid = np.meshgrid(np.arange(lo, hi + 1), np.arange(lo, hi + 1), indexing="ij")
    feeds = [{n: ((c - init[f"z_{n}"].astype(np.float32)) * init[f"s_{n}"]).astype(np.float32).reshape(1, 16, 64, 64)
              for n, c in zip(("x1", "x2"), grid)}]                 # every pair of codes
    rng = np.random.default_rng(0)
    feeds += [{n: (rng.standard_normal((1, 16, 64, 64)) * 1.5).astype(np.float32) for n in ("x1", "x2")}
              for _ in range(2)]
    differ = 0
    for feed in feeds:
        a, b = ref.run(["y"], feed)[0], sess.run(["y"], feed)[0]
        differ += int((a != b).sum())
    assert differ == 0


def _bias_add_model(tmp_path, shape, codes, quants, et):
    """``DQ(Q(x)) + DQ(codes) -> Q -> DQ`` saved and converted: (model path, converted folder, result).
    ``quants``: ((s_x, z_x), (s_c, z_c), (s_y, z_y))."""
    (sx, zx), (sc, zc), (sy, zy) = quants
    inits = [helper.make_tensor("s_x", TensorProto.FLOAT, [], [sx]), helper.make_tensor("z_x", et, [], [zx]),
             helper.make_tensor("s_c", TensorProto.FLOAT, [], [sc]), helper.make_tensor("z_c", et, [], [zc]),
             helper.make_tensor("s_y", TensorProto.FLOAT, [], [sy]), helper.make_tensor("z_y", et, [], [zy]),
             onnx.numpy_helper.from_array(codes, "c_q")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_x", "z_x"], ["q_x"]),
             helper.make_node("DequantizeLinear", ["q_x", "s_x", "z_x"], ["d_x"]),
             helper.make_node("DequantizeLinear", ["c_q", "s_c", "z_c"], ["d_c"]),
             helper.make_node("Add", ["d_x", "d_c"], ["sum"], name="bias_add"),
             helper.make_node("QuantizeLinear", ["sum", "s_y", "z_y"], ["q_y"]),
             helper.make_node("DequantizeLinear", ["q_y", "s_y", "z_y"], ["y"])]
    g = helper.make_graph(nodes, "qdq_bias_add", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    r = onnx_mrvl.convert(path, force=True)
    out = str(tmp_path / "out")
    r.save(out)
    return path, out, r


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qdq_add_of_a_constant_bit_exact(tmp_path, dtype):
    """``DQ(x) + DQ(constant codes) -> Q -> DQ`` (a bias Add): with U8 onnxruntime fuses QLinearAdd with
    the constant as b, and the Sum2D, keeping the constant's quantization (in2_*), adds its codes as
    MLAS does; with S8 the Add stays float (every pair of codes: the constant holds all 256 codes for
    each input code)."""
    lo, hi, npt, et = QR[dtype]
    # seeds where the float form (and for int8 the int8-domain kernel) is one code off on one pair
    rng = np.random.default_rng({"uint8": 4, "int8": 6}[dtype])
    sx, sc, sy = (float(np.float32(rng.uniform(0.01, 0.05))) for _ in range(3))
    zx, zc, zy = (int(rng.integers(lo + 40, hi - 40)) for _ in range(3))
    grid_a, grid_b = np.meshgrid(np.arange(lo, hi + 1), np.arange(lo, hi + 1), indexing="ij")
    codes = grid_b.astype(npt).reshape(4096, 16)
    path, out, _ = _bias_add_model(tmp_path, (1, 4096, 16), codes, ((sx, zx), (sc, zc), (sy, zy)), et)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(os.path.join(out, "model.onnx"))
    x = ((grid_a - zx) * np.float32(sx)).astype(np.float32).reshape(1, 4096, 16)
    a, b = ref.run(["y"], {"x": x})[0], sess.run(["y"], {"x": x})[0]
    # U8: onnxruntime's QLinearAdd with the constant as b; S8: its S8 -> U8 rewrite leaves the Add in float
    assert _sum2d_requants(out) == [["qlinear" if dtype == "uint8" else "float"]]
    assert int((a != b).sum()) == 0


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qdq_mul_of_a_computed_constant_bit_exact(tmp_path, dtype):
    """``DQ(x) * DQ(Q(Slice(DQ(table codes))))`` (a rotary sin / cos table sliced out of a quantized
    embedding): onnxruntime fuses the Mul into its QLinearMul (int8: on uint8 codes after its S8 -> U8
    rewrite), the converter folds the table branch into a constant; the Mul2D keeps the constant's
    quantization (in2_*) and multiplies codes as QLinearMul does (every pair of codes)."""
    lo, hi, npt, et = QR[dtype]
    # seed 51: the float Mul + QuantizeLinear is one code off on 14 pairs (and for int8 the int8-domain
    # kernel on 14 pairs: onnxruntime's runs on the uint8 codes)
    rng = np.random.default_rng(51)
    sx, sc, sy = (float(np.float32(rng.uniform(0.01, 0.05))) for _ in range(3))
    sy *= 10.0   # products of two dequantized codes: up to ~ 128 * 128 * sx * sc
    zx, zc, zy = (int(rng.integers(lo + 40, hi - 40)) for _ in range(3))
    grid_a, grid_b = np.meshgrid(np.arange(lo, hi + 1), np.arange(lo, hi + 1), indexing="ij")
    table = np.concatenate([grid_b.astype(npt).reshape(4096, 16), np.full((8, 16), zc, npt)])
    inits = [helper.make_tensor("s_x", TensorProto.FLOAT, [], [sx]), helper.make_tensor("z_x", et, [], [zx]),
             helper.make_tensor("s_c", TensorProto.FLOAT, [], [sc]), helper.make_tensor("z_c", et, [], [zc]),
             helper.make_tensor("s_y", TensorProto.FLOAT, [], [sy]), helper.make_tensor("z_y", et, [], [zy]),
             onnx.numpy_helper.from_array(table, "table_q"),
             onnx.numpy_helper.from_array(np.array([0], np.int64), "st"),
             onnx.numpy_helper.from_array(np.array([4096], np.int64), "en"),
             onnx.numpy_helper.from_array(np.array([0], np.int64), "ax")]
    nodes = [helper.make_node("DequantizeLinear", ["table_q", "s_c", "z_c"], ["table"]),
             helper.make_node("Slice", ["table", "st", "en", "ax"], ["sl"]),
             helper.make_node("QuantizeLinear", ["sl", "s_c", "z_c"], ["q_c"]),
             helper.make_node("DequantizeLinear", ["q_c", "s_c", "z_c"], ["d_c"]),
             helper.make_node("QuantizeLinear", ["x", "s_x", "z_x"], ["q_x"]),
             helper.make_node("DequantizeLinear", ["q_x", "s_x", "z_x"], ["d_x"]),
             helper.make_node("Mul", ["d_x", "d_c"], ["prod"], name="rotary_mul"),
             helper.make_node("QuantizeLinear", ["prod", "s_y", "z_y"], ["q_y"]),
             helper.make_node("DequantizeLinear", ["q_y", "s_y", "z_y"], ["y"])]
    g = helper.make_graph(nodes, "qdq_mul_table", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4096, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4096, 16])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    r = onnx_mrvl.convert(path, force=True)
    out = str(tmp_path / "out")
    r.save(out)
    muls = [n["attrs"] for n in json.load(open(os.path.join(out, "mrvl_region_0-nodes.json")))["nodes"]
            if n.get("attrs", {}).get("layer_name") == ["Mul2D"]]
    assert [(a.get("precision"), a.get("requant"), a.get("in2_dtype")) for a in muls] == \
        [(["int8_out"], ["qlinear_u8" if dtype == "int8" else "qlinear"], [dtype])]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(os.path.join(out, "model.onnx"))
    x = ((grid_a - zx) * np.float32(sx)).astype(np.float32).reshape(1, 4096, 16)
    a, b = ref.run(["y"], {"x": x})[0], sess.run(["y"], {"x": x})[0]
    assert int((a != b).sum()) == 0


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qdq_mul_of_two_tensors_bit_exact(tmp_path, dtype):
    """``DQ(x) * DQ(c) -> Q -> DQ`` of two tensors (a gate, SiLU's x * sigmoid(x)): onnxruntime's
    QLinearMul (int8: on its S8 -> U8 rewrite's uint8 codes); the Mul2D reads both codes (in_*, in2_*)
    and multiplies them as that kernel does (every pair of codes; the float form on fp16-stored inputs
    was 446 codes off)."""
    lo, hi, npt, et = QR[dtype]
    rng = np.random.default_rng(51)
    sx, sc, sy = (float(np.float32(rng.uniform(0.01, 0.05))) for _ in range(3))
    sy *= 10.0
    zx, zc, zy = (int(rng.integers(lo + 40, hi - 40)) for _ in range(3))
    inits = [helper.make_tensor("s_x", TensorProto.FLOAT, [], [sx]), helper.make_tensor("z_x", et, [], [zx]),
             helper.make_tensor("s_c", TensorProto.FLOAT, [], [sc]), helper.make_tensor("z_c", et, [], [zc]),
             helper.make_tensor("s_y", TensorProto.FLOAT, [], [sy]), helper.make_tensor("z_y", et, [], [zy])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_x", "z_x"], ["q_x"]),
             helper.make_node("DequantizeLinear", ["q_x", "s_x", "z_x"], ["d_x"]),
             helper.make_node("QuantizeLinear", ["c", "s_c", "z_c"], ["q_c"]),
             helper.make_node("DequantizeLinear", ["q_c", "s_c", "z_c"], ["d_c"]),
             helper.make_node("Mul", ["d_x", "d_c"], ["prod"], name="gate_mul"),
             helper.make_node("QuantizeLinear", ["prod", "s_y", "z_y"], ["q_y"]),
             helper.make_node("DequantizeLinear", ["q_y", "s_y", "z_y"], ["y"])]
    shape = [1, 4096, 16]
    g = helper.make_graph(nodes, "qdq_mul2", [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x", "c")],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    r = onnx_mrvl.convert(path, force=True)
    out = str(tmp_path / "out")
    r.save(out)
    muls = [n["attrs"] for n in json.load(open(os.path.join(out, "mrvl_region_0-nodes.json")))["nodes"]
            if n.get("attrs", {}).get("layer_name") == ["Mul2D"]]
    assert [(a.get("precision"), a.get("requant"), a.get("in_dtype"), a.get("in2_dtype")) for a in muls] == \
        [(["int8_out"], ["qlinear_u8" if dtype == "int8" else "qlinear"], [dtype], [dtype])]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(os.path.join(out, "model.onnx"))
    ga, gb = np.meshgrid(np.arange(lo, hi + 1), np.arange(lo, hi + 1), indexing="ij")
    feed = {"x": ((ga - zx) * np.float32(sx)).astype(np.float32).reshape(shape),
            "c": ((gb - zc) * np.float32(sc)).astype(np.float32).reshape(shape)}
    a, b = ref.run(["y"], feed)[0], sess.run(["y"], feed)[0]
    assert int((a != b).sum()) == 0


def test_int8_out_mul_requant_is_checked():
    """compile takes ``requant`` qlinear / qlinear_u8 only on an int8_out Mul2D with in_* and in2_*,
    and fails naming the node otherwise (never a silent float Mul)."""
    from onnx_mrvl.emit.int8_layer import int8_out
    from onnx_mrvl.emit.json_attrs import NodeAttrs
    from onnx_mrvl.errors import MrvlError
    q = {"precision": ["int8_out"], "out_scale": ["0.1"], "out_zero_point": ["3"], "out_dtype": ["int8"],
         "in_scale": ["0.05"], "in_zero_point": ["-2"], "in_dtype": ["int8"]}
    q2 = {"in2_scale": ["0.02"], "in2_zero_point": ["1"], "in2_dtype": ["int8"]}
    params = {}
    int8_out(NodeAttrs({"name": "m", "attrs": dict(q, **q2, requant=["qlinear_u8"])}, 0), "Mul2D", params)
    assert params["requant"] == "qlinear_u8" and params["in2_scale"] == np.float32(0.02) and params["in2_zero_point"] == 1
    for attrs, layer in ((dict(q, requant=["qlinear"]), "Mul2D"),                    # no in2_*
                         (dict(q, **q2, requant=["float"]), "Mul2D"),                 # not a QLinearMul mode
                         (dict(q, **q2, requant=["qlinear"]), "LayerNorm")):          # not a Mul2D
        with pytest.raises(MrvlError, match="requant"):
            int8_out(NodeAttrs({"name": "m", "attrs": attrs}, 0), layer, {})


def test_qdq_bias_add_broadcast_runs_natively_bit_exact(tmp_path):
    """A transformer's bias Add, ``DQ(x [1, 256, 64]) + DQ(codes [64])`` (U8: onnxruntime's QLinearAdd
    with the constant as b, broadcast along the rows): the native int8 add takes it (the constant
    tiled once per shape, quantized back to its codes) and every output code is onnxruntime's."""
    from onnx_mrvl.sim import Simulator, int8_native
    if int8_native.lib() is None:
        pytest.skip(int8_native.why_disabled())
    rng = np.random.default_rng(11)
    path, out, r = _bias_add_model(tmp_path, (1, 256, 64), rng.integers(0, 256, 64).astype(np.uint8),
                                   ((0.031, 121), (0.017, 133), (0.043, 117)), TensorProto.UINT8)
    assert _sum2d_requants(out) == [["qlinear"]]
    sim = Simulator(r.subgraphs[0].binary)
    x = (rng.standard_normal((1, 256, 64)) * 2).astype(np.float32)
    sim.run([x])
    adds = [e for s in sim._static.segments for e in s[1] if e.step.spec.layer_name == "Sum2D"]
    assert adds and all(getattr(e.bound, "native", None) for e in adds)          # the native kernel's call
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(os.path.join(out, "model.onnx"))
    for k in range(3):
        xk = (x * (k + 1)).astype(np.float32)
        assert int((ref.run(["y"], {"x": xk})[0] != sess.run(["y"], {"x": xk})[0]).sum()) == 0
