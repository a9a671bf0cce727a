#!/usr/bin/env python3
"""All converter benchmarks in one command; prints markdown and writes docs/benchmarks.md.

``python benchmarks/run_all.py [--sizes 1000 4000 16000 64000] [--budget 240] [--no-zoo] [--quick]
[--out PATH] [--readme PATH]``

Sections (each figure measured in this run, ratios within one process):
1. convert (and save) CPU time per model (project models and the randomized onnx-wheel zoo,
   partition=max), with the ratio to onnxruntime's session creation for the same model;
2. the convert targets of issue #20 (``bench_convert.py``, one process per model: VGG-19
   convert + save with and without the Constants-JSON, ResNet-50 convert, peak memory);
3. convert time on synthetic chains and branchy graphs (``models.branchy_chain``) and the log-log
   slope of time against nodes (target <= 1.1); a size whose predicted time (from the slope so far)
   exceeds ``--budget`` seconds is skipped and says so;
4. end to end: the converted model (shim with the simulator when ``onnx_mrvl.sim`` exists, else
   the fp32 reference bodies in plain onnxruntime) against onnxruntime on the original;
5. binary size against the fp16 weight bytes it carries;
6. simulator GFLOP/s against numpy float32 GEMM (``bench_sim_kernels.py`` when present), and the
   simulator's end-to-end speed against onnxruntime (``bench_shim.py``'s measurement);
7. diff and report of a 2,000-node model (``bench_diff.py`` / ``bench_report.py``'s code).

The document starts with the machine (CPU, cores, memory, versions, load average) and the date,
then a summary table (what | measured | target) which is also copied into README.md between
``<!-- benchmarks:begin -->`` and ``<!-- benchmarks:end -->``: no figure of that table is written by
hand. A section's analysis (where the time goes, what was cut: prose with figures measured apart,
written by hand) is kept in ``benchmarks/notes/<section>.md`` and copied under its table (``NOTES``).
``--quick`` measures a tiny subset (two small models, 200/400-node graphs, no subprocesses)
and writes nothing unless ``--out`` / ``--readme`` are given: it checks the report machinery.
"""
from __future__ import annotations

import argparse
import datetime
import logging
import os
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import onnxruntime as ort  # noqa: E402

import onnx_mrvl  # noqa: E402
from onnx_mrvl.testing.models import all_models, branchy_chain  # noqa: E402
from onnx_mrvl.testing.randomize_weights import random_inputs  # noqa: E402
from onnx_mrvl.testing.timing import paired_medians  # noqa: E402

import bench_summary  # noqa: E402
from run_all_sim import bench_sim_kernels, bench_sim_speed, sim_available  # noqa: E402

DEFAULT_OUT = os.path.join(ROOT, "docs", "benchmarks.md")
DEFAULT_README = os.path.join(ROOT, "README.md")
Facts = Dict[str, object]     # figures of this run the summary table reads
NOTES = {"Issue #20 convert targets: VGG-19 and ResNet-50": "convert-targets.md",
         "Simulator speed vs onnxruntime, batch 1": "sim-speed.md"}   # section -> benchmarks/notes/ file


def notes(title: str) -> List[str]:
    """The hand-written analysis of section ``title`` (benchmarks/notes/), [] when it has none."""
    name = NOTES.get(title)
    if name is None or not os.path.exists(os.path.join(HERE, "notes", name)):
        return []
    with open(os.path.join(HERE, "notes", name)) as f:
        return f.read().rstrip("\n").splitlines() + [""]


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def timed_convert(model, **kw):
    """(result, CPU seconds): CPU time, so a shared, loaded machine does not distort the scaling."""
    t = time.process_time()
    result = onnx_mrvl.convert(model, **kw)
    return result, time.process_time() - t


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of log(y) against log(x)."""
    if len(xs) < 2:
        return float("nan")
    lx, ly = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
    return float(np.polyfit(lx, ly, 1)[0])


# ------------------------------------------------------------------------------------ sections


def ort_session_s(model) -> float:
    """CPU seconds onnxruntime takes to create a session for ``model`` (the yardstick of convert time)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    data = model.SerializeToString()
    t = time.process_time()
    ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    return time.process_time() - t


def timed_save(result) -> float:
    with tempfile.TemporaryDirectory() as d:
        t = time.process_time()
        result.save(os.path.join(d, "out"))
        return time.process_time() - t


def binary_figures(result) -> tuple:
    """(regions, binary bytes, weight elements) of a conversion, for the binary-size section."""
    from onnx_mrvl.artifact import load
    size = sum(len(sg.binary) for sg in result.subgraphs)
    elems = sum(int(w.size) for sg in result.subgraphs for w in load(sg.binary).weights.values())
    return len(result.subgraphs), size, elems


