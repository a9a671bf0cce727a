"""int8 benchmark: the simulator's int8 (QDQ) execution against onnxruntime's own int8 run.

    python benchmarks/bench_int8.py [--repeat N] [--batch 1 8] [--models resnet50 mobilenetv2]
                                    [--act s8 u8] [--cache DIR]

Per model (ResNet-50 from the onnx wheel's zoo and MobileNetV2-style width 1.0, seeded weights,
BatchNorm folded by onnxruntime's ``quant_pre_process``) and activation type (S8S8 / U8S8,
per-channel int8 weights, ``quantize_static`` QDQ with a seeded 4-sample calibration):

* **shim**: ``onnx_mrvl.InferenceSession`` on the converted model (end to end: host ops, the
  bridge, the simulator);
* **sim**: the time inside the simulator alone (sum of the regions' ``last_wall_s``);
* **ort**: ``onnxruntime.InferenceSession`` on the QDQ model (CPU provider, default options:
  its QDQ fusions run QLinearConv / QGemm through MLAS);

timed like ``bench_shim.py``: alternating phases, each starting with untimed warm-up runs (five, 50 ms),
medians of ``--repeat`` runs; the ratios are of the medians (and of the fastest runs). Then both
again with one thread each, timed by the thread's CPU time (robust on a shared machine). The last
columns are the perf
model's cycles (``Simulator.perf`` summed over the regions) of the int8 model and of the same
float model converted to fp16, and their ratio.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import onnx
import onnx.version_converter
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import onnx_mrvl  # noqa: E402
from onnx_mrvl.testing import timing  # noqa: E402
from onnx_mrvl.testing.int8_zoo import quantize_static_qdq  # noqa: E402
from onnx_mrvl.artifact import load  # noqa: E402
from onnx_mrvl.sim import Simulator  # noqa: E402

from bench_shim import with_batch  # noqa: E402

_WARMUP = 5


def _float_model(name: str, batch: int) -> onnx.ModelProto:
    from onnx_mrvl.testing import models
    from onnx_mrvl.testing.randomize_weights import load_zoo
    if name == "resnet50_zoo":
        m = load_zoo("resnet50", seed=0)
    elif name == "resnet50":
        m = models.resnet50_like(seed=0, batch=batch)
    else:
        m = models.mobilenetv2_like(seed=0, width=1.0, batch=batch)
    inits = {t.name for t in m.graph.initializer}          # IR 3 lists initializers as inputs: the
    for v in [v for v in m.graph.input if v.name in inits]:    # quantizer's new ones would not be
        m.graph.input.remove(v)
    m.ir_version = max(m.ir_version, 7)
    if m.opset_import[0].version < 13:                         # per-channel DequantizeLinear: opset 13
        m = onnx.version_converter.convert_version(m, 13)
    return with_batch(m, batch)     # the zoo ResNet-50's Reshape to [1, 2048] too


LABELS = {"resnet50": "ResNet-50 (testing/models)", "mobilenetv2": "MobileNetV2-style (width 1.0)",
          "resnet50_zoo": "ResNet-50 (onnx zoo)"}


def _prepare(name: str, batch: int, act: str, cache: str):
    """(preprocessed float path, QDQ path), made once per cache directory."""
    from onnxruntime.quantization.shape_inference import quant_pre_process
    pre = os.path.join(cache, f"{name}-b{batch}-pre.onnx")
    qpath = os.path.join(cache, f"{name}-b{batch}-{act}.onnx")
    if not os.path.exists(pre):
        src = os.path.join(cache, f"{name}-b{batch}-float.onnx")
        onnx.save(_float_model(name, batch), src)
        quant_pre_process(src, pre, skip_symbolic_shape=True)
    if not os.path.exists(qpath):
        m = onnx.load(pre)
        inp = m.graph.input[0]
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        rng = np.random.default_rng(0)
        quantize_static_qdq(pre, qpath, [{inp.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(4)], act)
    return pre, qpath


def _cycles(result) -> int:
    return sum(Simulator(load(sg.binary)).perf.cycles for sg in result.subgraphs)


def _time(sess, ref, feed, repeat, rounds):
    t_shim, t_sim, t_ort = [], [], []
    for _ in range(rounds):
        t = timing.alternate(sess, ref, feed, repeat, warmup=_WARMUP)
        t_shim += t["shim"]
        t_sim += t["sim"]
        t_ort += t["ort"]
    return tuple(float(np.median(v)) for v in (t_shim, t_sim, t_ort)) + (min(t_sim), min(t_ort))


def _cpu_one_thread(model_path, qpath, feed, repeat, rounds):
    """(shim, onnxruntime) medians of the calling thread's CPU time, one thread each
    (ONNX_MRVL_SIM_THREADS=1, intra_op_num_threads=1): the work itself, insensitive to other
    processes competing for the cores (a loaded machine stretches wall times, not CPU times)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    old = os.environ.get("ONNX_MRVL_SIM_THREADS")
    os.environ["ONNX_MRVL_SIM_THREADS"] = "1"
    try:
        sess = onnx_mrvl.InferenceSession(model_path, so)
        ref = ort.InferenceSession(qpath, so, providers=["CPUExecutionProvider"])
        t_shim, t_ort = [], []
        for _ in range(rounds):
            for runner, acc in ((sess, t_shim), (ref, t_ort)):
                for _ in range(2):
                    runner.run(None, feed)
                for _ in range(repeat):
                    t0 = time.thread_time()
                    runner.run(None, feed)
                    acc.append(time.thread_time() - t0)
        return float(np.median(t_shim)), float(np.median(t_ort))
    finally:
        if old is None:
            del os.environ["ONNX_MRVL_SIM_THREADS"]
        else:
            os.environ["ONNX_MRVL_SIM_THREADS"] = old


