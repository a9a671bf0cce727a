"""Where a shim run's time goes outside the simulator: one converted model, phase by phase.

    python benchmarks/bench_shim_phases.py [--models mb05,mb1] [--batch 1] [--runs 300] [--stub]

Per run of ``onnx_mrvl.InferenceSession.run`` (wall time; ``--cpu``: the main thread's CPU time,
``time.thread_time``, which the other jobs of a shared machine disturb less but which costs ~2 us
a reading here, a system call), the phases between marks set by wrappers around
onnxruntime-extensions' invocation hook and the region kernel:

* ``ort -> hook``: onnxruntime's run up to the Python op (its feed, the extension copying the
  input into a fresh numpy array, the GIL);
* ``hook -> kernel``: the extension's hook up to the kernel body (attribute dict, its cast);
* ``kernel - sim``: the kernel body outside ``Simulator.run`` (lookup, stats, output wrapping);
* ``sim``: ``Simulator.run`` itself (its own Python included);
* ``kernel -> hook end``, ``hook end -> run end``: the way back (the output copied into
  onnxruntime's tensor, the guard Reshape, the result as numpy).

``--stub`` replaces the native steps by a no-op (``run_steps`` returns at once): what remains is
the bridge and the simulator's Python with warm caches. Minimum and median of the fastest fifth.
The wrappers add ~1 us (wall) to the hook phases.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import onnx_mrvl  # noqa: E402
from bench_shim import CASES, with_batch  # noqa: E402

_clock = time.perf_counter
PHASES = ("ort -> hook", "hook -> kernel", "kernel - sim", "sim", "kernel -> hook end", "hook end -> run end", "total")


def _instrument(sess, marks, stub):
    from onnxruntime_extensions import _ocos
    from onnx_mrvl.sim import Simulator
    hook = _ocos._on_pyop_invocation

    def timed_hook(*a):
        marks["hook"] = _clock()
        r = hook(*a)
        marks["hook_end"] = _clock()
        return r
    _ocos.PyCustomOpDef.install_hooker(timed_hook)
    for od in _ocos.Opdef._odlist.values():
        if "SubgraphRun_" in od.op_type:
            def body(*a, _b=od.body, **k):
                marks["kernel"] = _clock()
                r = _b(*a, **k)
                marks["kernel_end"] = _clock()
                return r
            od.body = body
    run = Simulator.run

    def sim_run(self, *a, **k):
        c0 = _clock()
        r = run(self, *a, **k)
        marks["sim"] = _clock() - c0
        return r
    Simulator.run = sim_run
    if stub:
        for p in sess._mrvl_programs:
            plans = [p.simulator._static] + (p.simulator._split.plans if p.simulator._split else [])
            for plan in plans:
                if plan is not None:
                    plan.lib = type("NoSteps", (), {"run_steps": staticmethod(lambda *a: 0),
                                                    "copy_round": plan.lib.copy_round})()
    return lambda: _ocos.PyCustomOpDef.install_hooker(hook)


def measure(model, runs: int, stub: bool) -> dict:
    with tempfile.TemporaryDirectory() as d:
        onnx_mrvl.convert(model).save(d)
        sess = onnx_mrvl.InferenceSession(os.path.join(d, "model.onnx"))
        inp = sess.get_inputs()[0]
        feed = {inp.name: np.random.default_rng(0).standard_normal(inp.shape).astype(np.float32)}
        marks: dict = {}
        sess.run(None, feed)                   # a real run first: a stubbed run leaves its flags as they were
        undo = _instrument(sess, marks, stub)
        try:
            for _ in range(10):
                sess.run(None, feed)
            rows = []
            for _ in range(runs):
                c0 = _clock()
                sess.run(None, feed)
                c1 = _clock()
                m = marks
                rows.append((m["hook"] - c0, m["kernel"] - m["hook"], m["kernel_end"] - m["kernel"] - m["sim"],
                             m["sim"], m["hook_end"] - m["kernel_end"], c1 - m["hook_end"], c1 - c0))
        finally:
            undo()
    r = np.array(rows) * 1e6
    fast = r[np.argsort(r[:, -1])[: max(1, runs // 5)]]
    return {p: (float(r[:, k].min()), float(np.median(fast[:, k]))) for k, p in enumerate(PHASES)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mb05,mb1", help="comma-separated subset of " + ", ".join(CASES))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--stub", action="store_true", help="native steps replaced by a no-op")
    ap.add_argument("--cpu", action="store_true", help="the main thread's CPU time instead of wall time")
    args = ap.parse_args(argv)
    global _clock
    _clock = time.thread_time if args.cpu else time.perf_counter
    for key in args.models.split(","):
        name, build = CASES[key]
        res = measure(with_batch(build(), args.batch), args.runs, args.stub)
        print(f"\n{name}, batch {args.batch}{' (native steps stubbed)' if args.stub else ''}: "
              f"{'thread CPU' if args.cpu else 'wall'} us, min / median of the fastest fifth")
        for p, (lo, med) in res.items():
            print(f"  {p:20s} {lo:9.1f} {med:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
