"""Shim benchmark: bridge overhead per Subgraph call and end-to-end shim / onnxruntime time.

    python benchmarks/bench_shim.py [--repeat N]

Medians of ``--repeat`` runs. Bridge overhead = (wall time of session.run) - (time inside the
simulator), per call, for models converted into one region; the figures are ratios measured in
the same run. The shim and plain onnxruntime (CPU provider, default options) are timed in
alternating blocks of runs with a short idle gap before each block, rather than alternating single
runs: after a run, onnxruntime's intra-op threads and the simulator's native workers keep spinning
for a while, and a run of the other started in that window loses a core to them.
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
sys.path[:0] = [ROOT, os.path.join(ROOT, "tools")]

import onnx_mrvl  # noqa: E402
import models  # noqa: E402
from randomize_weights import load_zoo  # noqa: E402


_IDLE_S = 0.3     # idle gap before each block: both runtimes' spinning threads have gone to sleep


def _cases():
    yield "ResNet-50 (zoo)", load_zoo("resnet50", seed=0)
    yield "ResNet-18-style", models.resnet18_like(seed=0)
    yield "MobileNetV2-style (width 1.0)", models.mobilenetv2_like(seed=0, width=1.0)
    yield "MobileNetV2-style (width 0.5)", models.mobilenetv2_like(seed=0)


def measure(name, model, repeat):
    with tempfile.TemporaryDirectory() as d:
        onnx_mrvl.convert(model).save(d)
        sess = onnx_mrvl.InferenceSession(os.path.join(d, "model.onnx"))
        ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        inp = sess.get_inputs()[0]
        x = np.random.default_rng(0).standard_normal(inp.shape).astype(np.float32)
        feed = {inp.name: x}
        sess.run(None, feed)
        ref.run(None, feed)
        t_shim, t_sim, t_ort, c_ort = [], [], [], []
        block = max(1, min(5, repeat))
        for _ in range(-(-repeat // block)):
            time.sleep(_IDLE_S)
            for _ in range(block):
                t0 = time.perf_counter()
                sess.run(None, feed)
                t_shim.append(time.perf_counter() - t0)
                t_sim.append(sum(s["last_wall_s"] for s in sess.mrvl_stats()))
            time.sleep(_IDLE_S)
            for _ in range(block):
                t0, c0 = time.perf_counter(), time.process_time()
                ref.run(None, feed)
                t_ort.append(time.perf_counter() - t0)
                c_ort.append(time.process_time() - c0)
        sim_s = float(np.median(t_sim))
        stats = sess.mrvl_stats()
        shim = float(np.median(t_shim))
        orts = float(np.median(t_ort))
        ort_cpu = float(np.median(c_ort))
        overhead = max(0.0, shim - sim_s)
        return {"model": name, "regions": len(stats), "shim_ms": shim * 1e3, "ort_ms": orts * 1e3,
                "sim_ms": sim_s * 1e3, "bridge_ms": overhead * 1e3,
                "bridge_pct": 100 * overhead / sim_s if sim_s else 0.0, "shim_over_ort": shim / orts,
                "ort_cpu_ms": ort_cpu * 1e3, "shim_over_ort_cpu": shim / ort_cpu if ort_cpu else float("nan")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args(argv)
    rows = [measure(n, m, args.repeat) for n, m in _cases()]
    print("| model | regions | shim ms | simulator ms | bridge ms | bridge % of sim | onnxruntime ms "
          "| onnxruntime CPU ms | shim / ort | shim / ort CPU |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['regions']} | {r['shim_ms']:.1f} | {r['sim_ms']:.1f} | {r['bridge_ms']:.2f} | "
              f"{r['bridge_pct']:.1f}% | {r['ort_ms']:.1f} | {r['ort_cpu_ms']:.1f} | {r['shim_over_ort']:.2f}x | "
              f"{r['shim_over_ort_cpu']:.2f}x |")
    print("\nshim / ort: wall time over onnxruntime's wall time (CPU provider, default threads); "
          "shim / ort CPU: over the process CPU time onnxruntime used (all its threads).")
    return rows


if __name__ == "__main__":
    main()
