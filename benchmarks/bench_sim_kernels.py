"""Simulator conv kernels vs onnxruntime's Conv on the same shapes, as a markdown table.

    .venv/bin/python benchmarks/bench_sim_kernels.py [--repeat N] [--batch 1,8] [--rounds R] [--rows SUBSTR,...]

Each row: the simulator's prepared NHWC Conv2D (fp32 GEMM + epilogue + fp16 rounding) against one
onnxruntime Conv node on the NCHW equivalent (float32, CPU provider, default threads), best of
N runs each, at each ``--batch`` (the shapes' first dimension); ``--rounds`` alternates the two
R times (the machine is shared: best of the rounds), each block after a pause in which the other
side's spinning threads go to sleep (onnxruntime's spin ~40 ms after a run); plus numpy's float32
GEMM rate and the fp16 rounding rate. onnxruntime's time includes its NCHW <-> NCHWc reorders, which inside a whole
model happen once at the region's edges: 1x1 convs with large inputs favour the simulator here.
The simulator's kernel runs as its static plan runs it inside a model: the prepared native plan
writing into a buffer allocated once (``Conv2D.apply`` allocates a fresh output per call, whose
page faults cost more than a batch-8 depthwise conv itself: 1.7 against 0.6 ms per image);
onnxruntime reuses its arena likewise.

Rows marked *fused* are a depthwise conv and the 1x1 projection that reads it, as MobileNetV2's
blocks have them: the static plan runs such a pair as one step (``dw_pw``, sim/plan_fusion.py),
so inside a model the projections 144 -> 24 @56, 32 -> 16 @112 and 16 -> 8 @112 never run as the
standalone 1x1 rows above them do; these rows time the pair's native step against onnxruntime's
Conv + Clip + Conv.

*1t* columns: each side on one thread (the simulator's kernel with one thread, onnxruntime with
``intra_op_num_threads=1``, which runs on the calling thread), in thread CPU time, which the other
jobs of a shared machine hardly disturb: the kernels' own ratio. *x2* is the simulator's
one-thread CPU over its wall time on all threads: ~2 means both cores computed in its best block;
~1 means the worker thread did not run alongside (the other core was busy elsewhere), and the
row's wall ratio then says more about the machine than about the kernel.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from onnx_mrvl.sim.blas import configure_once, get_blas_threads  # noqa: E402
from onnx_mrvl.sim.fp16 import round_fp16_  # noqa: E402
from onnx_mrvl.sim.parallel import workers  # noqa: E402
from onnx_mrvl.sim import native  # noqa: E402
from onnx_mrvl.sim.kernels import Conv2D  # noqa: E402
from onnx_mrvl.testing.timing import seconds, settle  # noqa: E402

# name, (N,H,W,C), O, k, stride, pad, groups, activation
SHAPES = [
    ("resnet50 stem 7x7 s2", (1, 224, 224, 3), 64, 7, 2, 3, 1, "relu"),
    ("resnet50 3x3 64", (1, 56, 56, 64), 64, 3, 1, 1, 1, "relu"),
    ("resnet50 1x1 256->64", (1, 56, 56, 256), 64, 1, 1, 0, 1, "relu"),
    ("resnet50 1x1 64->256", (1, 56, 56, 64), 256, 1, 1, 0, 1, "none"),
    ("resnet50 3x3 128 s2", (1, 56, 56, 128), 128, 3, 2, 1, 1, "relu"),
    ("resnet50 3x3 256 @14", (1, 14, 14, 256), 256, 3, 1, 1, 1, "relu"),
    ("resnet50 1x1 1024->256 @14", (1, 14, 14, 1024), 256, 1, 1, 0, 1, "relu"),
    ("resnet50 3x3 512 @7", (1, 7, 7, 512), 512, 3, 1, 1, 1, "relu"),
    ("mbv2 dw 3x3 @112 c32", (1, 112, 112, 32), 32, 3, 1, 1, 32, "clamp"),
    ("mbv2 dw 3x3 s2 @112 c96", (1, 112, 112, 96), 96, 3, 2, 1, 96, "clamp"),
    ("mbv2 dw 3x3 @56 c144", (1, 56, 56, 144), 144, 3, 1, 1, 144, "clamp"),
    ("mbv2 dw 3x3 @14 c384", (1, 14, 14, 384), 384, 3, 1, 1, 384, "clamp"),
    ("mbv2 1x1 144->24 @56", (1, 56, 56, 144), 24, 1, 1, 0, 1, "none"),
    ("mbv2 stem 3x3 s2 3->32", (1, 224, 224, 3), 32, 3, 2, 1, 1, "clamp"),
    ("mbv2 0.5 stem 3x3 s2 3->16", (1, 224, 224, 3), 16, 3, 2, 1, 1, "clamp"),
    ("mbv2 1x1 32->16 @112", (1, 112, 112, 32), 16, 1, 1, 0, 1, "none"),
    ("mbv2 0.5 1x1 16->8 @112", (1, 112, 112, 16), 8, 1, 1, 0, 1, "none"),
    ("mbv2 dw 3x3 @7 c960", (1, 7, 7, 960), 960, 3, 1, 1, 960, "clamp"),
    ("grouped 3x3 g32 @28 c256", (1, 28, 28, 256), 256, 3, 1, 1, 32, "relu"),
    # the general epilogue (an activation the short form does not take; session 22: on AVX-512 it
    # stored the whole register tile at every k, 2.6x these rows' ReLU time)
    ("yolov8 3x3 64 @40 silu", (1, 40, 40, 64), 64, 3, 1, 1, 1, "silu"),
    ("darknet 3x3 64 @40 leaky_relu", (1, 40, 40, 64), 64, 3, 1, 1, 1, "leaky_relu"),
    ("pp-lcnet 1x1 64->128 @40 hard_swish", (1, 40, 40, 64), 128, 1, 1, 0, 1, "hard_swish"),
]

# a depthwise 3x3 (clamp) and the 1x1 projection (no activation) that reads it, fused in the
# static plan as in MobileNetV2: name, (N,H,W,C), projection's O, depthwise stride
PAIRS = [
    ("mbv2 dw @56 c144 + 1x1 ->24 (fused)", (1, 56, 56, 144), 24, 1),
    ("mbv2 dw @112 c32 + 1x1 ->16 (fused)", (1, 112, 112, 32), 16, 1),
    ("mbv2 0.5 dw @112 c16 + 1x1 ->8 (fused)", (1, 112, 112, 16), 8, 1),
    ("mbv2 dw s2 @112 c96 + 1x1 ->24 (fused)", (1, 112, 112, 96), 24, 2),
]


def set_blas_threads(n: int) -> bool:
    """Set numpy's bundled OpenBLAS thread count (process-wide) through ctypes; False if not found."""
    import ctypes
    import glob

    libdir = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in glob.glob(os.path.join(libdir, "libscipy_openblas*.so")):
        lib = ctypes.CDLL(path)
        for sym in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads"):
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                fn(int(n))
                return True
    return False


