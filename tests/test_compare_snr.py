"""``onnx-mrvl compare``: per-layer SNR in dB next to the error figures, the layers that lose most
of it ("largest SNR drops"), strict JSON for exact tensors; each layer's precision (int8 / fp16)
in the convert and offload reports."""
from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stdout

import numpy as np
import onnx
import pytest

import onnx_mrvl
from onnx_mrvl.cli.main import main
from onnx_mrvl.inspection.compare import compare_models
from onnx_mrvl.inspection.offload import offload_report
from onnx_mrvl.inspection.snr import snr_db

quantization = pytest.importorskip("onnxruntime.quantization")
from test_int8_qdq import quantize, residual_cnn  # noqa: E402
from test_int8_qoperator import quantize_qoperator  # noqa: E402


def strict_loads(text):
    def bad(word):
        raise AssertionError(f"{word} in the JSON output")
    return json.loads(text, parse_constant=bad)


def test_snr_definition():
    ref = np.array([3.0, -4.0], np.float32)
    assert snr_db(ref, ref) == math.inf
    noisy = ref + np.array([0.3, 0.4], np.float32)          # noise power 0.25, signal 25: 20 dB
    assert snr_db(ref, noisy) == pytest.approx(20.0, abs=1e-4)
    assert snr_db(np.zeros(2, np.float32), np.ones(2, np.float32)) == -math.inf
    assert snr_db(np.arange(3), np.arange(3)) is None        # integer codes: no SNR
    with_nan = np.array([3.0, np.nan], np.float32)
    assert snr_db(with_nan, np.array([3.0, np.nan], np.float32)) == math.inf   # over the finite values


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("snr")
    m = residual_cnn(seed=1)
    f32 = str(d / "f32.onnx")
    onnx.save(m, f32)
    out = {"f32": f32}
    for kind, qpath in (("qdq", quantize(m, str(d / "qdq.onnx"), True, "s8")),
                        ("qop", quantize_qoperator(m, str(d / "qop.onnx"), "u8")), ("fp16", f32)):
        folder = str(d / f"{kind}_out")
        result = onnx_mrvl.convert(qpath)
        result.save(folder)
        out[kind] = folder
        out[kind + "_result"] = result
    return out


@pytest.mark.parametrize("kind", ["qdq", "qop"])
def test_int8_model_against_its_fp32_original_per_layer_snr(models, kind, monkeypatch):
    """Every conv / pool / add layer of the int8 model is compared with the fp32 tensor it stands for
    (the Relu the quantizer folded into the layer's output quantization included: the Relu's output,
    not the conv's) and has a finite SNR; int8 quantization of this net gives 30-50 dB per layer.
    The int8 sums are the accelerator's exact ones on every host (``ONNX_MRVL_ORT_U8S8_SAT=0``): on an
    x86 host without VNNI the simulator otherwise follows onnxruntime's int16 pair clamp there
    (sim/mlas_u8s8.py), which costs this full-range S8 model's stem ~6 dB -- a host effect, not the
    quantization's SNR this test reads."""
    monkeypatch.setenv("ONNX_MRVL_ORT_U8S8_SAT", "0")
    res = compare_models(models["f32"], models[kind] + "/model.onnx")
    by = {r.tensor: r for r in res.rows}
    want = ["stem_relu_out", "pool_out", "b1r1_out", "b1c2_out", "b1relu_out", "b2r1_out", "b2c2_out",
            "b2short_out", "b2relu_out", "gap_out", "output"]
    assert set(want) <= set(by), sorted(by)
    for t in want:
        assert 25.0 < by[t].snr_db < 60.0, (t, by[t].snr_db)
        assert by[t].cosine > 0.999
    assert "stem_out" not in by and "b1c1_out" not in by   # the pre-Relu conv outputs are not what the layers compute
    assert res.snr_drops and all(d["snr_db"] < d["input_snr_db"] for d in res.snr_drops)
    text = res.to_text()
    assert "snr_dB" in text.splitlines()[1]
    drops = next(line for line in text.splitlines() if line.startswith("largest SNR drops: "))
    assert res.snr_drops[0]["tensor"] in drops
    print(drops)


def test_compare_json_has_snr_and_writes_exact_as_null_with_a_flag(models):
    """Identical tensors (A against itself) have SNR +inf: the JSON writes null and the flag
    ``snr_db_exact`` (no Infinity token, nothing for the ``non_finite`` list);
    the int8 comparison carries finite SNRs and the drop list."""
    buf = io.StringIO()
    with redirect_stdout(buf):
        main(["compare", models["f32"], models["f32"], "--json"])
    same = strict_loads(buf.getvalue())
    assert same["tensors"] and all(t["snr_db"] is None and t["snr_db_exact"] is True for t in same["tensors"])
    assert same["snr_drops"] == [] and "non_finite" not in same
    buf = io.StringIO()
    with redirect_stdout(buf):
        main(["compare", models["f32"], models["qdq"], "--json"])
    q = strict_loads(buf.getvalue())
    assert all(isinstance(t["snr_db"], float) for t in q["tensors"])
    keys = {"tensor", "layer", "origin", "snr_db", "input_snr_db", "drop_db"}
    assert q["snr_drops"] and keys <= set(q["snr_drops"][0])
    first = next(d for d in q["snr_drops"] if d["tensor"] == "stem_relu_out")   # reads the exact input
    assert first["input_snr_db"] is None and first["input_snr_db_exact"] is True and first["drop_db"] is None


def test_fp16_conversion_snr(models):
    """General: an fp16 conversion of the fp32 model has per-layer SNRs far above int8's (> 50 dB)."""
    res = compare_models(models["f32"], models["fp16"] + "/model.onnx")
    assert res.passed
    float_rows = [r for r in res.rows if r.snr_db is not None]
    assert float_rows and all(r.snr_db > 50.0 for r in float_rows)


def test_report_lists_each_layers_precision(models):
    """The convert report (decisions, explain) and the offload report name each layer's arithmetic."""
    qdq, fp16 = models["qdq_result"], models["fp16_result"]
    convs = [d for d in qdq.report if d.op_type == "Conv"]
    assert convs and all(d.precision == "int8" for d in convs)
    assert all(d.precision == "fp16" for d in fp16.report if d.placement == "accelerator")
    assert all(d.precision is None for d in qdq.report if d.placement != "accelerator")
    assert " int8  [" in qdq.report.explain()
    assert all("precision" in d for d in qdq.report.to_dict()["nodes"] if d["placement"] == "accelerator")
    rows = [row for r in offload_report(models["qdq"]).regions for row in r["layer_rows"]]
    assert {row["precision"] for row in rows if row["layer_name"] == "Conv2D"} == {"int8"}
    rows16 = [row for r in offload_report(models["fp16"]).regions for row in r["layer_rows"]]
    assert {row["precision"] for row in rows16} == {"fp16"}
    assert " prec " in offload_report(models["qdq"]).to_text()
