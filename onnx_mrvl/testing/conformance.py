"""ONNX backend node conformance: every node test case of the installed onnx package, converted.

For each case of ``onnx.backend.test.case.node.collect_testcases()``:
1. plain onnxruntime runs the original model; a case onnxruntime cannot load or run, or whose
   outputs miss the expected ones (case tolerance, at least onnxruntime's rtol=1e-3 atol=1e-7),
   is "not applicable";
2. ``onnx_mrvl.convert()`` runs on every case (applicable or not) and must not crash;
3. the converted model is saved and run through ``onnx_mrvl.InferenceSession`` (regions on the
   simulator; a simulator that fails to import is an error), or with ``--runner reference``
   through plain onnxruntime on the regions' fp32 reference bodies (``convert(reference=True)``);
4. a case passes when every output has the expected dtype and shape and values within fp16
   tolerance where a region was offloaded (onnxruntime's tolerance where not); an offloaded case
   outside that tolerance still passes when its error is within the fp16 baseline's (the original
   run with fp16 storage: at most 2x its error, or one fp16 rounding of the output's scale), i.e.
   the error is fp16 rounding itself (inputs such as 10001 that fp16 cannot hold), not a bug; the
   reason column says so.

The backend cases feed weights as graph inputs, so as-is almost nothing reaches the accelerator.
Each case therefore also runs as a "frozen" variant (``+frozen``): every input after the first
becomes an initializer holding the case's value and ``convert(force=True)`` offloads every region
it can (no minimum-work rule), which exercises fuse, split, emit and the accelerator path. Models
written with an IR version newer than onnxruntime loads (14) are run at IR 13. Inputs
with symbolic dimensions get ``input_shapes`` from the case's data (as a user would pass them).

Policy on exceptions from ``convert()``: any exception outside the ``MrvlError`` family is a
failure ("crash"), applicable case or not, and so is convert()'s own fallback for an internal
error (model returned unchanged with "conversion failed internally" in ``report.warnings``): the
user keeps a working model, but it is a converter bug. A ``MrvlError`` is accepted only for a case onnxruntime
itself rejects, or for an input the converter documents as unsupported (``ModelError`` for an
opset below 7, see ``onnx_mrvl.model_checks.MIN_OPSET``); on any other applicable case it is a failure.

CLI: ``python -m onnx_mrvl.testing.conformance [--workers 2] [--only REGEX] [--json OUT] [--md docs/conformance.md]``.
Progress goes to stderr; the summary line ``N passed, M failed`` to stdout.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np


log = logging.getLogger("conformance")
ORT_RTOL, ORT_ATOL = 1e-3, 1e-7
FP16_RTOL, FP16_ATOL = 1e-2, 1e-3          # atol is scaled by max(1, max |expected|)
CASE_TIMEOUT_S = 60
MAX_ORT_IR = 13                                      # onnxruntime 1.31 loads IR <= 13
INTERNAL_FAILURE = "conversion failed internally"   # report.warnings text of convert()'s crash fallback
_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


@dataclass
class CaseResult:
    name: str
    op_type: str
    status: str                       # pass | fail | n/a
    reason: str = ""
    offloaded: bool = False
    regions: int = 0
    seconds: float = 0.0
    convert_error: str = ""           # exception type raised by convert(), if any
    variant: str = "as-is"            # as-is | frozen (inputs after the first made initializers, force=True)


def runner_for(requested: str = "auto") -> str:
    """"sim" (onnx_mrvl.InferenceSession with the simulator) unless "reference" is asked for.

    "auto" means "sim": a simulator that fails to import is an error, never a silent switch to
    the fp32 reference bodies."""
    if requested == "reference":
        return requested
    from onnx_mrvl.sim import Simulator  # noqa: F401 - raises when the simulator is broken
    return "sim"


def collect_cases(pattern: Optional[str] = None):
    """The onnx backend node test cases (optionally those whose name matches ``pattern``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np_err = np.seterr(all="ignore")
        try:
            from onnx.backend.test.case.node import collect_testcases
            cases = list(collect_testcases())
        finally:
            np.seterr(**np_err)
    if pattern:
        rx = re.compile(pattern)
        cases = [c for c in cases if rx.search(c.name)]
    return cases


def op_types(cases) -> Dict[str, str]:
    """Case name -> op type under test (expanded cases count for the op they expand)."""
    direct = {}
    for c in cases:
        if not _EXPANDED.search(c.name) and c.model.graph.node:
            direct[c.name] = c.model.graph.node[0].op_type
    out = {}
    for c in cases:
        base = _EXPANDED.sub("", c.name)
        out[c.name] = direct.get(base) or direct.get(c.name) or (
            c.model.graph.node[0].op_type if c.model.graph.node else "?")
    return out


# ---------------------------------------------------------------------------------------------
# values


def _to_value(v):
    import onnx
    from onnx import numpy_helper
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, list):
        return [_to_value(x) for x in v]
    if isinstance(v, np.generic):
        return np.asarray(v)
    return v