def best_time(fn, repeat: int) -> float:
    """Minimum wall time of ``repeat`` runs (the machine is shared: the minimum is the stable statistic)."""
    return float(np.min(seconds(fn, repeat)))


def settled_best_time(fn, repeat: int) -> float:
    """``best_time`` after a pause in which the other side's spinning threads go to sleep, and a
    warm-up of at least 50 ms (``timing.settle``, as the end-to-end benchmarks' blocks start).

    onnxruntime's intra-op worker spins ~40 ms of CPU after a session is created and after each
    ``run`` (measured from its thread's schedstat); timed right after that, the simulator's two
    threads share the two cores with it, and a row whose 20 calls take less (a 56x56x144
    depthwise conv: 2 ms) ran at its one-thread speed (the idle table's 0.213 ms against 0.11).
    The simulator's workers spin 0.5 ms. After the pause the second core of this VM takes ~15 ms to
    come up to speed: timed at once, a row of 0.1 ms calls (20 of them: 2 ms) often got no second
    core at all (x2 = 1.0: PP-LCNet's 1x1 at 40x40 read 1.28x onnxruntime's wall time, 0.73x its
    one-thread time)."""
    settle(fn)
    return float(np.min(seconds(fn, repeat, warmup=0)))


ORT_THREADS = 0


