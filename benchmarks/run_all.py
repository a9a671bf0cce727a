#!/usr/bin/env python3
"""All converter benchmarks in one command; prints markdown and writes docs/benchmarks.md.

``python benchmarks/run_all.py [--sizes 1000 4000 16000 64000] [--budget 900] [--no-zoo] [--out PATH]``

Sections (each figure measured in this run, ratios within one process):
1. convert time per model (project models and the randomized onnx-wheel zoo, partition=max);
2. convert time on synthetic chains and branchy graphs (``models.branchy_chain``) and the log-log
   slope of time against nodes (target <= 1.1); a size whose predicted time (from the slope so far)
   exceeds ``--budget`` seconds is skipped and says so;
3. end to end: the converted model (shim with the simulator when ``onnx_mrvl.sim`` exists, else
   the fp32 reference bodies in plain onnxruntime) against onnxruntime on the original;
4. binary size against the fp16 weight bytes it carries;
5. simulator GFLOP/s against numpy float32 GEMM (``bench_sim_kernels.py`` when present).
"""
from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import onnxruntime as ort  # noqa: E402

import onnx_mrvl  # noqa: E402
from onnx_mrvl.testing.models import all_models, branchy_chain  # noqa: E402
from onnx_mrvl.testing.randomize_weights import random_inputs  # noqa: E402

DEFAULT_OUT = os.path.join(ROOT, "docs", "benchmarks.md")


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sim_available() -> bool:
    try:
        from onnx_mrvl.sim import Simulator  # noqa: F401
        return True
    except Exception:  # noqa: BLE001
        return False