def compare(got, want, rtol: float, atol: float, scaled: bool = False) -> Optional[str]:
    """None when ``got`` matches ``want`` (exact dtype and shape, values within tolerance)."""
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"sequence mismatch (got {type(got).__name__} of {len(got) if isinstance(got, list) else '-'})"
        for g, w in zip(got, want):
            why = compare(g, w, rtol, atol, scaled)
            if why:
                return why
        return None
    if want is None:
        return None if got is None else "expected an empty optional"
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != expected {want.dtype}"
    if got.shape != want.shape:
        return f"shape {got.shape} != expected {want.shape}"
    if want.dtype.kind in "OUSb" or want.dtype.kind in "iu":
        return None if np.array_equal(got, want) else "values differ"
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    if scaled and w64.size:
        finite = np.abs(w64[np.isfinite(w64)])
        atol = atol * max(1.0, float(finite.max()) if finite.size else 1.0)
    if not np.allclose(g64, w64, rtol=rtol, atol=atol, equal_nan=True):
        with np.errstate(all="ignore"):
            err = np.nanmax(np.abs(g64 - w64)) if w64.size else 0.0
        return f"values differ (max abs err {err:.3g})"
    return None


def _run_ort(sess_or_path, inputs, input_names):
    feed = {n: _to_value(v) for n, v in zip(input_names, inputs)}
    return sess_or_path.run(None, feed)


def _graph_inputs(model) -> List[str]:
    inits = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


# ---------------------------------------------------------------------------------------------
# one case


def frozen_variant(case):
    """(model, inputs) with every input after the first turned into an initializer holding the
    case's value (weights become constants the accelerator can take). Converted with force=True,
    so single-input cases run through the accelerator too."""
    import onnx
    from onnx import numpy_helper
    model = case.model
    inputs = list(case.data_sets[0][0])
    names = _graph_inputs(model)
    if len(inputs) != len(names):
        return None
    frozen = onnx.ModelProto()
    frozen.CopyFrom(model)
    keep, listed = [], []          # IR < 4 lists initializers among the graph inputs too
    for vi, value in zip([i for i in frozen.graph.input if i.name in names], inputs):
        value = _to_value(value)
        if keep and isinstance(value, np.ndarray) and value.dtype.kind in "fiub":
            frozen.graph.initializer.append(numpy_helper.from_array(value, vi.name))
            if frozen.ir_version < 4:
                listed.append(vi)
        else:
            keep.append((vi, value))
    del frozen.graph.input[:]
    frozen.graph.input.extend([vi for vi, _ in keep] + listed)
    return frozen, [v for _, v in keep]


def loadable(model):
    """The model with its IR version lowered to what onnxruntime loads (the suite is written with
    onnx's newest IR; the cases use nothing of it)."""
    if model.ir_version <= MAX_ORT_IR:
        return model
    import onnx
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.ir_version = MAX_ORT_IR
    return out


