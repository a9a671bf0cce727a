"""The simulator's fixed cost per layer and how much of a run both cores compute.

    python benchmarks/bench_sim_overhead.py [--layers 200] [--repeat 200] [--models mb05,mb1] [--batch 1,8]

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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--models", default="mb05,mb1")
    ap.add_argument("--batch", default="1")
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}")
    fixed_cost(args.layers, args.repeat)
    for b in (int(v) for v in args.batch.split(",") if v):
        for key in (k for k in args.models.split(",") if k):
            busy(key, b, args.repeat if b == 1 else max(5, args.repeat // 10))


if __name__ == "__main__":
    main()
