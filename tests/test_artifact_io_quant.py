"""Boundary quantization of region inputs/outputs (format 1.2, docs/binary-format.md): written by
compile for int8 boundaries, checked on pack and load; 1.1 binaries still load."""
from __future__ import annotations

import copy
import json
import os

import pytest

from onnx_mrvl.artifact import load, pack
from onnx_mrvl.artifact.io_quant import qscale_of
from onnx_mrvl.errors import ArtifactError
from test_artifact import make_program
from test_artifact_fuzz import make_int8_io_program


def _refused(meta, weights, *words, **kw):
    with pytest.raises(ArtifactError) as info:
        pack(meta, weights, **kw)
    for w in words:
        assert w in str(info.value), str(info.value)


def test_int8_boundaries_need_format_1_2_and_consistent_fields():
    meta, weights = make_int8_io_program()
    b = load(pack(meta, weights))
    assert b.version == (1, 2)
    q = b.meta["inputs"][0]["quantize"]
    assert q == {"type": "float32", "model_type": "int8", "scale": 0.0172, "zero_point": -3,
                 "qscale": qscale_of(0.0172)}
    assert b.meta["outputs"][0]["dequantize"] == {"type": "float32", "model_type": "uint8", "dscale": 0.25,
                                                  "zero_point": 128}
    _refused(meta, weights, "needs format 1.2", format_minor=1)
    for path, value, words in ((("inputs", "qscale"), 58.0, "fp32(1 / scale)"),
                               (("inputs", "zero_point"), 4, "zero_point"),
                               (("inputs", "model_type"), "uint8", "model_type"),
                               (("outputs", "dscale"), 0.5, "scale"),
                               (("outputs", "type"), "float16", "float32")):
        bad = copy.deepcopy(meta)
        field = "quantize" if path[0] == "inputs" else "dequantize"
        bad[path[0]][0][field][path[1]] = value
        _refused(bad, weights, words)
    bad = copy.deepcopy(meta)
    del bad["inputs"][0]["quantize"]
    _refused(bad, weights, "needs 'quantize'")
    bad = copy.deepcopy(meta)
    bad["outputs"][0]["quantize"] = bad["inputs"][0]["quantize"]
    _refused(bad, weights, "carries dequantize only")


def test_fp16_programs_stay_format_1_1():
    meta, weights = make_program()
    assert load(pack(meta, weights)).version == (1, 1)
    bad = copy.deepcopy(meta)
    bad["inputs"][0]["quantize"] = {"type": "float32", "model_type": "int8", "scale": 1.0, "zero_point": 0,
                                    "qscale": 1.0}
    _refused(bad, weights, "float16")   # a float16 boundary tensor cannot be quantized


def test_converted_int8_region_carries_boundary_quantization(tmp_path):
    pytest.importorskip("onnxruntime.quantization")
    import onnx_mrvl
    from tests.test_int8_qdq import quantize
    from onnx_mrvl.testing.models import tiny_cnn
    qpath = quantize(tiny_cnn(seed=2), str(tmp_path / "q.onnx"), True, "u8")
    result = onnx_mrvl.convert(qpath)
    b = load(result.subgraphs[0].binary)
    assert b.version == (1, 2)
    q = b.meta["inputs"][0]["quantize"]
    t = b.meta["tensors"][b.meta["inputs"][0]["tensor"]]
    assert q["model_type"] == t["dtype"] == "uint8" and q["scale"] == t["scale"] and q["qscale"] == qscale_of(t["scale"])
    out = b.meta["outputs"][0]
    assert out["dequantize"]["dscale"] == b.meta["tensors"][out["tensor"]]["scale"]
    folder = str(tmp_path / "out")
    result.save(folder)
    nodes = json.load(open(os.path.join(folder, f"{result.subgraphs[0].name}-nodes.json")))
    inp = next(n for n in nodes["nodes"] if n["op"] == "input")
    assert inp["attrs"]["quantize"] == ["true"] and inp["attrs"]["qscale"] == [format(q["qscale"], ".9g")]
