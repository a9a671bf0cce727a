"""Convert benchmark: seconds per ``convert()`` stage, ``save()``, and peak memory, per zoo model.

    python benchmarks/bench_convert.py [MODEL ...] [--clock cpu|wall] [--save] [--profile DIR]

MODEL: zoo architectures (onnx_mrvl/testing/randomize_weights.py ZOO names, seeded random weights); default
vgg19, zfnet512, bvlc_alexnet, resnet50. Each model runs in its own subprocess so peak RSS
(``ru_maxrss``) belongs to that model alone; the model is written to a temporary .onnx first so
load + validate is part of the measurement. Stage times are ``ConvertResult.timings`` measured
with ``--clock`` (``cpu`` = ``time.process_time``, the default: the machine may be shared).
``--save`` also times ``ConvertResult.save()`` and prints a sha256 over the saved region files
(compare two runs to check that artifacts are byte-identical; model.onnx, report.json and
manifest.json are left out: they record the source model's path, a new temporary file per run). Prints a markdown table.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = ("vgg19", "zfnet512", "bvlc_alexnet", "resnet50")
STAGES = ("load+validate", "legalize", "fuse", "split", "emit", "compile")


def _tree_digest(folder: str) -> str:
    h = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        if not name.endswith((".bin", "-nodes.json", "-consts.json")):
            continue
        h.update(name.encode() + b"\0")
        with open(os.path.join(folder, name), "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()


def run_one(name: str, clock: str, save: bool, profile: str = None) -> dict:
    """Convert one zoo model in this process; returns the row as a dict."""
    sys.path.insert(0, ROOT)
    import onnx
    from onnx_mrvl import pipeline
    from onnx_mrvl.testing.randomize_weights import load_zoo
    if clock == "cpu":
        pipeline.CLOCK = time.process_time
    model = load_zoo(name, seed=0)
    row = {"model": name, "weights_mb": sum(len(t.raw_data) for t in model.graph.initializer) / 1e6}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{name}.onnx")
        onnx.save(model, path)
        del model
        clk = time.process_time if clock == "cpu" else time.perf_counter
        prof = None
        if profile:
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        t = clk()
        result = pipeline.convert(path)
        row["convert"] = clk() - t
        row["timings"] = dict(result.timings)
        row["regions"] = len(result.subgraphs)
        if save:
            out = os.path.join(tmp, "out")
            t = clk()
            result.save(out)
            row["save"] = clk() - t
            row["digest"] = _tree_digest(out)
        if prof is not None:
            prof.disable()
            os.makedirs(profile, exist_ok=True)
            prof.dump_stats(os.path.join(profile, f"{name}.prof"))
    row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def markdown(rows, clock: str, save: bool) -> str:
    unit = "CPU s" if clock == "cpu" else "wall s"
    head = ["model", "weights MB"] + [f"{s} {unit}" for s in STAGES] + [f"total {unit}"]
    head += ([f"save {unit}"] if save else []) + ["peak RSS MB"]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | error: {r['error']} |" + " |" * (len(head) - 2))
            continue
        t = r["timings"]
        cells = [r["model"], f"{r['weights_mb']:.0f}"] + [f"{t.get(s, 0.0):.2f}" for s in STAGES]
        cells.append(f"{t.get('total', r['convert']):.2f}")
        if save:
            cells.append(f"{r['save']:.2f}")
        cells.append(f"{r['peak_rss_mb']:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(DEFAULT))
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--save", action="store_true", help="also time save() and print a digest of the files")
    ap.add_argument("--profile", metavar="DIR", help="write a cProfile <model>.prof per model into DIR")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # child mode: one model, JSON row on stdout
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one, args.clock, args.save, args.profile)))
        return 0
    rows = []
    for name in args.models:
        cmd = [sys.executable, os.path.abspath(__file__), "--one", name, "--clock", args.clock]
        cmd += (["--save"] if args.save else []) + (["--profile", args.profile] if args.profile else [])
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            rows.append({"model": name, "error": (proc.stderr.strip().splitlines() or ["?"])[-1][:120]})
        else:
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"{name}: done", file=sys.stderr)
    print(markdown(rows, args.clock, args.save))
    if args.save:
        print()
        for r in rows:
            if "digest" in r:
                print(f"- {r['model']}: artifacts sha256 {r['digest']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
