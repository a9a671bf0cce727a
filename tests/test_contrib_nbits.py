"""Weight-only block-quantized models (onnxruntime's matmul_nbits_quantizer, int4 / int8 exports):
com.microsoft MatMulNBits and GatherBlockQuantized become the float op on the dequantized constant
(legalize's contrib_nbits): legalized they equal onnxruntime's kernels in fp32, converted the
MatMuls are fp16 layers on the accelerator whose decisions say why (they stayed on the CPU as
`no accelerator op for MatMulNBits`, and the whole encoder with them: minimum-work rule), within
docs/simulator.md's fp16 bound of onnxruntime's run of the same model."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

import onnx_mrvl
from onnx_mrvl.legalize import legalize

TOL = 1e-2      # docs/simulator.md: max|y_sim - y_ref| <= 1e-2 * max|y_ref|
FP32 = 1e-5
MS = "com.microsoft"


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """codes (last axis a multiple of 8 / bits) -> uint8 bytes, low bits first."""
    per = 8 // bits
    c = codes.astype(np.uint8).reshape(*codes.shape[:-1], -1, per)
    return sum((c[..., i] << (bits * i)) for i in range(per)).astype(np.uint8)


def _nbits(rng, name, x, y, K, N, bits, bs, zp, bias):
    """A MatMulNBits node and its constants as onnxruntime's quantizer writes them."""
    nb = -(-K // bs)
    codes = rng.integers(0, 1 << bits, (N, nb * bs))
    inits = [nh.from_array(_pack(codes, bits).reshape(N, nb, bs * bits // 8), f"{name}_B"),
             nh.from_array((rng.random(N * nb) * 0.05 + 0.01).astype(np.float32), f"{name}_s")]
    ins = [x, f"{name}_B", f"{name}_s", "", "", ""]
    if zp == "u8":
        zb = -(-nb * bits // 8) * 8 // bits
        inits.append(nh.from_array(_pack(rng.integers(0, 1 << bits, (N, zb)), bits).reshape(-1), f"{name}_z"))
        ins[3] = f"{name}_z"
    elif zp == "f32":
        inits.append(nh.from_array((rng.random(N * nb) * (1 << bits)).astype(np.float32), f"{name}_z"))
        ins[3] = f"{name}_z"
    if bias:
        inits.append(nh.from_array(rng.standard_normal(N).astype(np.float32), f"{name}_b"))
        ins[5] = f"{name}_b"
    while not ins[-1]:
        ins.pop()
    node = h.make_node("MatMulNBits", ins, [y], name=name, domain=MS, K=K, N=N, bits=bits, block_size=bs)
    return node, inits


def nbits_mlp(bits=4, bs=16, zp=None, bias=False, K=48, seed=0) -> onnx.ModelProto:
    """[1, 8, K] -> MatMulNBits -> Relu -> MatMulNBits -> [1, 8, 16] (a weight-only encoder FFN)."""
    rng = np.random.default_rng(seed)
    n1, i1 = _nbits(rng, "fc1", "x", "h", K, 32, bits, bs, zp, bias)
    n2, i2 = _nbits(rng, "fc2", "r", "y", 32, 16, bits, bs, zp, bias)
    g = h.make_graph([n1, h.make_node("Relu", ["h"], ["r"], name="relu"), n2], "nbits",
                     [h.make_tensor_value_info("x", TP.FLOAT, [1, 8, K])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [1, 8, 16])], i1 + i2)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(MS, 1)])


def embed_nbits(dtype="u8", zp=False, bits=4, seed=0) -> onnx.ModelProto:
    """ids [1, 8] -> GatherBlockQuantized (table [50, 32], blocks of 16 along D) -> MatMulNBits."""
    rng = np.random.default_rng(seed)
    V, D, bs = 50, 48, 16         # 3 blocks a row: the packed zero points end in half a byte
    if dtype == "u8":
        table = nh.from_array(_pack(rng.integers(0, 1 << bits, (V, D)), bits) if bits < 8
                              else rng.integers(0, 256, (V, D)).astype(np.uint8), "table")
        zcodes = rng.integers(0, 1 << bits, (V, D // bs))
        zt = nh.from_array(_pack(np.pad(zcodes, ((0, 0), (0, zcodes.shape[1] % 2))), bits) if bits < 8
                           else zcodes.astype(np.uint8), "table_z")
    else:                                       # int4 data: signed codes, zero point 0 unless given
        table = h.make_tensor("table", TP.INT4, [V, D], rng.integers(-8, 8, V * D).tolist())
        zt = h.make_tensor("table_z", TP.INT4, [V, D // bs], rng.integers(-8, 8, V * D // bs).tolist())
    inits = [table, nh.from_array((rng.random((V, D // bs)) * 0.1 + 0.01).astype(np.float32), "table_s")]
    ins = ["ids", "table_s"]
    if zp:
        inits.append(zt)
    gather = h.make_node("GatherBlockQuantized", ["table", "ids", "table_s"] + (["table_z"] if zp else []), ["e"],
                         name="embed", domain=MS, bits=bits, block_size=bs, gather_axis=0, quantize_axis=1)
    n2, i2 = _nbits(rng, "proj", "e", "y", D, 16, 4, 16, None, True)
    g = h.make_graph([gather, n2], "embed", [h.make_tensor_value_info("ids", TP.INT64, [1, 8])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [1, 8, 16])], inits + i2)
    del ins
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21), h.make_opsetid(MS, 1)])


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _rel(ref, got):
    assert ref.shape == got.shape and np.isfinite(got).all()
    return float(np.abs(ref - got).max() / np.abs(ref).max())


def _converted(model, feeds, tmp_path):
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    result = onnx_mrvl.convert(path)
    result.save(str(tmp_path / "out"), overwrite=True)
    got = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx")).run(None, feeds)[0]
    return result, got


@pytest.mark.parametrize("bits,bs,zp,bias,K", [(4, 16, None, False, 48), (4, 32, "u8", True, 48),
                                               (8, 16, "u8", False, 32), (8, 32, None, True, 40),
                                               (4, 16, "f32", False, 32), (2, 16, "u8", False, 32)])
def test_matmul_nbits_fp16_layers(bits, bs, zp, bias, K, tmp_path):
    model = nbits_mlp(bits, bs, zp, bias, K)
    x = {"x": np.random.default_rng(1).standard_normal((1, 8, K)).astype(np.float32)}
    ref = _ort(model, x)
    legal = legalize(model).model
    assert not [n.op_type for n in legal.graph.node if n.domain == MS]
    assert _rel(ref, _ort(legal, x)) <= FP32
    result, got = _converted(model, x, tmp_path)
    assert len(result.subgraphs) == 1 and not result.report.cpu_nodes(), \
        [(d.node, d.reason) for d in result.report.cpu_nodes()]
    for name in ("fc1", "fc2"):
        d = result.report[name]
        assert d.placement == "accelerator" and d.precision == "fp16"
        assert d.reason.startswith(f"fp16 with dequantized weights (weight-only {bits}-bit block-quantized"), d.reason
    assert _rel(ref, got) <= TOL


@pytest.mark.parametrize("dtype,zp,bits", [("u8", False, 4), ("u8", True, 4), ("u8", True, 8), ("int4", True, 4),
                                           ("int4", False, 4)])
def test_gather_block_quantized_embedding(dtype, zp, bits, tmp_path):
    model = embed_nbits(dtype, zp, bits)
    ids = {"ids": np.random.default_rng(2).integers(0, 50, (1, 8)).astype(np.int64)}
    ref = _ort(model, ids)
    legal = legalize(model).model
    assert [n.op_type for n in legal.graph.node if n.domain == MS] == []
    assert _rel(ref, _ort(legal, ids)) <= FP32
    result, got = _converted(model, ids, tmp_path)
    cpu = {d.node: d.reason for d in result.report.cpu_nodes()}
    assert set(cpu) == {"embed"} and "embedding lookup" in cpu["embed"], cpu   # the float model's Gather too
    assert result.report["proj"].placement == "accelerator"
    assert _rel(ref, got) <= TOL


def test_act_order_g_idx_stays_with_reason():
    model = nbits_mlp()
    fc1 = model.graph.node[0]
    model.graph.initializer.append(nh.from_array((np.arange(48) // 16).astype(np.int32), "gidx"))
    fc1.input.extend(["", "gidx"])
    res = legalize(model)
    assert [n.name for n in res.model.graph.node if n.op_type == "MatMulNBits"] == ["fc1"]
    assert any("g_idx" in str(s) for s in res.report.skipped), res.report.skipped