def static_call(conv, x, threads=None):
    """``conv`` on ``x`` as the static plan runs it: the native kernel into a preallocated output
    (numpy finishes a transcendental activation, as there) on ``threads`` (default: ``workers()``,
    read per call); ``conv(x)`` without native kernels."""
    conv(x)
    plan = conv._plans.get(x.shape) if native.on() else None
    if plan is None or plan[4] != 1:
        return lambda: conv(x)
    fn, _, desc, shape, _, act, _ = plan
    xa = native.empty(x.shape)
    xa[...] = x
    out = native.empty(shape)
    depthwise = conv.depthwise

    def run():
        nt = threads or workers()
        ok = fn(desc, xa.ctypes.data, out.ctypes.data, nt) if depthwise else \
            fn(desc, xa.ctypes.data, out.ctypes.data, None, nt)
        return conv._native_finish(out, ok, act) if act is not None else out
    return run


def ort_conv(x_nchw, w_oihw, bias, stride, pad, groups, act, threads=None):
    from onnx import helper, numpy_helper

    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[stride] * 2, pads=[pad] * 4,
                              group=groups)]
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    elif act == "clamp":
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    elif act == "silu":
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    elif act == "leaky_relu":
        nodes.append(helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.1))
    elif act == "hard_swish":                     # x * HardSigmoid(x, 1/6, 1/2) (HardSwish is opset 14)
        nodes += [helper.make_node("HardSigmoid", ["c"], ["h"], alpha=1 / 6, beta=0.5),
                  helper.make_node("Mul", ["c", "h"], ["y"])]
    else:
        nodes[0].output[0] = "y"
    inits = [numpy_helper.from_array(w_oihw, "w"), numpy_helper.from_array(bias, "b"),
             numpy_helper.from_array(np.array(0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6, np.float32), "hi")]
    return _ort_session(nodes, inits, x_nchw, threads)


def _ort_session(nodes, inits, x_nchw, threads=None):
    """A run of onnxruntime on the graph ``nodes`` (input ``x``, output ``y``): a callable."""
    import onnxruntime as ort
    from onnx import TensorProto, helper
    g = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_nchw.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = ORT_THREADS if threads is None else threads
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"x": x_nchw})[0]