def timed_convert(model, **kw):
    """(result, CPU seconds): CPU time, so a shared, loaded machine does not distort the scaling."""
    t = time.process_time()
    result = onnx_mrvl.convert(model, **kw)
    return result, time.process_time() - t


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of log(y) against log(x)."""
    if len(xs) < 2:
        return float("nan")
    lx, ly = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
    return float(np.polyfit(lx, ly, 1)[0])


# ------------------------------------------------------------------------------------ sections


def bench_models(models: Dict[str, object], results: Dict[str, object]) -> List[str]:
    """Fills ``results`` (name -> ConvertResult) for the binary-size section."""
    rows = ["| model | nodes | convert CPU s | ms / node | legalize s | fuse s | split s | emit+compile s | regions "
            "| offload |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, model in models.items():
        try:
            r, dt = timed_convert(model)
        except Exception as exc:  # noqa: BLE001 - a benchmark row, not a test
            rows.append(f"| {name} | {len(model.graph.node)} | error: {type(exc).__name__} | | | | | | | |")
            continue
        results[name] = r
        t = r.timings
        n = len(model.graph.node)
        rows.append(f"| {name} | {n} | {dt:.2f} | {1000 * dt / n:.1f} | {t.get('legalize', 0):.2f} "
                    f"| {t.get('fuse', 0):.2f} | {t.get('split', 0):.2f} | {t.get('emit+compile', 0):.2f} "
                    f"| {len(r.subgraphs)} | {100 * r.report.offload_fraction:.1f}% |")
        say(f"convert {name}: {dt:.2f} s")
    return rows


def bench_scaling(sizes: Sequence[int], budget: float) -> List[str]:
    rows = ["| graph | nodes | convert CPU s | us / node | regions |", "| --- | ---: | ---: | ---: | ---: |"]
    slopes = []
    for branchy in (False, True):
        kind = "branchy" if branchy else "chain"
        xs, ys = [], []
        for n in sizes:
            if len(xs) >= 1:
                slope = loglog_slope(xs, ys) if len(xs) >= 2 else 1.0
                predicted = ys[-1] * (n / xs[-1]) ** max(slope, 1.0)
                if predicted > budget:
                    rows.append(f"| {kind} | {n} | skipped: predicted {predicted:.0f} s > budget {budget:.0f} s | | |")
                    say(f"scaling {kind} {n}: skipped (predicted {predicted:.0f} s)")
                    continue
            model = branchy_chain(n, branchy=branchy)
            r, dt = timed_convert(model)
            xs.append(n)
            ys.append(dt)
            rows.append(f"| {kind} | {n} | {dt:.2f} | {1e6 * dt / n:.0f} | {len(r.subgraphs)} |")
            say(f"scaling {kind} {n}: {dt:.2f} s")
            del model, r
        slope = loglog_slope(xs, ys)
        slopes.append(f"- {kind}: log-log slope **{slope:.2f}** over {', '.join(map(str, xs))} nodes "
                      f"(target <= 1.1: {'met' if slope <= 1.1 else 'NOT met'})")
    return rows + [""] + slopes


def _median_run(sess, feed, names, repeat: int) -> float:
    sess.run(names, feed)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        sess.run(names, feed)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def bench_end_to_end(models: Dict[str, object], repeat: int) -> List[str]:
    sim = sim_available()
    path_name = "onnx_mrvl.InferenceSession (simulator)" if sim else "plain onnxruntime on fp32 reference bodies"
    rows = [f"Converted model run through: {path_name}.", "",
            "| model | onnxruntime ms | converted ms | ratio | max abs err |", "| --- | ---: | ---: | ---: | ---: |"]
    def so():                       # fresh options each time: the shim registers its ops on them
        o = ort.SessionOptions()
        o.log_severity_level = 3
        return o
    for name, model in models.items():
        feed = random_inputs(model, 0)
        ref = ort.InferenceSession(model.SerializeToString(), so(), providers=["CPUExecutionProvider"])
        names = [o.name for o in ref.get_outputs()]
        try:
            r = onnx_mrvl.convert(model, reference=not sim)
            with tempfile.TemporaryDirectory() as d:
                path = r.save(d)
                sess = (onnx_mrvl.InferenceSession(path, so()) if sim else
                        ort.InferenceSession(path, so(), providers=["CPUExecutionProvider"]))
                t_ref = _median_run(ref, feed, names, repeat)
                t_conv = _median_run(sess, feed, names, repeat)
                err = max(float(np.max(np.abs(np.asarray(a, np.float64) - b))) if np.asarray(b).size else 0.0
                          for a, b in zip(sess.run(names, feed), ref.run(names, feed))
                          if np.asarray(b).dtype.kind == "f")
        except Exception as exc:  # noqa: BLE001
            rows.append(f"| {name} | | error: {type(exc).__name__}: {str(exc)[:80]} | | |")
            continue
        rows.append(f"| {name} | {1000 * t_ref:.2f} | {1000 * t_conv:.2f} | {t_conv / t_ref:.2f} | {err:.2e} |")
        say(f"end-to-end {name}: {t_conv / t_ref:.2f}x")
    return rows


def bench_binary_size(results: Dict[str, object]) -> List[str]:
    from onnx_mrvl.artifact import load
    rows = ["| model | regions | binary bytes | weight elements | fp16 weight bytes | binary / fp16 weights |",
            "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in results.items():
        size = sum(len(sg.binary) for sg in r.subgraphs)
        elems = sum(int(w.size) for sg in r.subgraphs for w in load(sg.binary).weights.values())
        ratio = f"{size / (2 * elems):.3f}" if elems else "-"
        rows.append(f"| {name} | {len(r.subgraphs)} | {size:,} | {elems:,} | {2 * elems:,} | {ratio} |")
    return rows


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
            t = _median_run(sess, feed, None, repeat)
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


def bench_sim_speed(repeat: int) -> List[str]:
    """bench_shim's table: shim / simulator / onnxruntime at batch 1 (ResNet-50, MobileNetV2-style)."""
    import bench_shim
    rows = ["| model | shim ms | simulator ms | onnxruntime ms | onnxruntime CPU ms | shim / onnxruntime "
            "| shim / onnxruntime CPU | target <= 1.5x (wall / wall) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, model in bench_shim._cases():
        r = bench_shim.measure(name, model, max(10, repeat))
        rows.append(f"| {name} | {r['shim_ms']:.1f} | {r['sim_ms']:.1f} | {r['ort_ms']:.1f} | {r['ort_cpu_ms']:.1f} | "
                    f"{r['shim_over_ort']:.2f}x | {r['shim_over_ort_cpu']:.2f}x | "
                    f"{'met' if r['shim_over_ort'] <= 1.5 else 'NOT met'} |")
        say(f"simulator speed {name}: {r['shim_over_ort']:.2f}x")
    return rows


def load_models(zoo: bool) -> Dict[str, object]:
    out = {name: build(seed=0) for name, build in all_models().items()}
    if zoo:
        from onnx_mrvl.testing import randomize_weights as rw
        for name in rw.zoo_model_paths():
            out[f"zoo/{name}"] = rw.load_zoo(name, 0)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 4000, 16000, 64000])
    ap.add_argument("--budget", type=float, default=900.0, help="skip a synthetic size predicted to take longer (s)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per end-to-end timing (median)")
    ap.add_argument("--no-zoo", action="store_true", help="skip the onnx-wheel zoo models")
    ap.add_argument("--out", default=DEFAULT_OUT, help="markdown file to write ('' to skip)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    t0 = time.perf_counter()
    models = load_models(not args.no_zoo)
    small = {k: v for k, v in models.items() if not k.startswith("zoo/")}
    converted: Dict[str, object] = {}
    sections = [
        ("Convert time per model (partition=max)", bench_models(models, converted)),
        ("Convert time on synthetic graphs", bench_scaling(args.sizes, args.budget)),
        ("End to end: converted model vs onnxruntime on the original", bench_end_to_end(small, args.repeat)),
        ("Binary size vs fp16 weight bytes", bench_binary_size(converted)),
        ("Simulator vs numpy float32 GEMM", bench_sim_kernels(args.budget)),
        ("Simulator speed vs onnxruntime, batch 1", bench_sim_speed(args.repeat)),
    ]
    lines = ["# Benchmarks", "", "Generated by `python benchmarks/run_all.py` (do not edit by hand). "
             f"onnxruntime {ort.__version__}, numpy {np.__version__}, {os.cpu_count()} CPUs; "
             f"total {time.perf_counter() - t0:.0f} s.", ""]
    for title, rows in sections:
        lines += [f"## {title}", ""] + rows + [""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
