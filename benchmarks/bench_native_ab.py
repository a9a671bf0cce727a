"""Two builds of the native kernels (``_native_conv.c``) compared in one process, call by call.

    .venv/bin/python benchmarks/bench_native_ab.py OLD.c [--rows SUBSTR,...] [--models r50,mb1]
                                                        [--threads 1] [--batch 1] [--repeat 40]

``OLD.c`` is another version of the source (``git show main:onnx_mrvl/sim/_native_conv.c >
/tmp/old.c``); the new one is this checkout's. Both are built (cached like the simulator's own)
and loaded side by side; the descriptors and static-plan records are the same for both (their
layout is not part of a kernel change), so each kernel or step is called on the same inputs by
one build, then the other, alternately, and the minimum of each is kept. On a shared machine
this is what separates a kernel change from the load: a one-thread call is timed in thread CPU
time, which other processes do not inflate. On several threads each build's pool is left to fall
asleep before the other's timed call (``handover``): two pools polling at once shared the cores.

* ``--rows``: ``bench_sim_kernels.py``'s shapes whose name contains one of the substrings (all by
  default): old and new ms, new / old, and whether the outputs are the same bits.
* ``--models``: bench_shim's models (``r50``, ``r18``, ``mb1``, ``mb05``): each native step of the
  converted model's static plan, timed by ``run_steps_profiled``; the sum of the steps' minima
  and the steps that moved most. At a batch that the simulator splits into whole images per core
  (sim/batch_split.py), what runs is one image's batch-1 plan: its steps are timed.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from onnx_mrvl.sim import native  # noqa: E402
from onnx_mrvl.sim.blas import configure_once  # noqa: E402


def load(source: str) -> ctypes.CDLL:
    so = ctypes.CDLL(native.build_shared(native.compiler(), source))
    so.conv_desc.restype = so.depthwise_desc.restype = ctypes.c_int
    so.conv_desc.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int]
    so.depthwise_desc.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int]
    so.run_steps_profiled.restype = None
    so.run_steps_profiled.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    return so


SPIN_S = 0.002   # over the pool's SPIN_NS (0.5 ms) and its yields: a worker has gone to sleep


def handover(call, i, threads):
    """Before build ``i``'s timed call on several threads: each build has its own worker pool, whose
    workers poll for 0.5 ms after a call; timed right after the other build's call, the two pools'
    threads shared the two cores (the same source timed 0.271 against 0.139 ms, 1x1 144 -> 24 @56).
    So wait until the other's workers sleep, then wake this build's with an untimed call."""
    if threads > 1:
        time.sleep(SPIN_S)
        call(i)


# ResNet-50's other bottleneck expansions (its last 1x1 conv, 64 -> 256 is bench_sim_kernels' row;
# with ``--residual`` its fused residual add)
EXPANSIONS = [
    ("resnet50 1x1 128->512 @28", (1, 28, 28, 128), 512, 1, 1, 0, 1, "none"),
    ("resnet50 1x1 256->1024 @14", (1, 14, 14, 256), 1024, 1, 1, 0, 1, "none"),
    ("resnet50 1x1 512->2048 @7", (1, 7, 7, 512), 2048, 1, 1, 0, 1, "none"),
]


def kernel_rows(libs, rows, threads, batch, repeat, residual=False):
    import bench_sim_kernels as B
    from onnx_mrvl.sim.kernels import Conv2D
    clock = time.thread_time_ns if threads == 1 else time.perf_counter_ns
    rng = np.random.default_rng(0)
    for name, shape, o, k, s, p, g, act in B.SHAPES + EXPANSIONS:
        if rows and not any(r in name for r in rows):
            continue
        if residual and (g != 1 or k != 1):
            continue
        shape = (batch,) + tuple(shape[1:])
        x = rng.standard_normal(shape).astype(np.float16).astype(np.float32)
        w = (rng.standard_normal((o, k, k, shape[3] // g)) / np.sqrt(k * k * shape[3] / g)).astype(np.float16)
        conv = Conv2D(w, bias=rng.standard_normal(o).astype(np.float32) * 0.1, strides=(s, s), padding=(p,) * 4,
                      groups=g, activation=act, activation_params={"min": 0.0, "max": 6.0})
        conv(x)
        _, _, daddr, oshape, _, _, _ = conv._plans[x.shape]
        xa = native.empty(x.shape)
        xa[...] = x
        outs = [native.empty(oshape) for _ in libs]
        res = None
        if residual:      # a fused Sum2D with relu (ResNet's add): descriptor words 23-26 (sim/native.py)
            desc = np.ctypeslib.as_array((ctypes.c_int64 * 29).from_address(daddr)).copy()
            desc[23] = 1
            daddr = desc.ctypes.data
            res = native.empty(oshape)
            res[...] = rng.standard_normal(oshape).astype(np.float16).astype(np.float32)
            name += " + residual"

        def call(i):
            if conv.depthwise:
                return libs[i].depthwise_desc(daddr, xa.ctypes.data, outs[i].ctypes.data, threads)
            return libs[i].conv_desc(daddr, xa.ctypes.data, outs[i].ctypes.data,
                                     None if res is None else res.ctypes.data, threads)
        best = [float("inf")] * len(libs)
        for i in range(len(libs)):
            call(i)
        for _ in range(repeat):
            for i in range(len(libs)):
                handover(call, i, threads)
                t0 = clock()
                call(i)
                best[i] = min(best[i], clock() - t0)
        same = np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
        print(f"| {name} b{batch} | {best[0] / 1e6:.3f} | {best[1] / 1e6:.3f} | {best[1] / best[0]:.3f} | "
              f"{'same' if same else '**differ**'} |", flush=True)


def model_steps(libs, key, threads, batch, repeat):
    import onnx_mrvl
    from onnx_mrvl.sim import Simulator
    from bench_shim import CASES, with_batch
    sim = Simulator(onnx_mrvl.convert(with_batch(CASES[key][1](), batch)).subgraphs[0].binary)
    x = np.random.default_rng(0).standard_normal(sim.input_shapes[0]).astype(np.float32)
    sim.run([x])
    split = getattr(sim, "_split", None)
    plan = split._plan(0) if split is not None else sim._static
    if plan is None:
        print(f"{CASES[key][0]}: no static plan")
        return
    if split is not None:
        # the batch plan never runs (its input records hold no address: calling them crashed);
        # what runs is one image at a time on a batch-1 plan, on one thread per image
        x = np.ascontiguousarray(x[:1])
        print(f"\n{CASES[key][0]}, batch {batch}: run as whole images per core (sim/batch_split.py); "
              f"timing one image's batch-1 plan (the split runs each on one thread)")
    plan.run(sim, [x], threads)        # the input records point at x, alive until the end
    segs = [s for s in plan.segments if s[0] == "native"]
    best = [[np.full((len(s[1]), 2), 1 << 62, np.int64) for s in segs] for _ in libs]
    prof = [np.zeros((len(s[1]), 2), np.int64) for s in segs]
    for _ in range(repeat):
        for i, so in enumerate(libs):
            handover(lambda k: so.run_steps_profiled(segs[0][4], len(segs[0][1]), segs[0][5], threads,
                                                     prof[0].ctypes.data), i, threads)
            for s, p, b in zip(segs, prof, best[i]):
                so.run_steps_profiled(s[4], len(s[1]), s[5], threads, p.ctypes.data)
                better = p[:, 0] < b[:, 0]
                b[better] = p[better]
    moved = []
    for si, s in enumerate(segs):
        for j, entry in enumerate(s[1]):
            a, b = best[0][si][j, 0] / 1e3, best[1][si][j, 0] / 1e3
            st = entry.step
            moved.append((b - a, a, b, f"{getattr(st.spec, 'name', '')} {plan.shapes.get(st.ins[0]) if st.ins else ''}"
                                       f" -> {plan.shapes.get(st.out)}"))
    old, new = sum(m[1] for m in moved) / 1e3, sum(m[2] for m in moved) / 1e3
    print(f"\n{CASES[key][0]}, batch {batch}, {threads} thread(s): steps {old:.2f} -> {new:.2f} ms ({new / old:.3f})")
    moved.sort()
    for d, a, b, what in moved[:5] + [m for m in moved[-3:] if m[0] > 0]:
        print(f"    {d:+8.1f} us  {a:8.1f} -> {b:8.1f}  {what}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", help="the other version of _native_conv.c")
    ap.add_argument("--rows", default="", help="comma-separated substrings of bench_sim_kernels row names ('' all)")
    ap.add_argument("--models", default="", help="comma-separated bench_shim keys (r50, r18, mb1, mb05)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--residual", action="store_true",
                    help="the 1x1 rows with a fused residual add (relu), as ResNet's expansions run")
    args = ap.parse_args(argv)
    configure_once()
    if not native.on():
        print(f"native kernels off: {native.why_disabled()}")
        return 1
    libs = [load(os.path.abspath(args.old)), load(native._SRC)]
    print(f"old {args.old}, new {native._SRC}; {args.threads} thread(s), "
          f"{'thread CPU' if args.threads == 1 else 'wall'} time, minimum of {args.repeat}\n")
    print("| kernel | old ms | new ms | new / old | outputs |")
    print("| --- | ---: | ---: | ---: | --- |")
    kernel_rows(libs, [r for r in args.rows.split(",") if r], args.threads, args.batch, args.repeat, args.residual)
    for key in (k for k in args.models.split(",") if k):
        model_steps(libs, key, args.threads, args.batch, max(5, args.repeat // 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
