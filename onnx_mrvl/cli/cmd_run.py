"""``onnx-mrvl run``: run a converted model (regions on the simulator) and compare it with the original."""
from __future__ import annotations

import json
import time

import numpy as np

from ..inspect.compare import DEFAULT_ATOL
from .common import error_stats, load_inputs, random_inputs


def register(sub) -> None:
    p = sub.add_parser("run", help="run a converted model through onnxruntime + the simulator",
                       description="Runs MODEL (a converted model.onnx) with onnx_mrvl.InferenceSession; prints "
                                   "each output, per-region wall time and simulated cycles, and with --compare "
                                   "the error against plain onnxruntime on the original model.")
    p.add_argument("model", help="converted model.onnx")
    p.add_argument("--inputs", help=".npz (by input name) or .npy; random seeded inputs when absent")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--compare", metavar="ORIGINAL.onnx", help="compare against plain onnxruntime on this model")
    p.add_argument("--repeat", type=int, default=1, help="run N times (timing)")
    p.add_argument("--tolerance", type=float, default=1e-2,
                   help="pass when max abs error <= ATOL + TOL x max|reference| (default 1e-2, fp16-aware)")
    p.add_argument("--atol", type=float, default=DEFAULT_ATOL,
                   help=f"absolute part of the tolerance, for outputs that are (nearly) zero; values far below "
                        f"fp16's range flush to 0 on the accelerator (default {DEFAULT_ATOL:g}, as `compare`)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    import onnxruntime as ort

    from ..ep import InferenceSession

    sess = InferenceSession(args.model)
    feeds = load_inputs(args.inputs, sess) if args.inputs else random_inputs(sess, args.seed)
    names = [o.name for o in sess.get_outputs()]
    times = []
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        outs = sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    report = {"outputs": [], "time_s": {"mean": float(np.mean(times)), "min": float(np.min(times))},
              "regions": sess.mrvl_stats()}
    for name, value in zip(names, outs):
        arr = np.asarray(value)
        entry = {"name": name, "shape": list(arr.shape), "dtype": str(arr.dtype)}
        if arr.size and np.issubdtype(arr.dtype, np.number):
            entry.update(min=float(arr.min()), max=float(arr.max()), mean=float(arr.astype(np.float64).mean()))
        report["outputs"].append(entry)
    ok = True
    if args.compare:
        ref_sess = ort.InferenceSession(args.compare, providers=["CPUExecutionProvider"])
        ref = ref_sess.run(None, {k: v for k, v in feeds.items() if k in {i.name for i in ref_sess.get_inputs()}})
        for entry, r, got in zip(report["outputs"], ref, outs):
            stats = error_stats(r, got)
            passed = "shape_mismatch" not in stats and stats["max_abs"] <= args.atol + args.tolerance * stats["ref_max_abs"]
            if np.issubdtype(np.asarray(r).dtype, np.integer):
                passed = np.array_equal(r, got)
            stats["pass"] = bool(passed)
            entry["compare"] = stats
            ok &= bool(passed)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        for e in report["outputs"]:
            line = f"{e['name']}: shape {e['shape']} {e['dtype']}"
            if "min" in e:
                line += f"  min {e['min']:.6g} max {e['max']:.6g} mean {e['mean']:.6g}"
            if "compare" in e:
                c = e["compare"]
                line += (f"  | vs original: max abs {c['max_abs']:.3g}, max rel {c['max_rel']:.3g} "
                         f"{'PASS' if c['pass'] else 'FAIL'}") if "max_abs" in c else f"  | shape mismatch {c}"
            print(line)
        print(f"time: mean {report['time_s']['mean'] * 1e3:.2f} ms over {len(times)} run(s)")
        for r in report["regions"]:
            lat = r.get("simulated_latency_s")
            print(f"  {r['region']}: {r['calls']} call(s), mean {r['mean_wall_s'] * 1e3:.2f} ms wall, "
                  f"{r['simulated_cycles_per_call']:,} simulated cycles"
                  + (f" ({lat * 1e6:.1f} us at the modelled clock)" if lat else ""))
    return 0 if ok else 1