def _static_shapes(model, inputs) -> Optional[Dict[str, List[int]]]:
    """input_shapes for the tensor inputs with a symbolic or unknown dimension (from the data)."""
    out = {}
    for vi, value in zip([i for i in model.graph.input if i.name in _graph_inputs(model)], inputs):
        if not vi.type.HasField("tensor_type") or not isinstance(value, np.ndarray):
            continue
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and any(not d.HasField("dim_value") for d in dims):
            out[vi.name] = list(value.shape)
    return out or None


def run_case(case, op_type: str, runner: str, workdir: str, force: bool = False,
             variant: str = "as-is") -> Optional[CaseResult]:
    """One case through onnxruntime, convert() and the converted model. ``variant="frozen"`` runs
    ``frozen_variant`` with force=True (None when the case has no input to freeze)."""
    import onnxruntime as ort

    import onnx_mrvl
    from onnx_mrvl.errors import ModelError, MrvlError

    t0 = time.perf_counter()
    res = CaseResult(case.name + ("" if variant == "as-is" else f"+{variant}"), op_type, "n/a", variant=variant)
    model = loadable(case.model)
    inputs, expected = case.data_sets[0]
    if variant == "frozen":
        fv = frozen_variant(case)
        if fv is None:
            return None
        model, inputs = fv
        model = loadable(model)
        force = True
    expected = [_to_value(e) for e in expected]
    names = _graph_inputs(model)
    rtol, atol = max(case.rtol, ORT_RTOL), max(case.atol, ORT_ATOL)
    so = ort.SessionOptions()
    so.log_severity_level = 4
    # 1. onnxruntime on the original
    applicable, na_reason = True, ""
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        ref = _run_ort(sess, inputs, names)
        why = next((w for w in (compare(_to_value(g), e, rtol, atol) for g, e in zip(ref, expected)) if w), None)
        if why:
            applicable, na_reason = False, f"onnxruntime disagrees with the expected output: {why}"
    except Exception as exc:  # noqa: BLE001 - whatever onnxruntime raises
        applicable, na_reason = False, f"onnxruntime cannot run it ({_short(exc)})"
    # 2. convert
    try:
        result = onnx_mrvl.convert(model, reference=(runner == "reference"), force=force,
                                   input_shapes=_static_shapes(model, inputs))
    except MrvlError as exc:
        res.convert_error = type(exc).__name__
        documented = isinstance(exc, ModelError) and "opset" in exc.message and "older" in exc.message
        if not applicable:
            res.reason = na_reason
        elif documented:
            res.status, res.reason = "n/a", f"documented as unsupported: {_short(exc)}"
        else:
            res.status, res.reason = "fail", f"convert raised {type(exc).__name__}: {_short(exc)}"
        res.seconds = time.perf_counter() - t0
        return res
    except Exception as exc:  # noqa: BLE001 - this is what we are looking for
        res.convert_error = type(exc).__name__
        res.status, res.reason = "fail", f"convert crashed: {type(exc).__name__}: {_short(exc)}"
        res.seconds = time.perf_counter() - t0
        return res
    subgraphs = [n for n in result.model.graph.node if n.op_type.startswith("Subgraph_")]
    res.offloaded, res.regions = bool(subgraphs), len(subgraphs)
    internal = next((w for w in result.report.warnings if INTERNAL_FAILURE in w), None)
    if internal:               # convert() hid a crash of its own by returning the model unchanged
        res.convert_error = internal.split("(", 1)[-1].split(":", 1)[0]
        res.status, res.reason = "fail", f"convert fell back to the CPU after an internal error: {_short(internal)}"
        res.seconds = time.perf_counter() - t0
        return res
    if not applicable:
        res.reason = na_reason
        res.seconds = time.perf_counter() - t0
        return res
    # 3. save and run the converted model
    out_dir = tempfile.mkdtemp(prefix=case.name[:40] + "-", dir=workdir)
    try:
        path = result.save(out_dir)
        if runner == "sim":
            sess = onnx_mrvl.InferenceSession(path, so, fp16_overflow="inf")   # the comparison judges infs
        else:
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        got = _run_ort(sess, inputs, _graph_inputs(result.model))
    except Exception as exc:  # noqa: BLE001
        res.status, res.reason = "fail", f"converted model does not run: {type(exc).__name__}: {_short(exc)}"
        res.seconds = time.perf_counter() - t0
        return res
    finally:
        _rmtree(out_dir)
    # 4. compare
    if len(got) != len(expected):
        res.status, res.reason = "fail", f"{len(got)} outputs, expected {len(expected)}"
    else:
        tol = (FP16_RTOL, FP16_ATOL, True) if res.offloaded else (rtol, atol, False)
        why = next((f"output {i}: {w}" for i, w in enumerate(
            compare(_to_value(g), e, *tol) for g, e in zip(got, expected)) if w), None)
        if why and res.offloaded:   # fp16 rounding itself (e.g. inputs fp16 cannot hold) or a bug?
            note = _within_fp16_baseline(model, inputs, names, got, expected)
            why = None if note else why
            res.reason = note or ""
        res.status, res.reason = ("fail", why) if why else ("pass", res.reason)
    res.seconds = time.perf_counter() - t0
    return res


