"""``onnx-mrvl run``: run a converted model (regions on the simulator) and compare it with the original."""
from __future__ import annotations

import logging
import os
import sys
import time

import numpy as np

from ..errors import ModelError, UsageError
from ..feeds import input_mismatches
from ..inspection.compare import DEFAULT_ATOL
from ..inspection.tensors import error_stats as tensor_stats
from .common import (error_stats, load_inputs, nonnegative_int, positive_int, print_json, random_inputs,
                     session_specs, tolerance)

log = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser("run", help="run a converted model through onnxruntime + the simulator",
                       description="Runs MODEL (a converted model.onnx) with onnx_mrvl.InferenceSession; prints "
                                   "each output, per-region wall time and simulated cycles, and with --compare "
                                   "the error against plain onnxruntime on the original model.")
    p.add_argument("model", help="converted model.onnx")
    p.add_argument("--inputs", help=".npz (by input name) or .npy; random seeded inputs when absent")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--compare", metavar="ORIGINAL.onnx", help="compare against plain onnxruntime on this model")
    p.add_argument("--repeat", type=positive_int, default=1, metavar="N", help="run N times (timing)")
    p.add_argument("--tolerance", type=tolerance, default=1e-2,
                   help="pass when max abs error <= ATOL + TOL x max|reference| (default 1e-2, fp16-aware)")
    p.add_argument("--atol", type=tolerance, default=DEFAULT_ATOL,
                   help=f"absolute part of the tolerance, for outputs that are (nearly) zero; values far below "
                        f"fp16's range flush to 0 on the accelerator (default {DEFAULT_ATOL:g}, as `compare`)")
    p.add_argument("--allow-overflow", action="store_true",
                   help="let fp16 overflows (inf/NaN from finite inputs) flow on, as on the device, with a "
                        "warning; by default such a run fails (exit 3) naming the layer and its original nodes "
                        "(with --compare the infs are compared instead: an output they reach fails, exit 1)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..ep import InferenceSession

    if os.path.isdir(args.model):   # the output folder itself: its model.onnx (as compare and report take it)
        if not os.path.isfile(os.path.join(args.model, "model.onnx")):
            raise ModelError(f"'{args.model}' is a folder holding no model.onnx",
                             hint="pass the model.onnx that `onnx-mrvl convert` wrote (OUT_DIR/model.onnx)")
        args.model = os.path.join(args.model, "model.onnx")
    if not os.path.isfile(args.model):
        raise ModelError(f"model file '{args.model}' does not exist",
                         hint="pass the model.onnx that `onnx-mrvl convert` wrote (OUT_DIR/model.onnx)")
    sess = InferenceSession(args.model, fp16_overflow="inf" if (args.allow_overflow or args.compare) else "raise")
    ref_sess = reference_session(args.compare, sess) if args.compare else None
    if args.compare:
        from ..inspection.exact_int8 import saturation_note
        from ..modelio import load_model
        note = saturation_note(load_model(args.compare))
        if note:
            sys.stderr.write(note + "\n")
    feeds = load_inputs(args.inputs, sess) if args.inputs else random_inputs(sess, args.seed)
    names = [o.name for o in sess.get_outputs()]
    times = []
    for i in range(args.repeat):
        if args.repeat > 1:
            log.info("run %d of %d", i + 1, args.repeat)
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
        log.info("running the original model %s in onnxruntime", args.compare)
        ref = ref_sess.run(names, feeds)
        for entry, r, got in zip(report["outputs"], ref, outs):
            stats = error_stats(r, got)
            passed = "shape_mismatch" not in stats and stats["max_abs"] <= args.atol + args.tolerance * stats["ref_max_abs"]
            if np.issubdtype(np.asarray(r).dtype, np.integer):
                passed = np.array_equal(r, got)
            elif "shape_mismatch" not in stats:   # non-finite values: counted, must agree, named
                full = tensor_stats(r, got, args.atol, args.tolerance)
                stats.update({k: full[k] for k in ("nan", "inf", "ref_nan", "ref_inf", "reason") if k in full})
                if stats["nan"] or stats["inf"] or stats["ref_nan"] or stats["ref_inf"]:
                    stats["max_abs"], stats["max_rel"] = full["max_abs"], full["max_rel"]
                    passed = full["pass"]
            stats["pass"] = bool(passed)
            entry["compare"] = stats
            ok &= bool(passed)
    if args.json:
        print_json(report)
    else:
        for e in report["outputs"]:
            line = f"{e['name']}: shape {e['shape']} {e['dtype']}"
            if "min" in e:
                line += f"  min {e['min']:.6g} max {e['max']:.6g} mean {e['mean']:.6g}"
            if "compare" in e:
                c = e["compare"]
                line += (f"  | vs original: max abs {c['max_abs']:.3g}, max rel {c['max_rel']:.3g} "
                         f"{'PASS' if c['pass'] else 'FAIL'}") if "max_abs" in c else f"  | shape mismatch {c}"
                if not c["pass"] and c.get("reason"):
                    line += f" ({c['reason']})"
            print(line)
        print(f"time: mean {report['time_s']['mean'] * 1e3:.2f} ms over {len(times)} run(s)")
        for r in report["regions"]:
            lat = r.get("simulated_latency_s")
            print(f"  {r['region']}: {r['calls']} call(s), mean {r['mean_wall_s'] * 1e3:.2f} ms wall, "
                  f"{r['simulated_cycles_per_call']:,} simulated cycles"
                  + (f" ({lat * 1e6:.1f} us at the modelled clock)" if lat else ""))
    return 0 if ok else 1


def reference_session(path: str, sess):
    """An onnxruntime session of the ``--compare`` model, checked to take the converted model's
    inputs (names, dtypes, static dimensions) and to have its outputs: a missing, truncated or
    different model is the user's mistake (``ModelError``/``UsageError``), not ours."""
    import onnxruntime as ort

    from ..modelio import load_model

    try:
        ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types for a bad model
        try:
            load_model(path)   # missing, truncated, not ONNX: its own message and fix
        except ModelError as bad:
            raise ModelError(f"--compare: {bad.message}", hint=bad.hint or "pass the original .onnx model the "
                             "converted one was made from") from None
        raise ModelError(f"--compare: onnxruntime cannot load '{path}' ({type(exc).__name__}: {exc})",
                         hint="pass an .onnx model onnxruntime can run (the original model)") from None
    problems = input_mismatches(session_specs(sess), session_specs(ref), "the converted model", f"'{path}'")
    ref_outputs = {o.name for o in ref.get_outputs()}
    problems += [f"'{path}' has no output '{o.name}'" for o in sess.get_outputs() if o.name not in ref_outputs]
    if problems:
        raise UsageError(f"--compare model '{path}' does not match the converted model: {'; '.join(sorted(problems))}",
                         hint="pass the original model the converted one was made from (same inputs and outputs)")
    return ref
