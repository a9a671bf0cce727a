"""Shim benchmark: bridge overhead per Subgraph call and end-to-end shim / onnxruntime time.

    python benchmarks/bench_shim.py [--repeat N] [--rounds R] [--batch 1,8] [--models r50,mb1,...]

Medians of ``--repeat`` runs. Bridge overhead = (wall time of session.run) - (time inside the
simulator), per call, for models converted into one region; the figures are ratios measured in
the same run. The shim and plain onnxruntime (CPU provider, default options) are timed in
alternating phases (``--rounds`` of them), each phase ``--repeat`` back-to-back runs of one runtime
after untimed warm-up runs (at least five, for at least 50 ms: timing.py), for both alike. What
is compared is each runtime's steady-state latency at each ``--batch`` (default 1 and 8: the same
model with its batch dimension set, converted again; the table's per-image columns divide by the
batch). Two ways of alternating proved unfair:
* short blocks: after a run, onnxruntime's intra-op threads keep spinning, and the simulator's
  native workers too; a run of the other started in that window loses a core to them (measured:
  MobileNetV2-style 2.4x with 2 warm-up runs, against 1.3x with 5);
* idle gaps between blocks (50-300 ms): they measure waking from idle -- sleeping threads, the
  host's clock ramp -- and made blocks of the same model vary 2.3-6.3 ms.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import onnx_mrvl  # noqa: E402
from onnx_mrvl.testing import timing  # noqa: E402
from onnx_mrvl.testing import models  # noqa: E402
from onnx_mrvl.testing.randomize_weights import load_zoo  # noqa: E402


_WARMUP = 5       # untimed runs that start each phase (see the module docstring)


CASES = {
    "r50": ("ResNet-50 (zoo)", lambda: load_zoo("resnet50", seed=0)),
    "r18": ("ResNet-18-style", lambda: models.resnet18_like(seed=0)),
    "mb1": ("MobileNetV2-style (width 1.0)", lambda: models.mobilenetv2_like(seed=0, width=1.0)),
    "mb05": ("MobileNetV2-style (width 0.5)", lambda: models.mobilenetv2_like(seed=0)),
}


def with_batch(model, batch: int):
    """``model`` with the first dimension of its inputs and outputs set to ``batch`` (value_info
    dropped: onnxruntime and the converter infer it again), and a Reshape to a constant shape
    that starts with the batch-1 dimension (the zoo ResNet-50's ``[1, 2048]``) reshaping to
    ``[batch, ...]``."""
    if batch == 1:
        return model
    from onnx import numpy_helper
    m = type(model).FromString(model.SerializeToString())
    weights = {t.name: t for t in m.graph.initializer}    # old exports list weights as inputs too
    for v in list(m.graph.input) + list(m.graph.output):
        if v.name not in weights:
            v.type.tensor_type.shape.dim[0].dim_value = batch
    for node in m.graph.node:
        t = weights.get(node.input[1]) if node.op_type == "Reshape" and len(node.input) > 1 else None
        if t is not None:
            shape = numpy_helper.to_array(t).copy()
            if shape.ndim == 1 and shape.size and shape[0] == 1:
                shape[0] = batch
                t.CopyFrom(numpy_helper.from_array(shape, t.name))
    del m.graph.value_info[:]
    return m


def _cases():
    """(name, model) of every case at batch 1 (what benchmarks/run_all.py reads)."""
    for name, build in CASES.values():
        yield name, build()


def batch_cases(keys, batches):
    """(name, model, batch) of the ``keys`` cases at each batch size."""
    for b in batches:
        for k in keys:
            name, build = CASES[k]
            yield f"{name}, batch {b}", with_batch(build(), b), b


def _round(sess, ref, feed, repeat):
    """One measurement: alternating blocks, each starting with untimed warm-up runs; medians."""
    t = timing.alternate(sess, ref, feed, repeat, warmup=_WARMUP)
    return tuple(float(np.median(t[k])) for k in ("shim", "sim", "ort", "ort_cpu"))


def measure(name, model, repeat, rounds=1, batch=1):
    """Convert once, then ``rounds`` measurements; ratios are medians over the rounds, with their range."""
    with tempfile.TemporaryDirectory() as d:
        onnx_mrvl.convert(model).save(d)
        sess = onnx_mrvl.InferenceSession(os.path.join(d, "model.onnx"))
        ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        inp = sess.get_inputs()[0]
        x = np.random.default_rng(0).standard_normal(inp.shape).astype(np.float32)
        feed = {inp.name: x}
        sess.run(None, feed)
        ref.run(None, feed)
        res = [_round(sess, ref, feed, repeat) for _ in range(max(1, rounds))]
        shim, sim_s, orts, ort_cpu = (float(np.median([r[k] for r in res])) for k in range(4))
        ratios = [r[0] / r[2] for r in res]
        overhead = max(0.0, shim - sim_s)
        return {"model": name, "batch": batch, "regions": len(sess.mrvl_stats()), "shim_ms": shim * 1e3, "ort_ms": orts * 1e3,
                "sim_ms": sim_s * 1e3, "bridge_ms": overhead * 1e3,
                "bridge_pct": 100 * overhead / sim_s if sim_s else 0.0, "shim_over_ort": float(np.median(ratios)),
                "shim_over_ort_range": (min(ratios), max(ratios)),
                "ort_cpu_ms": ort_cpu * 1e3, "shim_over_ort_cpu": shim / ort_cpu if ort_cpu else float("nan")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10, help="runs of each per round (medians)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measurements per model; the ratio is their median, printed with its range")
    ap.add_argument("--batch", default="1,8", help="comma-separated batch sizes (default 1,8)")
    ap.add_argument("--models", default=",".join(CASES), help="comma-separated subset of " + ", ".join(CASES))
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.batch.split(",") if b]
    rows = [measure(n, m, args.repeat, args.rounds, b) for n, m, b in batch_cases(args.models.split(","), batches)]
    print("| model | regions | shim ms | simulator ms | bridge ms | bridge % of sim | onnxruntime ms "
          "| onnxruntime CPU ms | shim / ort | range over rounds | shim / ort CPU | shim ms / image | ort ms / image |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["shim_over_ort_range"]
        print(f"| {r['model']} | {r['regions']} | {r['shim_ms']:.1f} | {r['sim_ms']:.1f} | {r['bridge_ms']:.2f} | "
              f"{r['bridge_pct']:.1f}% | {r['ort_ms']:.1f} | {r['ort_cpu_ms']:.1f} | {r['shim_over_ort']:.2f}x | "
              f"{lo:.2f}-{hi:.2f}x | {r['shim_over_ort_cpu']:.2f}x | {r['shim_ms'] / r['batch']:.2f} | "
              f"{r['ort_ms'] / r['batch']:.2f} |")
    print("\nshim / ort: wall time over onnxruntime's wall time (CPU provider, default threads), the median "
          "over the rounds; shim / ort CPU: over the process CPU time onnxruntime used (all its threads).")
    return rows


if __name__ == "__main__":
    main()
