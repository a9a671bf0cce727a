"""The simulator's fixed cost per layer and how much of a run both cores compute.

    python benchmarks/bench_sim_overhead.py [--layers 200] [--repeat 200] [--models mb05,mb1] [--batch 1,8]
                                            [--balance] [--kinds]

* **Fixed cost**: a chain of ``--layers`` 1x1 convs on a [1, 1, 1, 16] tensor (no work to speak
  of), run by ``Simulator.run``: its time per layer is what every layer costs besides its work
  (the record's dispatch in ``run_steps``; the run's Python is amortised over the chain); and the
  same chain on [1, 14, 14, 64] maps, big enough to be split over the threads, whose time per
  layer above its single-threaded work is the barrier.
* **Busy fraction** of the bench_shim models: ``run_steps_profiled`` times each step's wall time and
  the time its threads spent inside parts; busy = sum(work) / (threads x sum(wall)), from the
  minimum of each step over ``--repeat`` runs (the machine is shared: the minimum is the stable
  statistic), with the load average printed beside it. At batch > 1 a program that splits by
  image (sim/batch_split.py) has no per-step barrier: each core runs whole images.
* ``--balance``: what the idle time inside the steps would be on an idle machine, from CPU times
  (a loaded machine's wall times are mostly the other jobs'): ``run_steps_parts`` logs each part's
  thread CPU time; per step, the CPU on one thread, the CPU summed over the parts on all threads
  (more: what splitting costs), and the greedy schedule of the parts in claim order on the
  threads: its makespan, and threads x makespan - CPU, the barrier's idle core time.
* ``--kinds``: one thread each, the simulator's CPU per layer kind (conv 1x1, 3x3, depthwise, ...;
  ``ONNX_MRVL_SIM_DWPW=0`` so the fused pairs count apart) against onnxruntime's node times
  (``intra_op_num_threads=1``, its profiler); minimum over ``--repeat`` runs of each.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from onnx_mrvl.sim import Simulator, native  # noqa: E402
from onnx_mrvl.sim.parallel import workers  # noqa: E402
from onnx_mrvl.testing.timing import seconds  # noqa: E402


def chain(layers: int, hw: int, c: int):
    """meta, weights of ``layers`` 1x1 convs (c -> c, relu) on [1, hw, hw, c]."""
    shape = [1, hw, hw, c]
    rng = np.random.default_rng(0)
    meta = {"format": "onnx_mrvl.program", "program_version": 1, "name": "chain", "batch_size": 1,
            "quantize": "float16", "arch": {},
            "inputs": [{"name": "x", "tensor": 0, "shape": shape, "layout": "NHWC"}],
            "outputs": [{"name": "y", "tensor": layers, "shape": shape, "layout": "NHWC"}],
            "tensors": [{"id": i, "name": f"t{i}", "shape": shape, "layout": "NHWC"} for i in range(layers + 1)],
            "weights": [], "layers": []}
    weights = {}
    for i in range(layers):
        meta["layers"].append({"index": i, "name": f"conv_{i}", "layer_name": "Conv2D", "inputs": [i],
                               "outputs": [i + 1], "weights": {"kernel": f"w{i}"},
                               "params": {"strides": [1, 1], "padding": [0, 0, 0, 0], "dilation": [1, 1],
                                          "groups": 1, "kernel_size": [1, 1], "channels": c, "activation": "relu"}})
        weights[f"w{i}"] = (rng.standard_normal((c, 1, 1, c)) / c ** 0.5).astype(np.float16)
        meta["weights"].append({"name": f"w{i}", "shape": [c, 1, 1, c], "dtype": "float16"})
    return meta, weights


def best(fn, repeat: int) -> float:
    """The fastest of ``repeat`` runs of ``fn()`` after one untimed (the machine is shared: the minimum)."""
    return min(seconds(fn, repeat))


def fixed_cost(layers: int, repeat: int) -> None:
    for hw, c in ((1, 16), (14, 64)):
        sim = Simulator.from_program(*chain(layers, hw, c))
        x = [np.random.default_rng(1).standard_normal((1, hw, hw, c)).astype(np.float32)]
        per = {}
        for nt in ("1", str(workers())):
            os.environ["ONNX_MRVL_SIM_THREADS"] = nt
            per[nt] = best(lambda: sim.run(x), repeat) / layers * 1e6
        os.environ.pop("ONNX_MRVL_SIM_THREADS", None)
        print(f"chain of {layers} 1x1 convs on [1, {hw}, {hw}, {c}]: "
              + ", ".join(f"{nt} thread(s) {v:.2f} us per layer" for nt, v in per.items()))


def busy(key: str, batch: int, repeat: int) -> None:
    import onnx_mrvl
    from bench_shim import CASES, with_batch
    sim = Simulator(onnx_mrvl.convert(with_batch(CASES[key][1](), batch)).subgraphs[0].binary)
    x = np.random.default_rng(0).standard_normal(sim.input_shapes[0]).astype(np.float32)
    lib, nt = native.lib(), workers()
    lib.run_steps_profiled.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    sim.run([x])
    segs = [s for s in sim._static.segments if s[0] == "native"]
    best_p = [np.full((len(s[1]), 2), 1 << 62, np.int64) for s in segs]
    prof = [np.zeros((len(s[1]), 2), np.int64) for s in segs]
    for _ in range(repeat):
        for s, p, b in zip(segs, prof, best_p):
            lib.run_steps_profiled(s[4], len(s[1]), s[5], nt, p.ctypes.data)
            better = p[:, 0] < b[:, 0]
            b[better] = p[better]
    wall = sum(int(b[:, 0].sum()) for b in best_p) / 1e6
    work = sum(int(b[:, 1].sum()) for b in best_p) / 1e6
    run = best(lambda: sim.run([x]), max(3, repeat // 10)) * 1e3
    split = " (a run splits by image: no per-step barrier)" if getattr(sim, "_split", None) else ""
    print(f"{CASES[key][0]}, batch {batch}: {nt} threads, steps' wall {wall:.2f} ms, work {work:.2f} ms, "
          f"busy {work / (nt * wall):.2f}; Simulator.run {run:.2f} ms{split}; load {os.getloadavg()[0]:.1f}")


def _sim(key: str, batch: int):
    import onnx_mrvl
    from bench_shim import CASES, with_batch
    model = with_batch(CASES[key][1](), batch)
    sim = Simulator(onnx_mrvl.convert(model).subgraphs[0].binary)
    return model, sim, np.random.default_rng(0).standard_normal(sim.input_shapes[0]).astype(np.float32)


def _kind(step) -> str:
    from onnx_mrvl.sim.kernels import FC, Conv2D
    f = step.fn.conv if step.inner is not None else getattr(step.fn, "__self__", None)
    if isinstance(f, Conv2D):
        k = "depthwise" if f.depthwise else ("grouped" if f.groups > 1 else "conv")
        return f"{k} {f.kh}x{f.kw}/s{f.strides[0]}"
    return "fc" if isinstance(f, FC) else step.spec.layer_name.lower()


def _part_log(plan, nthreads: int, repeat: int):
    """{(segment, step): [per run: array of the step's parts' thread CPU ns in claim order]}"""
    lib, cap, out = native.lib(), 1 << 16, {}
    for si, s in enumerate(x for x in plan.segments if x[0] == "native"):
        n = len(s[1])
        prof, log, counts = np.zeros((n, 2), np.int64), np.zeros((cap, 4), np.int64), np.zeros(n, np.int64)
        for _ in range(repeat):
            lib.run_steps_parts(s[4], n, s[5], nthreads, prof.ctypes.data, log.ctypes.data, cap, counts.ctypes.data)
            off = 0
            for i in range(n):
                c = int(counts[i])
                out.setdefault((si, i), []).append(log[off:off + c][np.argsort(log[off:off + c, 0]), 2].copy())
                off += c
    return out


def balance(key: str, batch: int, repeat: int) -> None:
    _, sim, x = _sim(key, batch)
    plan = sim._split._plan(0) if getattr(sim, "_split", None) else sim._static
    sim.run([x])
    nt = workers()
    one, many = _part_log(plan, 1, repeat), _part_log(plan, nt, repeat)
    entries = [e for s in plan.segments if s[0] == "native" for e in s[1]]
    rows = {}
    for (si, i), e in zip(sorted(many), entries):
        if not len(many[(si, i)][0]):
            continue                                   # the second record of a fused pair
        free = []
        for parts in many[(si, i)]:
            t = [0] * nt
            for c in parts:                            # each part to the thread free first
                t[t.index(min(t))] += int(c)
            free.append(max(t))
        r = rows.setdefault(_kind(e.step) + (" + its 1x1 (fused)" if e.rec and e.rec[0] == 10 else ""), np.zeros(5))
        r += (1, np.median([p.sum() for p in one[(si, i)]]), np.median([p.sum() for p in many[(si, i)]]),
              np.median(free), 0)
    for r in rows.values():
        r[4] = nt * r[3] - r[2]
    tot = sum(rows.values())
    print(f"{CASES_NAME(key)}, batch {batch}{' (one image: the split runs whole images)' if plan is not sim._static else ''}"
          f", {nt} threads, us per run (medians of {repeat}):")
    print("| layers | n | CPU, 1 thread | CPU, all threads | makespan | barrier idle core-us |")
    print("|---|---|---|---|---|---|")
    for k, r in sorted(rows.items(), key=lambda kv: -kv[1][1]) + [("total", tot)]:
        print(f"| {k} | {int(r[0])} | {r[1] / 1e3:.1f} | {r[2] / 1e3:.1f} | {r[3] / 1e3:.1f} | {r[4] / 1e3:.1f} |")
    print(f"parallel efficiency (CPU on one thread / threads / makespan): {tot[1] / nt / tot[3]:.3f}")


def kinds(key: str, repeat: int, shapes: bool = False) -> None:
    """``shapes``: the convs by input -> output channels and output map size as well."""
    import json
    import onnxruntime as ort
    os.environ["ONNX_MRVL_SIM_DWPW"] = "0"
    from onnx_mrvl.sim import plan_fusion
    saved, plan_fusion.ENABLED = plan_fusion.ENABLED, False
    try:
        model, sim, x = _sim(key, 1)
    finally:
        plan_fusion.ENABLED = saved
    sim.run([x])
    log = _part_log(sim._static, 1, repeat)
    steps = [e.step for s in sim._static.segments if s[0] == "native" for e in s[1]]
    mine: dict = {}
    def name(st):
        k = _kind(st)
        if shapes and k.startswith(("conv", "grouped", "depthwise")) and st.ins:
            i, o = sim._static.shapes.get(st.ins[0]), sim._static.shapes.get(st.out)
            k = f"{k} {i[-1]}->{o[-1]} @{o[1]}"
        return k
    for k, st in zip(sorted(log), steps):
        mine[name(st)] = mine.get(name(st), 0) + min(int(p.sum()) for p in log[k]) / 1e3
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.enable_profiling = 1, True
    so.profile_file_prefix = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench_kinds_{key}")
    ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feed = {ref.get_inputs()[0].name: x.transpose(0, 3, 1, 2) if tuple(x.shape) != tuple(ref.get_inputs()[0].shape) else x}
    for _ in range(repeat):
        ref.run(None, feed)
    path = ref.end_profiling()
    times: dict = {}
    with open(path) as f:
        for ev in json.load(f):
            if ev.get("cat") == "Node" and ev["name"].endswith("_kernel_time"):
                times.setdefault(ev["name"], (ev["args"], []))[1].append(ev["dur"])
    os.remove(path)
    theirs: dict = {}
    by_shape = shapes
    for args, durs in times.values():
        op, shapes = args.get("op_name"), [list(v.values())[0] for v in args.get("input_type_shape", [])]
        if op in ("Conv", "FusedConv"):
            w, cin = shapes[1], shapes[0][1]
            out = list(args["output_type_shape"][0].values())[0]
            g = cin // w[1]
            k = "depthwise" if g == cin > 1 else ("grouped" if g > 1 else "conv")
            k = f"{k} {w[2]}x{w[3]}/s{shapes[0][2] // out[2] if out[2] else 1}"
            if by_shape:
                k = f"{k} {cin}->{w[0]} @{out[2]}"
        else:
            k = {"Gemm": "fc", "MatMul": "fc", "MaxPool": "maxpool2d", "AveragePool": "avgpool2d",
                 "GlobalAveragePool": "globalavgpool2d"}.get(op, op)
        theirs[k] = theirs.get(k, 0) + min(durs)
    print(f"{CASES_NAME(key)}, batch 1, one thread each, us per run (minimum of {repeat} per layer):")
    print("| layers | simulator (thread CPU) | onnxruntime (node time) | ratio |")
    print("|---|---|---|---|")
    for k in sorted(set(mine) | set(theirs), key=lambda k: -max(mine.get(k, 0), theirs.get(k, 0))):
        a, b = mine.get(k, 0.0), theirs.get(k, 0.0)
        print(f"| {k} | {a:.1f} | {b:.1f} | {f'{a / b:.2f}x' if a and b else '-'} |")
    print(f"| total | {sum(mine.values()):.1f} | {sum(theirs.values()):.1f} | "
          f"{sum(mine.values()) / sum(theirs.values()):.2f}x |")
    from fma_peak import fma_peak_gflops, model_macs
    macs, peak = model_macs(model), fma_peak_gflops()
    floor = 2 * macs / peak / 1e3          # us on one core at the FMA peak
    print(f"{macs / 1e9:.3f} GMAC (Conv, Gemm, MatMul); one core's fp32 FMA peak {peak:.1f} GFLOP/s (thread CPU): "
          f"at least {floor:.1f} us on one thread; simulator at {floor / sum(mine.values()):.1%} of the peak, "
          f"onnxruntime at {floor / sum(theirs.values()):.1%}; load {os.getloadavg()[0]:.1f}")


def CASES_NAME(key: str) -> str:
    from bench_shim import CASES
    return CASES[key][0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--models", default="mb05,mb1")
    ap.add_argument("--batch", default="1")
    ap.add_argument("--balance", action="store_true", help="the steps' balance from thread CPU times")
    ap.add_argument("--kinds", action="store_true", help="one thread: simulator vs onnxruntime per layer kind")
    ap.add_argument("--shapes", action="store_true", help="with --kinds: the convs by channels and map size too")
    args = ap.parse_args(argv)
    keys = [k for k in args.models.split(",") if k]
    if args.balance or args.kinds:
        for key in keys:
            for b in (int(v) for v in args.batch.split(",") if v):
                if args.balance:
                    balance(key, b, max(5, args.repeat // 10))
            if args.kinds:
                kinds(key, max(5, args.repeat // 10), args.shapes)
        return
    print(f"load average {os.getloadavg()[0]:.1f}")
    fixed_cost(args.layers, args.repeat)
    for b in (int(v) for v in args.batch.split(",") if v):
        for key in (k for k in args.models.split(",") if k):
            busy(key, b, args.repeat if b == 1 else max(5, args.repeat // 10))


if __name__ == "__main__":
    main()
