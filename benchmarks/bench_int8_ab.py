"""Two builds of the int8 kernels (``_native_int8.c``) compared in one process, step by step.

    .venv/bin/python benchmarks/bench_int8_ab.py OLD.c [--models resnet50 mobilenetv2] [--act u8 s8]
                                                      [--repeat 10] [--cache DIR]

``OLD.c`` is another version of the source (``git show main:onnx_mrvl/sim/_native_int8.c >
/tmp/old/_native_int8.c``, beside copies of main's headers); the new one is this checkout's. The
QDQ model is ``bench_int8.py``'s (``--cache`` keeps it). Each int8 step of the converted model's
static plan is called through ``i8_run_calls`` of either library alternately, one thread, timed in
thread CPU time (other processes do not inflate it), the minimum of ``--repeat`` kept: the sum of
the steps and the layer shapes that moved. The records are the same for both (the descriptor
layout is not part of a kernel change); only their kernel addresses are mapped to the old build's.
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import os
import re
import sys
import tempfile
import time

os.environ["ONNX_MRVL_SIM_THREADS"] = "1"

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import onnx_mrvl  # noqa: E402
from onnx_mrvl.sim import Simulator, native  # noqa: E402
from bench_int8 import _prepare  # noqa: E402


def _old_library(source: str):
    so = native.load_on_pool(source, "i8_set_runner")
    so.i8_run_calls.restype = ctypes.c_long
    so.i8_run_calls.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_int]
    return so


def compare(qpath: str, old_source: str, repeat: int) -> None:
    sim = Simulator(onnx_mrvl.convert(qpath).subgraphs[0].binary)
    x = np.random.default_rng(0).standard_normal(sim.input_shapes[0]).astype(np.float32)
    sim.run([x])
    plan = sim._static
    new, old = plan.int8_lib, _old_library(old_source)
    names = re.findall(r"^(?:int|void|long) (i8_\w+)\(", open(old_source).read(), re.M)

    def addr(lib, n):
        return ctypes.cast(getattr(lib, n), ctypes.c_void_p).value
    to_old = {addr(new, n): addr(old, n) for n in names if hasattr(new, n)}
    rows, total = collections.defaultdict(lambda: [0.0, 0.0, 0]), [0, 0]
    for seg in plan.segments:
        if seg[0] != "bound":
            continue
        recs = seg[2]
        old_recs = recs.copy()        # kernels of other libraries (float path, tables): the same call
        old_recs[:, 1] = [to_old.get(int(f), int(f)) for f in recs[:, 1]]
        for k, e in enumerate(seg[1]):
            best = [1 << 62, 1 << 62]
            for _ in range(repeat):
                for i, (lib, rr) in enumerate(((new, recs), (old, old_recs))):
                    at = rr.ctypes.data + k * rr.strides[0]
                    t = time.thread_time_ns()
                    lib.i8_run_calls(at, 1, 1)
                    best[i] = min(best[i], time.thread_time_ns() - t)
            sp = e.step.spec
            what = (f"{sp.layer_name} {sp.params.get('kernel_size', '')} "
                    f"{plan.shapes.get(e.step.ins[0]) if e.step.ins else ''} -> {plan.shapes.get(e.step.out)}")
            row = rows[what]
            row[0], row[1], row[2] = row[0] + best[0] / 1e3, row[1] + best[1] / 1e3, row[2] + 1
            total[0], total[1] = total[0] + best[0], total[1] + best[1]
    print(f"\n{os.path.basename(qpath)}: steps old {total[1] / 1e6:.2f} -> new {total[0] / 1e6:.2f} ms "
          f"({total[0] / total[1]:.3f})")
    print("| layer (count) | old us | new us | new / old |\n| --- | ---: | ---: | ---: |")
    for what, (a, b, n) in sorted(rows.items(), key=lambda t: t[1][0] - t[1][1]):
        if abs(a - b) > 0.02 * b:
            print(f"| {what} (x{n}) | {b:.1f} | {a:.1f} | {a / b:.2f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old_source", help="the other _native_int8.c (its headers beside it)")
    ap.add_argument("--models", nargs="+", default=["resnet50"], choices=["resnet50", "mobilenetv2"])
    ap.add_argument("--act", nargs="+", default=["u8"], choices=["u8", "s8"])
    ap.add_argument("--repeat", type=int, default=10, help="calls of each step per build (minimum kept)")
    ap.add_argument("--cache", default=None, help="directory keeping the quantized models between runs")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache or tmp
        os.makedirs(cache, exist_ok=True)
        for name in args.models:
            for act in args.act:
                compare(_prepare(name, 1, act, cache)[1], args.old_source, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