def measure(name: str, batch: int, act: str, repeat: int, rounds: int, cache: str) -> dict:
    pre, qpath = _prepare(name, batch, act, cache)
    with tempfile.TemporaryDirectory() as d:
        result = onnx_mrvl.convert(qpath)
        result.save(d)
        cycles_int8 = _cycles(result)
        cycles_fp16 = _cycles(onnx_mrvl.convert(pre))
        sess = onnx_mrvl.InferenceSession(os.path.join(d, "model.onnx"))
        ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
        inp = ref.get_inputs()[0]
        x = np.random.default_rng(1).standard_normal(inp.shape).astype(np.float32)
        feed = {inp.name: x}
        a, b = ref.run(None, feed)[0], sess.run(None, feed)[0]
        shim, sim, orts, sim_min, ort_min = _time(sess, ref, feed, repeat, rounds)
        cpu_shim, cpu_ort = _cpu_one_thread(os.path.join(d, "model.onnx"), qpath, feed, repeat, rounds)
        return {"model": LABELS[name], "batch": batch, "act": act.upper() + "S8", "regions": len(result.subgraphs),
                "shim_ms": shim * 1e3, "sim_ms": sim * 1e3, "ort_ms": orts * 1e3,
                "best_ratio": sim_min / ort_min, "cpu_shim_ms": cpu_shim * 1e3, "cpu_ort_ms": cpu_ort * 1e3,
                "max_diff": float(np.abs(a - b).max()),
                "cycles_int8": cycles_int8, "cycles_fp16": cycles_fp16}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10, help="timed runs of each per phase (medians)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating phases per runtime")
    ap.add_argument("--batch", type=int, nargs="+", default=[1])
    ap.add_argument("--models", nargs="+", default=["resnet50", "mobilenetv2"], choices=sorted(LABELS))
    ap.add_argument("--act", nargs="+", default=["s8", "u8"], choices=["s8", "u8"])
    ap.add_argument("--cache", default=None, help="directory keeping the quantized models between runs")
    args = ap.parse_args(argv)
    cache = args.cache or tempfile.mkdtemp(prefix="bench_int8-")
    os.makedirs(cache, exist_ok=True)
    rows = [measure(m, b, a, args.repeat, args.rounds, cache)
            for m in args.models for b in args.batch for a in args.act]
    print("| model | batch | int8 | regions | shim ms | simulator ms | onnxruntime QDQ ms | shim / ort "
          "| sim / ort | best sim / best ort | 1-thread CPU ms shim / ort | ratio | max abs diff | int8 cycles | fp16 cycles | int8 / fp16 cycles |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['batch']} | {r['act']} | {r['regions']} | {r['shim_ms']:.1f} | {r['sim_ms']:.1f} | "
              f"{r['ort_ms']:.1f} | {r['shim_ms'] / r['ort_ms']:.2f}x | {r['sim_ms'] / r['ort_ms']:.2f}x | {r['best_ratio']:.2f}x | "
              f"{r['cpu_shim_ms']:.1f} / {r['cpu_ort_ms']:.1f} | {r['cpu_shim_ms'] / r['cpu_ort_ms']:.2f}x | "
              f"{r['max_diff']:.3g} | {r['cycles_int8']:,} | {r['cycles_fp16']:,} | "
              f"{r['cycles_int8'] / r['cycles_fp16']:.2f} |")
    print("\nshim: onnx_mrvl.InferenceSession end to end; simulator: time inside the regions' simulator; "
          "onnxruntime QDQ: the quantized model on onnxruntime's CPU provider (default options); ratios of the medians, and "
          "of the fastest runs (less sensitive to other processes on the machine); 1-thread CPU: the thread CPU "
          "time of one run of each with one thread (the shim end to end); cycles: the "
          "perf model (Simulator.perf) of the int8 regions and of the float model converted to fp16.")
    return rows


if __name__ == "__main__":
    main()
