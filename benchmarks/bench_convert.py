"""Convert benchmark: seconds per ``convert()`` stage, ``save()``, and peak memory, per zoo model.

    python benchmarks/bench_convert.py [MODEL ...] [--clock cpu|wall] [--save] [--no-consts-json]
                                       [--profile DIR] [--json]

MODEL: zoo architectures (onnx_mrvl/testing/randomize_weights.py ZOO names, seeded random weights); default
vgg19, zfnet512, bvlc_alexnet, resnet50. Each model runs in its own subprocess so peak RSS
(``VmHWM`` of /proc/self/status: the high-water mark of the process's own memory, reset by exec;
``ru_maxrss`` is not: Linux carries the parent's resident size over at fork) belongs to that model alone; the parent writes the model to a temporary .onnx first
(building the seeded model is not part of the child's peak) so load + validate is part of the
measurement. ``peak_rss_mb`` is the child's peak, ``convert_rss_mb`` its peak minus its resident size
after the imports (what ``convert`` + ``save`` added). The child imports the converter's modules
before the clock starts (``import_s``: a one-time cost of the process, reported apart). Stage times are ``ConvertResult.timings`` measured
with ``--clock`` (``cpu`` = ``time.process_time``, the default: the machine may be shared).
``--save`` also times ``ConvertResult.save()`` and prints a sha256 over the saved region files
(compare two runs to check that artifacts are byte-identical; model.onnx, report.json and
manifest.json are left out: they record the source model's path, a new temporary file per run);
``--no-consts-json`` saves with ``consts_json=False``. Prints a markdown table (``--json``: the rows).
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
IMPORTS = ("onnx_mrvl.legalize", "onnx_mrvl.fuse", "onnx_mrvl.split", "onnx_mrvl.emit", "onnx_mrvl.save",
           "onnx_mrvl.artifact", "onnx_mrvl.bodies", "onnx_mrvl.cuts", "onnx.checker", "onnx.shape_inference",
           "onnx.version_converter")
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


def _peak_mb() -> float:
    """Peak resident memory of this process image (VmHWM; ru_maxrss where /proc is absent)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def write_model(name: str, path: str) -> float:
    """Write the seeded zoo model ``name`` to ``path``; returns its weight MB."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    import onnx
    from onnx_mrvl.testing.randomize_weights import load_zoo
    model = load_zoo(name, seed=0)
    onnx.save(model, path)
    return sum(len(t.raw_data) for t in model.graph.initializer) / 1e6


def run_one(name: str, path: str, clock: str, save: bool, profile: str = None, consts_json: bool = True) -> dict:
    """Convert the model file ``path`` in this process; returns the row as a dict."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    t_import = time.process_time()
    import importlib
    from onnx_mrvl import pipeline
    for module in IMPORTS:   # one-time costs of a process, not of a conversion: timed apart
        importlib.import_module(module)
    t_import = time.process_time() - t_import
    if clock == "cpu":
        pipeline.CLOCK = time.process_time
    rss0 = _rss_mb()
    row = {"model": name, "file_mb": os.path.getsize(path) / 1e6, "consts_json": consts_json, "import_s": t_import}
    with tempfile.TemporaryDirectory() as tmp:
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
            result.save(out, consts_json=consts_json)
            row["save"] = clk() - t
            row["digest"] = _tree_digest(out)
        if prof is not None:
            prof.disable()
            os.makedirs(profile, exist_ok=True)
            prof.dump_stats(os.path.join(profile, f"{name}.prof"))
    row["peak_rss_mb"] = _peak_mb()
    row["convert_rss_mb"] = row["peak_rss_mb"] - rss0
    return row


def markdown(rows, clock: str, save: bool) -> str:
    unit = "CPU s" if clock == "cpu" else "wall s"
    head = ["model", "file MB"] + [f"{s} {unit}" for s in STAGES] + [f"total {unit}"]
    head += ([f"save {unit}"] if save else []) + ["peak RSS MB", "convert+save RSS MB", "/ file size"]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | error: {r['error']} |" + " |" * (len(head) - 2))
            continue
        t = r["timings"]
        cells = [r["model"], f"{r['file_mb']:.0f}"] + [f"{t.get(s, 0.0):.2f}" for s in STAGES]
        cells.append(f"{t.get('total', r['convert']):.2f}")
        if save:
            cells.append(f"{r['save']:.2f}")
        cells += [f"{r['peak_rss_mb']:.0f}", f"{r['convert_rss_mb']:.0f}", f"{r['convert_rss_mb'] / r['file_mb']:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def measure(models, clock: str = "cpu", save: bool = True, consts_json: bool = True, profile: str = None) -> list:
    """One child process per model (see the module doc); the rows as dicts (``error`` on failure)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            path = os.path.join(tmp, f"{name}.onnx")
            weights_mb = write_model(name, path)
            cmd = [sys.executable, os.path.abspath(__file__), "--one", name, path, "--clock", clock]
            cmd += (["--save"] if save else []) + (["--profile", profile] if profile else [])
            cmd += [] if consts_json else ["--no-consts-json"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            os.unlink(path)
            if proc.returncode != 0:
                rows.append({"model": name, "error": (proc.stderr.strip().splitlines() or ["?"])[-1][:120]})
            else:
                rows.append(dict(json.loads(proc.stdout.strip().splitlines()[-1]), weights_mb=weights_mb))
            print(f"{name}: done", file=sys.stderr)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(DEFAULT))
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--save", action="store_true", help="also time save() and print a digest of the files")
    ap.add_argument("--no-consts-json", action="store_true", help="save with consts_json=False")
    ap.add_argument("--profile", metavar="DIR", help="write a cProfile <model>.prof per model into DIR")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of markdown")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # child mode: NAME PATH, JSON row on stdout
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(*args.one, args.clock, args.save, args.profile, not args.no_consts_json)))
        return 0
    rows = measure(args.models, args.clock, args.save, not args.no_consts_json, args.profile)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(markdown(rows, args.clock, args.save))
    if args.save:
        print()
        for r in rows:
            if "digest" in r:
                print(f"- {r['model']}: artifacts sha256 {r['digest']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
