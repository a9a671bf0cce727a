"""QDQ imports of exporter-style architectures (benchmarks/bench_int8_arch.py): onnxruntime's
quantize_static of the builders, converted, against onnxruntime's run of the same QDQ model.
Each row once left layers in fp16 or on the CPU:
- paddle_det: its squeeze-and-excitation pool over 32x32 was split by legalize's gap_split into
  float AveragePools (an fp16 layer; 61% identical, 8 steps); a DQ -> GlobalAveragePool -> Q pool
  now stays one int8 GlobalAvgPool2D;
- keras_cnn: tf2onnx's ReduceMean(keepdims=0) (an fp16 GlobalAvgPool2D) and its NHWC form behind
  a quantized Transpose (on the CPU, 2 regions); reducemean_to_gap keeps the Q -> DQ at the pool;
- efficientnet_like: its SE pools as paddle_det's (80% identical, 1 step);
- convnext_like, audio_wave, ssd_like, yolov8_like: tests/test_int8_axes.py has each pattern alone."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("onnxruntime.quantization")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import bench_int8_arch  # noqa: E402


@pytest.mark.parametrize("name,act", [("paddle_det", "s8"), ("keras_cnn", "u8"), ("efficientnet_like", "s8")])
def test_arch_qdq_import_is_int8_and_identical(tmp_path, name, act):
    m = bench_int8_arch.measure(name, str(tmp_path), act)
    assert m["regions"] == 1 and m["cpu"] == {}, (m["cpu"], m["why"])
    assert m["identical"] == 1.0 and m["steps"] == 0, m
    pools = [w for w in m["why"] if w[1] in ("GlobalAveragePool", "ReduceMean", "AveragePool")]
    assert not pools, pools   # no pool left in fp16 or on the CPU


@pytest.mark.parametrize("name,act", [("bifpn_like", "s8"), ("convnext_like", "u8")])
def test_arch_qdq_constants_stay_in_the_region(tmp_path, name, act):
    """bifpn_like: its fusion weights' constant chain through quantized constants folds (was 5
    regions, Add/Div/Gather/Mul on the CPU); convnext_like: the layer scale Mul by a DQ'd [C]
    constant on channels-last data is an int8 Lookup along the last axis (was an fp16 Mul2D, 91%
    identical), its LayerNorms write int8 codes from onnxruntime's fp32 LayerNormalization."""
    m = bench_int8_arch.measure(name, str(tmp_path), act)
    assert m["regions"] == 1 and m["cpu"] == {}, (m["cpu"], m["why"])
    assert m["identical"] == 1.0 and m["steps"] == 0, m
    assert not [w for w in m["why"] if w[2] == "fp16" and w[1] in ("Mul", "LayerNormalization")], m["why"]


@pytest.mark.parametrize("name,act,fixed,cpu", [
    # Lookup on [N, C, T], 1-D pools; the model input's Q / DQ are the host's
    ("audio_wave", "s8", ("BatchNormalization", "MaxPool", "GlobalAveragePool"),
     {"QuantizeLinear": 1, "DequantizeLinear": 1}),
    ("ssd_like", "s8", ("Softmax",), {}),   # requant float: onnxruntime's fp32 Softmax of the shared DQ
    # anchors + rb (the constant first, shared with anchors - lt) and the Subs as subtracting int8
    # Sum2Ds: the box decode in the region, only the output's layout Transpose on the CPU
    ("yolov8_like", "u8", ("Add", "Sub"), {"Transpose": 1}),
    ("yolov5_like", "s8", ("Pow",), {}),    # (2 sigmoid)^2 in the Lookup: the head in the region
])
def test_arch_qdq_rows_are_bit_exact(tmp_path, name, act, fixed, cpu):
    """Rows that were 92-99.9% identical, 1-2 steps, or had their heads on the CPU
    (docs/benchmarks-int8.md): now 100%, 0 steps, and the ops that were fp16 layers or CPU ops
    are int8 (or fp32 writing int8 codes)."""
    m = bench_int8_arch.measure(name, str(tmp_path), act)
    assert m["regions"] == 1 and m["identical"] == 1.0 and m["steps"] == 0, m
    assert m["cpu"] == cpu, (m["cpu"], m["why"])
    assert not [w for w in m["why"] if w[2] in ("fp16", "cpu") and w[1] in fixed], m["why"]


def test_input_preprocessing_runs_on_the_host(tmp_path):
    """googlenet_like normalizes its input in the graph (Sub mean, Div std) before the first Q: as
    fp16 layers they moved codes near ties (73% of the output identical, 1 step); on the host in
    fp32, as onnxruntime computes them, the int8 region matches bit for bit."""
    m = bench_int8_arch.measure("googlenet_like", str(tmp_path), "s8")
    assert m["regions"] == 1 and m["identical"] == 1.0 and m["steps"] == 0, m
    host = [w for w in m["why"] if w[2] == "cpu"]
    assert sorted(w[1] for w in host) == ["Div", "Sub"], host
    assert all("input preprocessing" in w[3] for w in host), host
