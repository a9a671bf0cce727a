"""Simulator conv kernels vs onnxruntime's Conv on the same shapes, as a markdown table.

    .venv/bin/python benchmarks/bench_sim_kernels.py [--repeat N] [--batch 1,8] [--rounds R]

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
from onnx_mrvl.testing.timing import seconds  # noqa: E402

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


SETTLE_S = 0.1


def settled_best_time(fn, repeat: int) -> float:
    """``best_time`` after a pause in which the other side's spinning threads go to sleep.

    onnxruntime's intra-op worker spins ~40 ms of CPU after a session is created and after each
    ``run`` (measured from its thread's schedstat); timed right after that, the simulator's two
    threads share the two cores with it, and a row whose 20 calls take less (a 56x56x144
    depthwise conv: 2 ms) ran at its one-thread speed (the idle table's 0.213 ms against 0.11).
    The simulator's workers spin 0.5 ms."""
    time.sleep(SETTLE_S)
    return best_time(fn, repeat)


ORT_THREADS = 0


def static_call(conv, x):
    """``conv`` on ``x`` as the static plan runs it: the native kernel into a preallocated output
    (numpy finishes a transcendental activation, as there); ``conv(x)`` without native kernels."""
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
        ok = fn(desc, xa.ctypes.data, out.ctypes.data, workers()) if depthwise else \
            fn(desc, xa.ctypes.data, out.ctypes.data, None, workers())
        return conv._native_finish(out, ok, act) if act is not None else out
    return run


def ort_conv(x_nchw, w_oihw, bias, stride, pad, groups, act):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[stride] * 2, pads=[pad] * 4,
                              group=groups)]
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    elif act == "clamp":
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    else:
        nodes[0].output[0] = "y"
    inits = [numpy_helper.from_array(w_oihw, "w"), numpy_helper.from_array(bias, "b"),
             numpy_helper.from_array(np.array(0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6, np.float32), "hi")]
    g = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_nchw.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = ORT_THREADS
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"x": x_nchw})[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--batch", default="1", help="comma-separated batch sizes (e.g. 1,8)")
    ap.add_argument("--rounds", type=int, default=1, help="alternations of simulator and onnxruntime timing")
    ap.add_argument("--blas-threads", type=int, default=0,
                    help="set numpy's OpenBLAS threads (0: leave the default); onnxruntime is unchanged")
    ap.add_argument("--ort-threads", type=int, default=0, help="onnxruntime intra-op threads (0: default)")
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
    print("| conv | sim ms | ort ms | sim/ort | max abs diff vs ort |")
    print("| --- | ---: | ---: | ---: | ---: |")
    ratios, tot_sim, tot_ort = [], 0.0, 0.0
    for batch, (name, shape, o, k, s, p, g, act) in [(b, c) for b in (int(v) for v in args.batch.split(",")) for c in SHAPES]:
        shape = (batch,) + tuple(shape[1:])
        x = rng.standard_normal(shape).astype(np.float16).astype(np.float32)
        w = (rng.standard_normal((o, k, k, shape[3] // g)) / np.sqrt(k * k * shape[3] / g)).astype(np.float16)
        b = rng.standard_normal(o).astype(np.float32) * 0.1
        conv = Conv2D(w, bias=b, strides=(s, s), padding=(p,) * 4, groups=g, activation=act,
                      activation_params={"min": 0.0, "max": 6.0})
        ort_fn = ort_conv(np.ascontiguousarray(x.transpose(0, 3, 1, 2)),
                          np.ascontiguousarray(w.astype(np.float32).transpose(0, 3, 1, 2)), b, s, p, g, act)
        sim_fn = static_call(conv, x)
        t_sim = t_ort = float("inf")
        for _ in range(max(1, args.rounds)):
            t_sim = min(t_sim, settled_best_time(sim_fn, args.repeat))
            t_ort = min(t_ort, settled_best_time(ort_fn, args.repeat))
        diff = float(np.abs(conv(x) - ort_fn().transpose(0, 2, 3, 1)).max())
        ratios.append(t_sim / t_ort)
        tot_sim += t_sim
        tot_ort += t_ort
        print(f"| {name} {shape}->{o} k{k} s{s} g{g} | {t_sim * 1e3:.3f} | {t_ort * 1e3:.3f} | "
              f"{t_sim / t_ort:.2f} | {diff:.2e} |")
    print(f"| **total** | {tot_sim * 1e3:.3f} | {tot_ort * 1e3:.3f} | {tot_sim / tot_ort:.2f} | |")
    print(f"\ngeometric mean sim/ort: {float(np.exp(np.mean(np.log(ratios)))):.2f}")
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