def _within_fp16_baseline(model, inputs, names, got, expected) -> Optional[str]:
    """A note when every float output's error is within the fp16 baseline's (the original model
    run with fp16 storage, docs/simulator.md "fp16 baseline"): at most 2x its error or one fp16
    rounding of the output's scale; None otherwise (a real failure)."""
    from onnx_mrvl.inspection.fp16_baseline import run_fp16_baseline

    feeds = {n: np.asarray(v) for n, v in zip(names, inputs)}
    try:
        base = run_fp16_baseline(model, feeds)
    except Exception:  # noqa: BLE001 - no baseline: the tolerance verdict stands
        return None
    notes = []
    for o, g, e in zip(model.graph.output, got, expected):
        g, e, b = (np.asarray(_to_value(v), np.float64) for v in (g, e, base.get(o.name)))
        if e.dtype.kind != "f" or b is None or b.shape != e.shape or g.shape != e.shape:
            return None
        finite = np.isfinite(e)
        if not np.array_equal(finite, np.isfinite(g)):
            return None
        scale = float(np.abs(e[finite]).max()) if finite.any() else 0.0
        ours = float(np.abs(g - e)[finite].max()) if finite.any() else 0.0
        theirs = float(np.abs(b - e)[finite].max()) if finite.any() else 0.0
        if ours > max(2.0 * theirs, 2.0 ** -11 * scale):
            return None
        notes.append(f"{o.name}: {ours:.3g} vs baseline {theirs:.3g}")
    return "within the fp16 baseline (" + "; ".join(notes) + ")"


def _short(exc: BaseException, limit: int = 160) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _rmtree(path: str) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# running many cases (forked workers; a worker that dies or hangs costs one case, not the run)


class _Timeout(Exception):
    pass


def _worker(cases, ops, indices, runner, workdir, force, variants, queue):
    import signal

    import onnxruntime as ort
    ort.set_default_logger_severity(4)

    def alarm(*_):
        raise _Timeout()
    signal.signal(signal.SIGALRM, alarm)
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    for i in indices:
        queue.put(("start", i, None))
        out = []
        for variant in variants:
            name = cases[i].name + ("" if variant == "as-is" else f"+{variant}")
            signal.alarm(CASE_TIMEOUT_S)
            try:
                r = run_case(cases[i], ops[cases[i].name], runner, workdir, force, variant)
            except _Timeout:
                r = CaseResult(name, ops[cases[i].name], "fail", f"timed out after {CASE_TIMEOUT_S} s", variant=variant)
            except Exception as exc:  # noqa: BLE001 - run_case catches per stage; this is a harness slip
                r = CaseResult(name, ops[cases[i].name], "fail", f"harness: {type(exc).__name__}: {exc}",
                               variant=variant)
            finally:
                signal.alarm(0)
            if r is not None:
                out.append(asdict(r))
        queue.put(("done", i, out))
    queue.put(("exit", None, None))


