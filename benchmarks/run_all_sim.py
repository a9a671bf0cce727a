"""The simulator sections of ``run_all.py``: simulator GFLOP/s against numpy float32 GEMM (and the output
of ``bench_sim_kernels.py``), and the simulator's end-to-end speed against onnxruntime (``bench_shim.py``'s
measurement: shim / simulator / onnxruntime at batch 1)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

import numpy as np

import onnx_mrvl
from onnx_mrvl.testing.timing import median_seconds

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
Facts = Dict[str, object]


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sim_available() -> bool:
    try:
        from onnx_mrvl.sim import Simulator  # noqa: F401,PLC0415
        return True
    except Exception:  # noqa: BLE001
        return False


def median_run(sess, feed, names, repeat: int) -> float:
    return median_seconds(lambda: sess.run(names, feed), repeat)


def numpy_gemm_gflops(n: int = 512, repeat: int = 5) -> float:
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    a @ b
    t = time.perf_counter()
    for _ in range(repeat):
        a @ b
    return 2 * n ** 3 * repeat / (time.perf_counter() - t) / 1e9


def _conv_model(c_in: int, c_out: int, k: int, size: int):
    from onnx import TensorProto, helper, numpy_helper
    w = (np.random.default_rng(0).standard_normal((c_out, c_in, k, k)) / np.sqrt(c_in * k * k)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[k // 2] * 4)], "conv",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c_out, size, size])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def sim_conv_gflops(repeat: int = 5) -> List[str]:
    """GFLOP/s of single-Conv models run end to end through the shim, vs numpy GEMM of the same size."""
    rows = ["| layer | MACs | shim ms | shim GFLOP/s | numpy GEMM GFLOP/s (same M,K,N) | ratio |",
            "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for c_in, c_out, k, size in ((256, 64, 1, 56), (64, 64, 3, 56), (512, 512, 3, 7)):
        m = _conv_model(c_in, c_out, k, size)
        r = onnx_mrvl.convert(m)
        with tempfile.TemporaryDirectory() as d:
            sess = onnx_mrvl.InferenceSession(r.save(d))
            feed = {"x": np.random.default_rng(1).standard_normal((1, c_in, size, size)).astype(np.float32)}
            t = median_run(sess, feed, None, repeat)
        macs = r.report.macs_offloaded
        a = np.random.default_rng(2).standard_normal((size * size, c_in * k * k)).astype(np.float32)
        b = np.random.default_rng(3).standard_normal((c_in * k * k, c_out)).astype(np.float32)
        a @ b
        t0 = time.perf_counter()
        for _ in range(repeat):
            a @ b
        t_np = (time.perf_counter() - t0) / repeat
        sim_g, np_g = 2 * macs / t / 1e9, 2 * macs / t_np / 1e9
        rows.append(f"| conv {c_in}->{c_out} k{k} @{size}x{size} | {macs:,} | {1000 * t:.2f} | {sim_g:.2f} "
                    f"| {np_g:.2f} | {sim_g / np_g:.3f} |")
    return rows


def bench_sim_kernels(timeout: float) -> List[str]:
    rows = [f"numpy float32 GEMM 512x512x512: **{numpy_gemm_gflops():.1f} GFLOP/s** (this machine, this run).", ""]
    if sim_available():
        rows += ["Single-layer models through `onnx_mrvl.InferenceSession` (simulator incl. shim overhead):", ""]
        rows += sim_conv_gflops()
    script = os.path.join(HERE, "bench_sim_kernels.py")
    if not os.path.exists(script) or not sim_available():
        rows.append("")
        rows.append("Simulator kernels: not measured (benchmarks/bench_sim_kernels.py or onnx_mrvl.sim not present "
                    "at the time of this run).")
        return rows
    try:
        out = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        text = out.stdout.strip() or out.stderr.strip()[-2000:]
    except subprocess.TimeoutExpired:
        text = f"bench_sim_kernels.py did not finish within {timeout:.0f} s"
    return rows + ["", "Output of `benchmarks/bench_sim_kernels.py`:", "", text]


# ---------------------------------------------------------------------------------------- main


ROUNDS = 3   # bench_shim measurements per model: the table's figures are their medians, with the range


def bench_sim_speed(repeat: int, facts: Facts, quick: bool = False) -> List[str]:
    """bench_shim's table: shim / simulator / onnxruntime at batch 1 (ResNet-50, MobileNetV2-style),
    medians over ``ROUNDS`` measurements, the shim / onnxruntime range beside."""
    import bench_shim
    rows = ["| model | shim ms | simulator ms | onnxruntime ms | onnxruntime CPU ms | shim / onnxruntime (range) "
            "| shim / onnxruntime CPU | target <= 1.0x (wall / wall, issue #20) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, model in bench_shim._cases():
        if quick and not name.startswith("MobileNetV2-style (width 0.5"):
            continue
        # medians over rounds (bench_shim's alternating phases): one round moved 1.06x -> 2.69x between two
        # runs ten minutes apart on the idle shared host (2026-11-27)
        r = bench_shim.measure(name, model, repeat if quick else max(10, repeat), rounds=1 if quick else ROUNDS)
        facts.setdefault("sim_speed", {})[name] = r
        lo, hi = r["shim_over_ort_range"]
        rows.append(f"| {name} | {r['shim_ms']:.1f} | {r['sim_ms']:.1f} | {r['ort_ms']:.1f} | {r['ort_cpu_ms']:.1f} | "
                    f"{r['shim_over_ort']:.2f}x ({lo:.2f}-{hi:.2f}x) | {r['shim_over_ort_cpu']:.2f}x | "
                    f"{'met' if r['shim_over_ort'] <= 1.0 else 'NOT met'} |")
        say(f"simulator speed {name}: {r['shim_over_ort']:.2f}x")
    return rows