def thread_cpu_best(fn, repeat: int) -> float:
    """Minimum thread CPU seconds of ``repeat`` calls of ``fn`` after one untimed (a one-thread run)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.thread_time_ns()
        fn()
        best = min(best, time.thread_time_ns() - t0)
    return best / 1e9


def pair_calls(x, wd, bd, wp, bp, stride):
    """(run on all threads, run on one thread, output NHWC, fused?) of the depthwise + 1x1 pair as
    the static plan runs it: its native steps (``run_steps``) on the plan's arena, the input
    already placed there. At batch > 1 the batch plan (the simulator would split the batch into
    images, sim/batch_split.py: the other rows time the batch too)."""
    from onnx_mrvl.sim import Simulator, batch_split
    n, h, w, c = x.shape
    o = wp.shape[0]
    oh, ow = (h + 2 - 3) // stride + 1, (w + 2 - 3) // stride + 1
    shapes = [list(x.shape), [n, oh, ow, c], [n, oh, ow, o]]
    conv = {"dilation": [1, 1], "activation_params": {"min": 0.0, "max": 6.0}}
    meta = {"format": "onnx_mrvl.program", "program_version": 1, "name": "pair", "batch_size": n,
            "quantize": "float16", "arch": {},
            "inputs": [{"name": "x", "tensor": 0, "shape": shapes[0], "layout": "NHWC"}],
            "outputs": [{"name": "y", "tensor": 2, "shape": shapes[2], "layout": "NHWC"}],
            "tensors": [{"id": i, "name": f"t{i}", "shape": sh, "layout": "NHWC"} for i, sh in enumerate(shapes)],
            "weights": [{"name": k, "shape": list(v.shape), "dtype": str(v.dtype)}
                        for k, v in (("wd", wd), ("bd", bd), ("wp", wp), ("bp", bp))],
            "layers": [
                {"index": 0, "name": "dw", "layer_name": "Conv2D", "inputs": [0], "outputs": [1],
                 "weights": {"kernel": "wd", "bias": "bd"},
                 "params": dict(conv, strides=[stride] * 2, padding=[1] * 4, groups=c, kernel_size=[3, 3],
                                channels=c, activation="clamp")},
                {"index": 1, "name": "pw", "layer_name": "Conv2D", "inputs": [1], "outputs": [2],
                 "weights": {"kernel": "wp", "bias": "bp"},
                 "params": dict(conv, strides=[1, 1], padding=[0] * 4, groups=1, kernel_size=[1, 1],
                                channels=o, activation="none")}]}
    saved, batch_split.ENABLED = batch_split.ENABLED, False
    try:
        sim = Simulator.from_program(meta, {"wd": wd, "bd": bd, "wp": wp, "bp": bp})
    finally:
        batch_split.ENABLED = saved
    sim.run([x])
    plan = sim._static
    if plan is None or not native.on():
        return (lambda: sim.run([x])), None, sim.run([x])[0], False
    segs = [sg for sg in plan.segments if sg[0] == "native"]
    fused = any(e.rec is not None and e.rec[0] == 10 for sg in segs for e in sg[1])
    lib = native.lib()

    def run(nt=None):
        for sg in segs:
            lib.run_steps(sg[4], len(sg[1]), sg[5], nt or workers())
    run()
    return run, (lambda: run(1)), plan.views[2].copy(), fused


def ort_pair(x_nchw, wd, bd, wp, bp, stride, threads=None):
    from onnx import helper, numpy_helper
    c = wd.shape[0]
    nodes = [helper.make_node("Conv", ["x", "wd", "bd"], ["d"], strides=[stride] * 2, pads=[1] * 4, group=c),
             helper.make_node("Clip", ["d", "lo", "hi"], ["dc"]),
             helper.make_node("Conv", ["dc", "wp", "bp"], ["y"])]
    inits = [numpy_helper.from_array(np.ascontiguousarray(wd.astype(np.float32).transpose(0, 3, 1, 2)), "wd"),
             numpy_helper.from_array(bd, "bd"),
             numpy_helper.from_array(np.ascontiguousarray(wp.astype(np.float32).transpose(0, 3, 1, 2)), "wp"),
             numpy_helper.from_array(bp, "bp"),
             numpy_helper.from_array(np.array(0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6, np.float32), "hi")]
    return _ort_session(nodes, inits, x_nchw, threads)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--batch", default="1", help="comma-separated batch sizes (e.g. 1,8)")
    ap.add_argument("--rounds", type=int, default=1, help="alternations of simulator and onnxruntime timing")
    ap.add_argument("--blas-threads", type=int, default=0,
                    help="set numpy's OpenBLAS threads (0: leave the default); onnxruntime is unchanged")
    ap.add_argument("--ort-threads", type=int, default=0, help="onnxruntime intra-op threads (0: default)")
    ap.add_argument("--rows", default="", help="comma-separated substrings of the row names ('' all)")
    ap.add_argument("--model-binary", help="also time a whole region binary (Simulator.run) ...")
    ap.add_argument("--onnx", help="... against onnxruntime on this model (same single input)")
    args = ap.parse_args(argv)
    if args.blas_threads:
        print(f"OpenBLAS threads set to {args.blas_threads}: {set_blas_threads(args.blas_threads)}")
    else:
        configure_once()                  # what a Simulator does: OpenBLAS single-threaded
    print(f"OpenBLAS threads: {get_blas_threads()}, simulator row-block workers: {workers()}\n")
    global ORT_THREADS
    ORT_THREADS = args.ort_threads
    rng = np.random.default_rng(0)
    want = [r for r in args.rows.split(",") if r]
    from fma_peak import fma_peak_gflops
    peak = fma_peak_gflops()
    print("| conv | sim ms | ort ms | sim/ort | sim 1t ms | ort 1t ms | 1t sim/ort | x2 | sim 1t % of peak "
          "| max abs diff vs ort |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    ratios, ratios1, tot_sim, tot_ort = [], [], 0.0, 0.0

    def row(label, sim_fn, sim1_fn, ort_fn, ort1_fn, diff, macs):
        nonlocal tot_sim, tot_ort
        t_sim = t_ort = float("inf")
        for _ in range(max(1, args.rounds)):
            t_sim = min(t_sim, settled_best_time(sim_fn, args.repeat))
            t_ort = min(t_ort, settled_best_time(ort_fn, args.repeat))
        c_sim = thread_cpu_best(sim1_fn, args.repeat) if sim1_fn is not None else float("nan")
        c_ort = thread_cpu_best(ort1_fn, args.repeat)
        ratios.append(t_sim / t_ort)
        if c_sim == c_sim:
            ratios1.append(c_sim / c_ort)
        tot_sim += t_sim
        tot_ort += t_ort
        print(f"| {label} | {t_sim * 1e3:.3f} | {t_ort * 1e3:.3f} | {t_sim / t_ort:.2f} | {c_sim * 1e3:.3f} | "
              f"{c_ort * 1e3:.3f} | {c_sim / c_ort:.2f} | {c_sim / t_sim:.1f} | {2 * macs / c_sim / 1e9 / peak:.0%} | "
              f"{diff:.2e} |", flush=True)

    for batch in (int(v) for v in args.batch.split(",")):
        for name, shape, o, k, s, p, g, act in SHAPES:
            if want and not any(r in name for r in want):
                continue
            shape = (batch,) + tuple(shape[1:])
            x = rng.standard_normal(shape).astype(np.float16).astype(np.float32)
            w = (rng.standard_normal((o, k, k, shape[3] // g)) / np.sqrt(k * k * shape[3] / g)).astype(np.float16)
            b = rng.standard_normal(o).astype(np.float32) * 0.1
            conv = Conv2D(w, bias=b, strides=(s, s), padding=(p,) * 4, groups=g, activation=act,
                          activation_params={"alpha": 0.1} if act == "leaky_relu" else
                          {"min": 0.0, "max": 6.0} if act == "clamp" else None)
            ort_args = (np.ascontiguousarray(x.transpose(0, 3, 1, 2)),
                        np.ascontiguousarray(w.astype(np.float32).transpose(0, 3, 1, 2)), b, s, p, g, act)
            ort_fn = ort_conv(*ort_args)
            diff = float(np.abs(conv(x) - ort_fn().transpose(0, 2, 3, 1)).max())
            oh, ow = (shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1
            row(f"{name} {shape}->{o} k{k} s{s} g{g}", static_call(conv, x), static_call(conv, x, 1), ort_fn,
                ort_conv(*ort_args, threads=1), diff, batch * oh * ow * o * k * k * shape[3] // g)
        for name, shape, o, s in PAIRS:
            if want and not any(r in name for r in want):
                continue
            shape = (batch,) + tuple(shape[1:])
            c = shape[3]
            x = rng.standard_normal(shape).astype(np.float16).astype(np.float32)
            wd = (rng.standard_normal((c, 3, 3, 1)) / 3.0).astype(np.float16)
            bd = rng.standard_normal(c).astype(np.float32) * 0.1
            wp = (rng.standard_normal((o, 1, 1, c)) / np.sqrt(c)).astype(np.float16)
            bp = rng.standard_normal(o).astype(np.float32) * 0.1
            sim_fn, sim1_fn, y, fused = pair_calls(x, wd, bd, wp, bp, s)
            x_nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
            ort_fn = ort_pair(x_nchw, wd, bd, wp, bp, s)
            diff = float(np.abs(y - ort_fn().transpose(0, 2, 3, 1)).max())
            label = f"{name if fused else name.replace('(fused)', '(NOT fused)')} {shape}->{o}"
            pix = batch * ((shape[1] - 1) // s + 1) * ((shape[2] - 1) // s + 1)
            row(label, sim_fn, sim1_fn, ort_fn, ort_pair(x_nchw, wd, bd, wp, bp, s, threads=1), diff,
                pix * c * (9 + o))
    print(f"| **total** | {tot_sim * 1e3:.3f} | {tot_ort * 1e3:.3f} | {tot_sim / tot_ort:.2f} | | | | | | |")
    print(f"\ngeometric mean sim/ort: {float(np.exp(np.mean(np.log(ratios)))):.2f} (wall, all threads), "
          f"{float(np.exp(np.mean(np.log(ratios1)))):.2f} (one thread each, thread CPU); "
          f"load average {os.getloadavg()[0]:.1f}")
    print("1t: each side on one thread, thread CPU time (the kernels' own ratio; load hardly moves it); "
          "x2: the simulator's one-thread CPU over its wall time on all threads (~2: both cores computed "
          "in its best block; ~1: its worker did not run alongside, so the wall ratio is the machine's); "
          "fused: a depthwise conv and its 1x1 projection as the static plan runs them (one dw_pw step); "
          f"% of peak: the simulator's one-thread MACs per second against one core's fp32 FMA peak, "
          f"{peak:.1f} GFLOP/s here (benchmarks/fma_peak.py: no kernel that keeps the numerics can pass it)")
    a = rng.standard_normal((3136, 576)).astype(np.float32)
    bm = rng.standard_normal((576, 64)).astype(np.float32)
    t = best_time(lambda: a @ bm, args.repeat)
    a2 = rng.standard_normal((1024, 1024)).astype(np.float32)
    t2 = best_time(lambda: a2 @ a2, max(3, args.repeat // 4))
    print(f"numpy float32 GEMM: 3136x576x64 {2 * 3136 * 576 * 64 / t / 1e9:.1f} GFLOP/s, "
          f"1024^3 {2 * 1024 ** 3 / t2 / 1e9:.1f} GFLOP/s")
    r = (rng.standard_normal(56 * 56 * 256) * 10).astype(np.float32)
    t_round = best_time(lambda: round_fp16_(r), args.repeat)
    t_astype = best_time(lambda: r.astype(np.float16).astype(np.float32), args.repeat)
    print(f"fp16 rounding of {r.size} values: round_fp16_ {t_round * 1e3:.3f} ms, "
          f"astype(float16).astype(float32) {t_astype * 1e3:.3f} ms")
    if args.model_binary and args.onnx:
        whole_model(args.model_binary, args.onnx, max(3, args.repeat // 3))
    return 0


def whole_model(binary: str, onnx_path: str, repeat: int) -> None:
    import onnxruntime as ort

    from onnx_mrvl.sim import Simulator

    sim = Simulator(binary)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal(sim.input_shapes[0]).astype(np.float32)
    name = sess.get_inputs()[0].name
    t_sim = best_time(lambda: sim.run([x]), repeat)
    t_ort = best_time(lambda: sess.run(None, {name: x}), repeat)
    print(f"\nwhole region {os.path.basename(binary)} ({len(sim.perf.layers)} layers, {sim.perf.macs / 1e9:.2f} GMAC): "
          f"simulator {t_sim * 1e3:.1f} ms, onnxruntime (whole model) {t_ort * 1e3:.1f} ms, "
          f"ratio {t_sim / t_ort:.2f}")


if __name__ == "__main__":
    sys.exit(main())