def run_cases(cases, runner: str, workers: int = 2, force: bool = False, progress=None,
              variants: Sequence[str] = ("as-is", "frozen")) -> List[CaseResult]:
    """Results in case order (one per case and variant). ``workers`` forked processes share the
    already collected cases."""
    import multiprocessing as mp
    ops = op_types(cases)
    if runner == "sim":   # compile the simulator's kernels once, here: not in each worker's first timed case
        from onnx_mrvl.sim import native
        native.prebuild()
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    results: Dict[int, List[CaseResult]] = {}
    workdir = tempfile.mkdtemp(prefix="mrvl-conformance-")
    pending = list(range(len(cases)))
    shares = [pending[k::max(1, workers)] for k in range(max(1, workers))]
    procs = {}
    current: Dict[int, Optional[int]] = {}

    def spawn(k, indices):
        p = ctx.Process(target=_worker, args=(cases, ops, indices, runner, workdir, force, tuple(variants), queue), daemon=True)
        p.start()
        procs[k], current[k] = (p, indices), None

    for k, share in enumerate(shares):
        if share:
            spawn(k, share)
    owner = {i: k for k, share in enumerate(shares) for i in share}
    t0 = time.perf_counter()
    try:
        while len(results) < len(cases):
            try:
                kind, i, payload = queue.get(timeout=5)
            except Exception:  # noqa: BLE001 - queue.Empty: check for dead workers
                for k, (p, indices) in list(procs.items()):
                    if not p.is_alive() and p.exitcode not in (0, None):
                        i = current.get(k)
                        if i is not None and i not in results:
                            c = cases[i]
                            results[i] = [CaseResult(c.name, ops[c.name], "fail",
                                                     f"process died (exit code {p.exitcode})")]
                        rest = [j for j in indices if j not in results and j != i]
                        del procs[k]
                        if rest:
                            spawn(k, rest)
                continue
            if kind == "start":
                current[owner[i]] = i
            elif kind == "done":
                results[i] = [CaseResult(**r) for r in payload]
                if progress:
                    progress(len(results), len(cases), results[i], time.perf_counter() - t0)
    finally:
        for p, _ in procs.values():
            p.join(timeout=1)
            if p.is_alive():
                p.terminate()
        _rmtree(workdir)
    return [r for i in range(len(cases)) for r in results[i]]


# ---------------------------------------------------------------------------------------------
# reporting


def summarize(results: Sequence[CaseResult]) -> dict:
    by_status = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "n/a")}
    return {"cases": len({r.name.split("+")[0] for r in results}), "runs": len(results), "applicable": by_status["pass"] + by_status["fail"],
            "passed": by_status["pass"], "failed": by_status["fail"], "not_applicable": by_status["n/a"],
            "offloaded": sum(r.offloaded for r in results),
            "offloaded_applicable": sum(r.offloaded and r.status != "n/a" for r in results),
            "convert_raised": sum(bool(r.convert_error) for r in results)}