def bench_models(models: Dict[str, Callable[[], object]], results: Dict[str, tuple], facts: Facts) -> List[str]:
    """Fills ``results`` (name -> ``binary_figures``) for the binary-size section (not the results
    themselves: those of the zoo models hold gigabytes)."""
    rows = ["CPU seconds. *ratio*: convert + save over onnxruntime's session creation for the same model "
            "(same run).", "",
            "| model | nodes | convert s | save s | ms / node | legalize s | fuse s | split s | emit+compile s "
            "| regions | offload | ort session s | ratio |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, build in models.items():
        model = build()
        n = len(model.graph.node)
        try:
            r, dt = timed_convert(model)
            ds = timed_save(r)
        except Exception as exc:  # noqa: BLE001 - a benchmark row, not a test
            rows.append(f"| {name} | {n} | error: {type(exc).__name__} | | | | | | | | | | |")
            continue
        t_ort = ort_session_s(model)
        results[name] = binary_figures(r)
        t = r.timings
        rows.append(f"| {name} | {n} | {dt:.2f} | {ds:.2f} | {1000 * dt / n:.1f} | {t.get('legalize', 0):.2f} "
                    f"| {t.get('fuse', 0):.2f} | {t.get('split', 0):.2f} | {t.get('emit+compile', 0):.2f} "
                    f"| {len(r.subgraphs)} | {100 * r.report.offload_fraction:.1f}% | {t_ort:.2f} "
                    f"| {(dt + ds) / t_ort:.1f} |")
        facts.setdefault("convert", {})[name] = (dt, ds, t_ort)
        say(f"convert {name}: {dt:.2f} s + save {ds:.2f} s")
        del model, r
    return rows


ISSUE_MODELS = ("vgg19", "resnet50")


def bench_targets(facts: Facts) -> List[str]:
    """bench_convert.py's rows (one process per model and save mode): stage times, save, peak memory."""
    import bench_convert
    rows = ["`benchmarks/bench_convert.py --save [--no-consts-json]`: one process per row, CPU seconds, the model "
            "read from a file (load + validate included). *RSS added*: peak resident memory minus the resident "
            "memory after the imports, over the model file's size.", "",
            "| model | Constants-JSON | file MB | load+validate s | legalize s | fuse s | split s | emit s "
            "| compile s | convert s | save s | convert + save s | peak RSS MB | RSS added / file size |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for consts in (True, False):
        for r in bench_convert.measure(ISSUE_MODELS, "cpu", True, consts):
            mode = "written" if consts else "skipped"
            if "error" in r:
                rows.append(f"| {r['model']} | {mode} | error: {r['error']} |" + " |" * 11)
                continue
            t = r["timings"]
            conv = t.get("total", r["convert"])
            rows.append(f"| {r['model']} | {mode} | {r['file_mb']:.0f} | "
                        + " | ".join(f"{t.get(k, 0.0):.2f}" for k in bench_convert.STAGES)
                        + f" | {conv:.2f} | {r['save']:.2f} | {conv + r['save']:.2f} | {r['peak_rss_mb']:.0f} "
                          f"| {r['convert_rss_mb'] / r['file_mb']:.2f}x |")
            facts.setdefault("targets", {})[(r["model"], consts)] = r
            say(f"target {r['model']} consts={consts}: convert {conv:.2f} s + save {r['save']:.2f} s")
    return rows


def bench_scaling(sizes: Sequence[int], budget: float, facts: Facts) -> List[str]:
    rows = ["CPU seconds. *ratio*: convert over onnxruntime's session creation for the same graph (same run).", "",
            "| graph | nodes | convert s | us / node | regions | ort session s | ratio |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    slopes = []
    for branchy in (False, True):
        kind = "branchy" if branchy else "chain"
        xs, ys = [], []
        for n in sizes:
            if len(xs) >= 1:
                slope = loglog_slope(xs, ys) if len(xs) >= 2 else 1.0
                predicted = ys[-1] * (n / xs[-1]) ** max(slope, 1.0)
                if predicted > budget:
                    rows.append(f"| {kind} | {n} | skipped: predicted {predicted:.0f} s > budget {budget:.0f} s "
                                "| | | | |")
                    say(f"scaling {kind} {n}: skipped (predicted {predicted:.0f} s)")
                    continue
            model = branchy_chain(n, branchy=branchy)
            r, dt = timed_convert(model)
            xs.append(n)
            ys.append(dt)
            t_ort = ort_session_s(model)
            rows.append(f"| {kind} | {n} | {dt:.2f} | {1e6 * dt / n:.0f} | {len(r.subgraphs)} | {t_ort:.2f} "
                        f"| {dt / t_ort:.1f} |")
            say(f"scaling {kind} {n}: {dt:.2f} s")
            del model, r
        slope = loglog_slope(xs, ys)
        facts.setdefault("scaling", {})[kind] = (xs, ys, slope)
        slopes.append(f"- {kind}: log-log slope **{slope:.2f}** over {', '.join(map(str, xs))} nodes "
                      f"(target <= 1.1: {'met' if slope <= 1.1 else 'NOT met'})")
    return rows + [""] + slopes


def bench_end_to_end(models: Dict[str, object], repeat: int, facts: Facts) -> List[str]:
    sim = sim_available()
    path_name = "onnx_mrvl.InferenceSession (simulator)" if sim else "plain onnxruntime on fp32 reference bodies"
    rows = [f"Converted model run through: {path_name}.", "",
            "| model | onnxruntime ms | converted ms | ratio | max abs err |", "| --- | ---: | ---: | ---: | ---: |"]
    def so():                       # fresh options each time: the shim registers its ops on them
        o = ort.SessionOptions()
        o.log_severity_level = 3
        return o
    for name, model in models.items():
        feed = random_inputs(model, 0)
        ref = ort.InferenceSession(model.SerializeToString(), so(), providers=["CPUExecutionProvider"])
        names = [o.name for o in ref.get_outputs()]
        try:
            r = onnx_mrvl.convert(model, reference=not sim)
            with tempfile.TemporaryDirectory() as d:
                path = r.save(d)
                sess = (onnx_mrvl.InferenceSession(path, so()) if sim else
                        ort.InferenceSession(path, so(), providers=["CPUExecutionProvider"]))
                t_ref, t_conv = paired_medians(lambda: ref.run(names, feed), lambda: sess.run(names, feed), repeat)
                err = max(float(np.max(np.abs(np.asarray(a, np.float64) - b))) if np.asarray(b).size else 0.0
                          for a, b in zip(sess.run(names, feed), ref.run(names, feed))
                          if np.asarray(b).dtype.kind == "f")
        except Exception as exc:  # noqa: BLE001
            rows.append(f"| {name} | | error: {type(exc).__name__}: {str(exc)[:80]} | | |")
            continue
        rows.append(f"| {name} | {1000 * t_ref:.2f} | {1000 * t_conv:.2f} | {t_conv / t_ref:.2f} | {err:.2e} |")
        facts.setdefault("end_to_end", {})[name] = t_conv / t_ref
        say(f"end-to-end {name}: {t_conv / t_ref:.2f}x")
    return rows


def bench_binary_size(results: Dict[str, tuple], facts: Facts) -> List[str]:
    rows = ["| model | regions | binary bytes | weight elements | fp16 weight bytes | binary / fp16 weights |",
            "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, (regions, size, elems) in results.items():
        ratio = f"{size / (2 * elems):.4f}" if elems else "-"
        if elems:
            facts.setdefault("binary", {})[name] = (size, 2 * elems)
        rows.append(f"| {name} | {regions} | {size:,} | {elems:,} | {2 * elems:,} | {ratio} |")
    return rows


def bench_tools(facts: Facts, size: int = 2000) -> List[str]:
    """diff and report of a ``size``-node branchy graph (bench_diff.py / bench_report.py's measurements)."""
    from bench_diff import renamed, residual_chain
    from onnx_mrvl.inspection.diff import diff_models
    from onnx_mrvl.inspection.offload import offload_report
    a = residual_chain(size, False)
    t = time.perf_counter()
    diff_models(a, renamed(a))
    t_diff = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as d:
        onnx_mrvl.convert(branchy_chain(size, branchy=True)).save(os.path.join(d, "out"))
        t = time.perf_counter()
        offload_report(os.path.join(d, "out"))
        t_report = time.perf_counter() - t
    facts["tools"] = (size, t_diff, t_report)
    return ["| tool | nodes | wall s |", "| --- | ---: | ---: |",
            f"| diff (renamed copy, `bench_diff.py`) | {size} | {t_diff:.2f} |",
            f"| offload report of a saved conversion (`bench_report.py`) | {size} | {t_report:.2f} |"]


def model_builders(zoo: bool, quick: bool = False) -> Dict[str, object]:
    """Name -> zero-argument builder (models are built when measured: the zoo's hold gigabytes)."""
    builders = all_models()
    if quick:
        builders = {k: builders[k] for k in ("tiny_cnn", "fashion_mnist")}
    out = {name: (lambda b=build: b(seed=0)) for name, build in builders.items()}
    if zoo:
        from onnx_mrvl.testing import randomize_weights as rw
        for name in rw.zoo_model_paths():
            out[f"zoo/{name}"] = (lambda n=name: rw.load_zoo(n, 0))
    return out


def _section(title, fn, *args, **kw) -> tuple:
    """(title, rows): a section that fails reports its error instead of ending the run."""
    try:
        return title, fn(*args, **kw)
    except Exception as exc:  # noqa: BLE001 - one broken benchmark must not lose the others
        say(f"{title}: {type(exc).__name__}: {exc}")
        return title, [f"not measured: {type(exc).__name__}: {str(exc)[:200]}"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=None,
                    help="synthetic graph sizes (default 1000 4000 16000 64000; --quick: 200 400)")
    ap.add_argument("--budget", type=float, default=240.0, help="skip a synthetic size predicted to take longer (s)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per end-to-end timing (median)")
    ap.add_argument("--no-zoo", action="store_true", help="skip the onnx-wheel zoo models")
    ap.add_argument("--quick", action="store_true", help="a tiny subset: checks the report, measures little")
    ap.add_argument("--out", default=None, help="markdown file to write (default docs/benchmarks.md; '' to skip; "
                                                "--quick: skipped unless given)")
    ap.add_argument("--readme", default=None, help="README whose benchmarks block is replaced (default README.md; "
                                                   "'' to skip; --quick: skipped unless given)")
    args = ap.parse_args(argv)
    out = args.out if args.out is not None else ("" if args.quick else DEFAULT_OUT)
    readme = args.readme if args.readme is not None else ("" if args.quick else DEFAULT_README)
    sizes = args.sizes or ([200, 400] if args.quick else [1000, 4000, 16000, 64000])
    logging.basicConfig(level=logging.ERROR)
    from onnx_mrvl import pipeline
    pipeline.CLOCK = time.process_time      # stage columns in CPU seconds, like the totals
    started = datetime.datetime.now(datetime.timezone.utc)
    load_start = bench_summary.load_average()
    t0 = time.perf_counter()
    models = model_builders(not (args.no_zoo or args.quick), args.quick)
    small = {k: build() for k, build in models.items() if not k.startswith("zoo/")}
    converted: Dict[str, tuple] = {}
    facts: Facts = {}
    repeat = 1 if args.quick else args.repeat
    sections = [
        _section("Convert time per model (partition=max)", bench_models, models, converted, facts),
        _section("Issue #20 convert targets: VGG-19 and ResNet-50", bench_targets, facts) if not args.quick else
        ("Issue #20 convert targets: VGG-19 and ResNet-50", ["not measured (--quick)"]),
        _section("Convert time on synthetic graphs", bench_scaling, sizes, args.budget, facts),
        _section("End to end: converted model vs onnxruntime on the original", bench_end_to_end, small, repeat, facts),
        _section("Binary size vs fp16 weight bytes", bench_binary_size, converted, facts),
        _section("Simulator vs numpy float32 GEMM", bench_sim_kernels, args.budget) if not args.quick else
        ("Simulator vs numpy float32 GEMM", ["not measured (--quick)"]),
        _section("Simulator speed vs onnxruntime, batch 1", bench_sim_speed, repeat, facts, args.quick)
        if sim_available() else ("Simulator speed vs onnxruntime, batch 1", ["not measured: no onnx_mrvl.sim"]),
        _section("Diff and report", bench_tools, facts, 400 if args.quick else 2000),
    ]
    total = time.perf_counter() - t0
    info = bench_summary.machine(started, load_start)
    table = bench_summary.summary_table(bench_summary.summary_rows(facts, ROOT))
    shown = [a for a in (sys.argv[1:] if argv is None else argv) if a]
    lines = ["# Benchmarks", "", "Generated by `" + " ".join(["python benchmarks/run_all.py"] + shown)
             + "` (do not edit by hand).", ""] + bench_summary.machine_lines(info, total, bench_summary.cpu_seconds()) + [""]
    lines += [f"## {bench_summary.SUMMARY_TITLE}", ""] + table + [""]
    for title, rows in sections:
        lines += [f"## {title}", ""] + rows + [""] + notes(title)
    text = "\n".join(lines)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)
    if readme:
        doc = os.path.relpath(out, os.path.dirname(os.path.abspath(readme))) if out else "benchmarks/run_all.py's output"
        bench_summary.write_readme(readme, bench_summary.readme_block(info, table, doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
