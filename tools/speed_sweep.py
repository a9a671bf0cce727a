"""Speed of converted real models against onnxruntime, one thread, as a markdown table.

    python tools/speed_sweep.py MANIFEST [--rounds 6] [--timeout 300]

MANIFEST: lines ``name|model.onnx|feeds.npz[|anything]`` (the feeds' arrays in the order of the
model's graph inputs; the survey tools write such files beside their exports). Each model runs in a
process of its own: converted with the feeds' shapes, saved, then ``onnx_mrvl.InferenceSession``
and onnxruntime (``intra_op_num_threads=1``) alternately on the same feeds, thread CPU time, the
minimum of ``--rounds`` each (a shared machine's load does not inflate one thread's CPU time).
The columns: both minima, their ratio, regions, and the three layer kinds that spent the most in
the static plan's Python (numpy) steps, the place to look first (docs/simulator.md, "Speed of the
simulator itself"). A model that fails to convert or run prints its error in the row.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile


def one(name: str, model: str, feeds: str, rounds: int, workdir: str = "") -> str:
    """The row of one model; its converted copy goes to ``workdir`` (else a temporary folder, removed)."""
    if not workdir:
        with tempfile.TemporaryDirectory(prefix="speed-sweep-") as d:
            return one(name, model, feeds, rounds, d)
    os.environ["ONNX_MRVL_SIM_THREADS"] = "1"
    import collections
    import logging
    import time

    import numpy as np
    import onnx
    import onnxruntime as ort

    import onnx_mrvl
    from onnx_mrvl.sim import static_plan
    logging.disable(logging.WARNING)
    m = onnx.load(model, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    names = [i.name for i in m.graph.input if i.name not in inits]
    feed = dict(zip(names, np.load(feeds).values()))
    r = onnx_mrvl.convert(model, input_shapes={k: list(v.shape) for k, v in feed.items()})
    r.save(workdir + "/o")
    ours = onnx_mrvl.InferenceSession(workdir + "/o/model.onnx")
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    ref = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    for _ in range(2):
        ours.run(None, feed)
        ref.run(None, feed)
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for i, sess in enumerate((ours, ref)):
            t = time.thread_time_ns()
            sess.run(None, feed)
            best[i] = min(best[i], time.thread_time_ns() - t)
    spent = collections.defaultdict(int)
    step = static_plan._python_step

    def timed(sim, e):
        t = time.thread_time_ns()
        try:
            return step(sim, e)
        finally:
            spent[e.step.spec.layer_name] += time.thread_time_ns() - t
    static_plan._python_step = timed
    try:
        ours.run(None, feed)
    finally:
        static_plan._python_step = step
    top = ", ".join(f"{k} {v / 1e6:.2f}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1])[:3])
    a, b = best[0] / 1e6, best[1] / 1e6
    return f"| {name} | {a:.3g} | {b:.3g} | {a / b:.2f} | {len(r.subgraphs)} | {top or '-'} |"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest", nargs="?", help="lines name|model.onnx|feeds.npz")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per model")
    ap.add_argument("--one", nargs=3, metavar=("NAME", "MODEL", "FEEDS"), help=argparse.SUPPRESS)
    ap.add_argument("--workdir", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(one(*args.one, args.rounds, args.workdir))
        return 0
    if not args.manifest:
        ap.error("the manifest is required")
    print("| model | onnx_mrvl ms | onnxruntime ms | ratio | regions | Python steps, ms |")
    print("|---|---:|---:|---:|---:|---|")
    failed = 0
    with open(args.manifest) as f:
        for line in f:
            parts = line.strip().split("|")
            if len(parts) < 3 or line.startswith("#"):
                continue
            # the converted model's folder belongs to this process: removed even when the child
            # is killed at its timeout (each was ~40 MB, and every sweep left them in /tmp)
            with tempfile.TemporaryDirectory(prefix="speed-sweep-") as work:
                cmd = [sys.executable, os.path.abspath(__file__), "--one", *parts[:3], "--rounds", str(args.rounds),
                       "--workdir", work]
                try:
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                    row = p.stdout.strip().splitlines()[-1] if p.returncode == 0 and p.stdout.strip() else None
                    err = (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
                except subprocess.TimeoutExpired:
                    row, err = None, f"timed out after {args.timeout} s"
            if row is None:
                failed += 1
                row = f"| {parts[0]} | - | - | - | - | {err[:160]} |"
            print(row, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