def markdown(results: Sequence[CaseResult], meta: dict) -> str:
    s = summarize(results)
    rows: Dict[str, List[CaseResult]] = {}
    for r in results:
        rows.setdefault(r.op_type, []).append(r)
    lines = ["# ONNX backend node conformance", "",
             "Generated by `python -m onnx_mrvl.testing.conformance` (do not edit by hand).", "",
             f"- onnx {meta['onnx']}, onnxruntime {meta['onnxruntime']}; run path: **{meta['runner']}**"
             f"{' (force=True)' if meta.get('force') else ''}; {meta['workers']} workers, {meta['seconds']:.0f} s "
             f"(load average {meta.get('load', 0):.1f} at the start)",
             f"- {s['cases']} cases, {s['runs']} runs (as-is + frozen variant), {s['applicable']} applicable runs, "
             f"{s['offloaded']} offloaded "
             f"({s['offloaded_applicable']} applicable), convert raised on {s['convert_raised']}",
             f"- **{s['passed']} passed, {s['failed']} failed**", "",
             "Not applicable: onnxruntime cannot load or run the original, or its output misses the expected "
             "one (rtol=1e-3, atol=1e-7), or the converter documents the input as unsupported (opset < 7). "
             "Offloaded cases compare within fp16 tolerance (rtol=1e-2, atol=1e-3 x max(1, max|expected|)).", "",
             "| op type | runs | applicable | offloaded | passed | failed | failure reasons |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for op in sorted(rows):
        rs = rows[op]
        fails = [r for r in rs if r.status == "fail"]
        reasons = "; ".join(f"`{r.name}`: {r.reason.replace('|', '/')}" for r in fails[:3])
        if len(fails) > 3:
            reasons += f"; ... ({len(fails) - 3} more)"
        lines.append(f"| {op} | {len(rs)} | {sum(r.status != 'n/a' for r in rs)} | {sum(r.offloaded for r in rs)} "
                     f"| {sum(r.status == 'pass' for r in rs)} | {len(fails)} | {reasons} |")
    na: Dict[str, int] = {}
    for r in results:
        if r.status == "n/a":
            key = re.sub(r"\(.*", "", r.reason).strip()[:80]
            na[key] = na.get(key, 0) + 1
    lines += ["", "## Why cases are not applicable", "", "| reason | cases |", "| --- | ---: |"]
    lines += [f"| {k.replace('|', '/')} | {v} |" for k, v in sorted(na.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", metavar="REGEX", help="run the cases whose name matches")
    ap.add_argument("--runner", choices=("auto", "sim", "reference"), default="auto")
    ap.add_argument("--force", action="store_true", help="convert with force=True (offload every region)")
    ap.add_argument("--json", metavar="PATH", help="write per-case results as JSON ('-' for stdout)")
    ap.add_argument("--md", metavar="PATH", help="write the markdown table (e.g. docs/conformance.md)")
    ap.add_argument("--no-frozen", action="store_true", help="skip the frozen-inputs variant")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    import onnx
    import onnxruntime
    runner = runner_for(args.runner)
    t0 = time.perf_counter()
    load = os.getloadavg()[0]
    cases = collect_cases(args.only)
    t_collect = time.perf_counter() - t0
    if not args.quiet:
        print(f"collected {len(cases)} cases in {t_collect:.1f} s; runner={runner}", file=sys.stderr)

    def progress(done, total, rs, elapsed):
        if args.quiet:
            return
        for r in rs:
            if r.status == "fail":
                print(f"FAIL {r.name}: {r.reason}", file=sys.stderr)
        if done % 100 == 0 or done == total:
            print(f"[{done}/{total}] {elapsed:.0f} s", file=sys.stderr)

    variants = ("as-is",) if args.no_frozen else ("as-is", "frozen")
    results = run_cases(cases, runner, args.workers, args.force, progress, variants)
    meta = {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__, "runner": runner,
            "force": args.force, "workers": args.workers, "seconds": time.perf_counter() - t0,
            "collect_seconds": t_collect, "load": load}
    s = summarize(results)
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown(results, meta))
    if args.json:
        data = json.dumps({"meta": meta, "summary": s, "cases": [asdict(r) for r in results]}, indent=1)
        if args.json == "-":
            print(data)
        else:
            with open(args.json, "w") as f:
                f.write(data + "\n")
    print(f"{s['passed']} passed, {s['failed']} failed ({s['applicable']} applicable of {s['runs']} runs "
          f"of {s['cases']} cases, "
          f"{s['offloaded']} offloaded) in {meta['seconds']:.0f} s")
    return 0 if s["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
