"""Model zoo run: convert every zoo and project model with each partition strategy, run, compare.

Models: the nine onnx-wheel architectures with seeded random weights
(``randomize_weights.load_zoo``) and the project's models (``models.all_models()``). For each model
and strategy (max, single, cost): ``convert()``, save, run the result (``onnx_mrvl.InferenceSession``
when ``onnx_mrvl.sim`` is importable, else plain onnxruntime on the regions' fp32 reference bodies)
and compare every output with onnxruntime on the original. Records offload fraction (MACs), the
number of regions, the max abs / relative error and the convert time.

CLI: ``python -m onnx_mrvl.testing.zoo [--only NAME ...] [--strategies max single cost] [--json OUT] [--runner ...]``
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

log = logging.getLogger("zoo")
STRATEGIES = ("max", "single", "cost")
# Error budget (relative to the largest |reference| of the output). The reference path runs fp32
# bodies, so it must be tight; the simulator computes in fp16 through deep nets.
TOLERANCE = {"reference": 1e-4, "sim": 1e-2}   # sim: the fp16 bound of docs/simulator.md


@dataclass
class ZooRow:
    model: str
    strategy: str
    status: str                  # ok | mismatch | error
    nodes: int = 0
    regions: int = 0
    offload_fraction: float = 0.0
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    convert_s: float = 0.0
    run_s: float = 0.0
    ort_s: float = 0.0
    error: str = ""


def model_builders(seed: int = 0) -> Dict[str, Callable[[], "onnx.ModelProto"]]:  # noqa: F821
    """Name -> zero-argument builder: zoo architectures (prefixed ``zoo/``) then project models."""
    from . import randomize_weights as rw
    from .models import all_models
    out = {}
    for name in rw.zoo_model_paths():
        out[f"zoo/{name}"] = (lambda n=name: rw.load_zoo(n, seed))
    for name, build in all_models().items():
        out[name] = (lambda b=build: b(seed=seed))
    return out


def runner_kind(requested: str = "auto") -> str:
    """"sim" unless "reference" is asked for; a simulator that fails to import raises (no silent
    switch to the fp32 reference bodies)."""
    if requested == "reference":
        return requested
    from onnx_mrvl.sim import Simulator  # noqa: F401
    return "sim"


def _session(path_or_bytes, runner: str):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if runner == "sim":
        import onnx_mrvl
        return onnx_mrvl.InferenceSession(path_or_bytes, so)
    return ort.InferenceSession(path_or_bytes, so, providers=["CPUExecutionProvider"])


def run_model(name: str, model, strategies: Sequence[str], runner: str, seed: int = 0) -> List[ZooRow]:
    """All strategies for one model; onnxruntime on the original runs once."""
    import onnx_mrvl
    from .randomize_weights import random_inputs
    feed = random_inputs(model, seed)
    ref_sess = _session(model.SerializeToString(), "reference")
    ref_sess.run(None, feed)                       # warm-up
    t = time.perf_counter()
    ref = ref_sess.run(None, feed)
    ort_s = time.perf_counter() - t
    out_names = [o.name for o in ref_sess.get_outputs()]
    rows = []
    for strategy in strategies:
        row = ZooRow(name, strategy, "error", nodes=len(model.graph.node), ort_s=ort_s)
        try:
            t = time.perf_counter()
            result = onnx_mrvl.convert(model, partition=strategy, reference=(runner == "reference"))
            row.convert_s = time.perf_counter() - t
            row.regions = len(result.subgraphs)
            row.offload_fraction = result.report.offload_fraction
            with tempfile.TemporaryDirectory(prefix="mrvl-zoo-") as d:
                path = result.save(d)
                sess = _session(path, runner)
                sess.run(out_names, feed)          # warm-up (first call loads the programs)
                t = time.perf_counter()
                got = sess.run(out_names, feed)
                row.run_s = time.perf_counter() - t
            abs_err, rel_err, why = _errors(got, ref)
            row.max_abs_err, row.max_rel_err = abs_err, rel_err
            ok = why is None and rel_err <= TOLERANCE[runner]
            row.status = "ok" if ok else "mismatch"
            row.error = why or ("" if ok else f"relative error {rel_err:.3g} > {TOLERANCE[runner]}")
        except Exception as exc:  # noqa: BLE001 - every failure becomes a row
            row.error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            log.debug("%s/%s failed:\n%s", name, strategy, traceback.format_exc())
        rows.append(row)
    return rows


def _errors(got, ref):
    abs_err = rel_err = 0.0
    for g, r in zip(got, ref):
        g, r = np.asarray(g), np.asarray(r)
        if g.shape != r.shape or g.dtype != r.dtype:
            return float("inf"), float("inf"), f"output {g.dtype}{g.shape} != reference {r.dtype}{r.shape}"
        if r.dtype.kind not in "fc":
            if not np.array_equal(g, r):
                # integer outputs (indices) can legitimately flip on near-ties; count mismatches
                return abs_err, rel_err, f"{int(np.sum(g != r))} of {r.size} integer values differ"
            continue
        if r.size == 0:
            continue
        d = float(np.max(np.abs(g.astype(np.float64) - r)))
        scale = max(float(np.max(np.abs(r))), 1e-6)
        abs_err, rel_err = max(abs_err, d), max(rel_err, d / scale)
    return abs_err, rel_err, None


def markdown(rows: Sequence[ZooRow], runner: str) -> str:
    lines = [f"Run path: **{runner}**. Error relative to max |onnxruntime output| (tolerance {TOLERANCE[runner]}).", "",
             "| model | strategy | status | nodes | regions | offload (MACs) | max abs err | max rel err "
             "| convert s | run s | ORT s | note |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        lines.append(f"| {r.model} | {r.strategy} | {r.status} | {r.nodes} | {r.regions} | {100 * r.offload_fraction:.1f}% "
                     f"| {r.max_abs_err:.2e} | {r.max_rel_err:.2e} | {r.convert_s:.2f} | {r.run_s:.3f} | {r.ort_s:.3f} "
                     f"| {r.error.replace('|', '/')} |")
    ok = sum(r.status == "ok" for r in rows)
    lines.append("")
    lines.append(f"{ok} ok, {len(rows) - ok} not ok")
    return "\n".join(lines) + "\n"


def run(only: Optional[Sequence[str]] = None, strategies: Sequence[str] = STRATEGIES, runner: str = "auto",
        seed: int = 0, progress=None) -> List[ZooRow]:
    runner = runner_kind(runner)
    builders = model_builders(seed)
    names = list(only) if only else list(builders)
    unknown = [n for n in names if n not in builders]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; known: {sorted(builders)}")
    rows = []
    for name in names:
        t = time.perf_counter()
        model = builders[name]()
        rows += run_model(name, model, strategies, runner, seed)
        if progress:
            progress(name, rows[-len(strategies):], time.perf_counter() - t)
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="models (zoo ones as zoo/<name>)")
    ap.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    ap.add_argument("--runner", choices=("auto", "sim", "reference"), default="auto")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="PATH", help="write rows as JSON ('-' for stdout)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    runner = runner_kind(args.runner)

    def progress(name, rows, seconds):
        print(f"{name}: " + ", ".join(f"{r.strategy}={r.status}" for r in rows) + f" ({seconds:.1f} s)",
              file=sys.stderr)

    rows = run(args.only, args.strategies, runner, args.seed, progress)
    if args.json:
        data = json.dumps({"runner": runner, "rows": [asdict(r) for r in rows]}, indent=1)
        if args.json == "-":
            print(data)
        else:
            with open(args.json, "w") as f:
                f.write(data + "\n")
    if args.json != "-":
        print(markdown(rows, runner))
    return 0 if all(r.status == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
