"""Shim benchmark: bridge overhead per Subgraph call and end-to-end shim / onnxruntime time.

    python benchmarks/bench_shim.py [--repeat N] [--rounds R]

Medians of ``--repeat`` runs. Bridge overhead = (wall time of session.run) - (time inside the
simulator), per call, for models converted into one region; the figures are ratios measured in
the same run. The shim and plain onnxruntime (CPU provider, default options) are timed in
alternating phases (``--rounds`` of them), each phase ``--repeat`` back-to-back runs of one runtime
after five untimed warm-up runs, for both alike. What is compared is each runtime's steady-state
latency at batch 1. Two ways of alternating proved unfair:
* short blocks: after a run, onnxruntime's intra-op threads keep spinning, and the simulator's
  native workers too; a run of the other started in that window loses a core to them (measured:
  MobileNetV2-style 2.4x with 2 warm-up runs, against 1.3x with 5);
* idle gaps between blocks (50-300 ms): they measure waking from idle -- sleeping threads, the
  host's clock ramp -- and made blocks of the same model vary 2.3-6.3 ms.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import onnx_mrvl  # noqa: E402
from onnx_mrvl.testing import models  # noqa: E402
from onnx_mrvl.testing.randomize_weights import load_zoo  # noqa: E402


_WARMUP = 5       # untimed runs that start each phase (see the module docstring)


def _cases():
    yield "ResNet-50 (zoo)", load_zoo("resnet50", seed=0)
    yield "ResNet-18-style", models.resnet18_like(seed=0)
    yield "MobileNetV2-style (width 1.0)", models.mobilenetv2_like(seed=0, width=1.0)
    yield "MobileNetV2-style (width 0.5)", models.mobilenetv2_like(seed=0)


def _round(sess, ref, feed, repeat):
    """One measurement: alternating blocks, each starting with untimed warm-up runs; medians."""
    t_shim, t_sim, t_ort, c_ort = [], [], [], []
    block = max(1, repeat)
    for _ in range(-(-repeat // block)):
        for _ in range(_WARMUP):
            sess.run(None, feed)
        for _ in range(block):
            t0 = time.perf_counter()
            sess.run(None, feed)
            t_shim.append(time.perf_counter() - t0)
            t_sim.append(sum(s["last_wall_s"] for s in sess.mrvl_stats()))
        for _ in range(_WARMUP):
            ref.run(None, feed)
        for _ in range(block):
            t0, c0 = time.perf_counter(), time.process_time()
            ref.run(None, feed)
            t_ort.append(time.perf_counter() - t0)
            c_ort.append(time.process_time() - c0)
    return tuple(float(np.median(v)) for v in (t_shim, t_sim, t_ort, c_ort))


def measure(name, model, repeat, rounds=1):
    """Convert once, then ``rounds`` measurements; ratios are medians over the rounds, with their range."""
    with tempfile.TemporaryDirectory() as d:
        onnx_mrvl.convert(model).save(d)
        sess = onnx_mrvl.InferenceSession(os.path.join(d, "model.onnx"))
        ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        inp = sess.get_inputs()[0]
        x = np.random.default_rng(0).standard_normal(inp.shape).astype(np.float32)
        feed = {inp.name: x}
        sess.run(None, feed)
        ref.run(None, feed)
        res = [_round(sess, ref, feed, repeat) for _ in range(max(1, rounds))]
        shim, sim_s, orts, ort_cpu = (float(np.median([r[k] for r in res])) for k in range(4))
        ratios = [r[0] / r[2] for r in res]
        overhead = max(0.0, shim - sim_s)
        return {"model": name, "regions": len(sess.mrvl_stats()), "shim_ms": shim * 1e3, "ort_ms": orts * 1e3,
                "sim_ms": sim_s * 1e3, "bridge_ms": overhead * 1e3,
                "bridge_pct": 100 * overhead / sim_s if sim_s else 0.0, "shim_over_ort": float(np.median(ratios)),
                "shim_over_ort_range": (min(ratios), max(ratios)),
                "ort_cpu_ms": ort_cpu * 1e3, "shim_over_ort_cpu": shim / ort_cpu if ort_cpu else float("nan")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10, help="runs of each per round (medians)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measurements per model; the ratio is their median, printed with its range")
    args = ap.parse_args(argv)
    rows = [measure(n, m, args.repeat, args.rounds) for n, m in _cases()]
    print("| model | regions | shim ms | simulator ms | bridge ms | bridge % of sim | onnxruntime ms "
          "| onnxruntime CPU ms | shim / ort | range over rounds | shim / ort CPU |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["shim_over_ort_range"]
        print(f"| {r['model']} | {r['regions']} | {r['shim_ms']:.1f} | {r['sim_ms']:.1f} | {r['bridge_ms']:.2f} | "
              f"{r['bridge_pct']:.1f}% | {r['ort_ms']:.1f} | {r['ort_cpu_ms']:.1f} | {r['shim_over_ort']:.2f}x | "
              f"{lo:.2f}-{hi:.2f}x | {r['shim_over_ort_cpu']:.2f}x |")
    print("\nshim / ort: wall time over onnxruntime's wall time (CPU provider, default threads), the median "
          "over the rounds; shim / ort CPU: over the process CPU time onnxruntime used (all its threads).")
    return rows


if __name__ == "__main__":
    main()
