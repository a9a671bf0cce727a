"""Load benchmark: CPU time and peak memory of opening a converted model with
``onnx_mrvl.InferenceSession``, against onnxruntime's own session on the original model.

    python benchmarks/bench_load.py [--layers 12] [--tokens 128] [--width 768] [--heads 12]
                                    [--vocab 30522] [--repeat 2] [--json]

The model is a BERT-base-sized encoder stack (onnx_mrvl/testing/arch_transformer.encoder_stack:
seeded weights, a word-embedding Gather in front, 110 M parameters at the defaults), converted and
saved once in a temporary folder before anything is measured. Each session is then opened in a
fresh process (``--repeat`` times, alternating; the medians are printed): ``load_cpu_s`` is the
process's user + system CPU time of the session's constructor (``os.times``; the machine may be
shared, so no wall time), ``peak_rss_mb`` the process's peak resident size (``VmHWM``, reset by
exec) and ``import_rss_mb`` its resident size after the imports, before the session. Both
children also run the model once on the same seeded input; the table shows max|err| of the
converted model against onnxruntime, relative to max|ref|.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import os, sys, json
import numpy as np
import onnxruntime as ort

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024

kind, path, feed, out = sys.argv[1:5]
if kind == "mrvl":
    import onnx_mrvl
imported = status("VmRSS")
t0 = os.times()
if kind == "mrvl":
    sess = onnx_mrvl.InferenceSession(path)
else:
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
t1 = os.times()
peak = status("VmHWM")
x = np.load(feed)
y = sess.run(None, {sess.get_inputs()[0].name: x})[0]
np.save(out, y)
print(json.dumps({"load_cpu_s": (t1.user + t1.system) - (t0.user + t0.system), "peak_rss_mb": peak,
                  "import_rss_mb": imported}))
"""


def _child(kind: str, path: str, feed: str, out: str) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", CHILD, kind, path, feed, out], env=env, capture_output=True,
                       text=True)
    if r.returncode:
        raise SystemExit(f"{kind} session failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sys.path.insert(0, ROOT)
    import numpy as np
    import onnx
    import onnx_mrvl
    from onnx_mrvl.testing.arch_transformer import encoder_stack

    with tempfile.TemporaryDirectory(prefix="bench_load_") as tmp:
        model = encoder_stack(seed=0, layers=args.layers, T=args.tokens, D=args.width, H=args.heads,
                              vocab=args.vocab)
        params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
        src = os.path.join(tmp, "model.onnx")
        onnx.save(model, src)
        res = onnx_mrvl.convert(src)
        out_dir = os.path.join(tmp, "out")
        res.save(out_dir, consts_json=False)
        del model, res
        feed = os.path.join(tmp, "x.npy")
        rng = np.random.default_rng(0)
        np.save(feed, rng.integers(0, args.vocab, (1, args.tokens), dtype=np.int64) if args.vocab else
                rng.standard_normal((1, args.tokens, args.width)).astype(np.float32))
        runs = {"onnxruntime": [], "onnx_mrvl": []}
        for _ in range(args.repeat):
            runs["onnxruntime"].append(_child("ort", src, feed, os.path.join(tmp, "ref.npy")))
            runs["onnx_mrvl"].append(_child("mrvl", os.path.join(out_dir, "model.onnx"), feed,
                                            os.path.join(tmp, "got.npy")))
        ref, got = np.load(os.path.join(tmp, "ref.npy")), np.load(os.path.join(tmp, "got.npy"))
        err = float(np.max(np.abs(got.astype(np.float64) - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
    rows = [{"runtime": k, "params_m": round(params / 1e6, 1),
             **{m: round(statistics.median(r[m] for r in v), 2) for m in ("load_cpu_s", "peak_rss_mb", "import_rss_mb")}}
            for k, v in runs.items()]
    base = rows[0]
    for r in rows:
        r["cpu_x"] = round(r["load_cpu_s"] / base["load_cpu_s"], 2)
        r["rss_x"] = round(r["peak_rss_mb"] / base["peak_rss_mb"], 2)
    if args.json:
        print(json.dumps({"rows": rows, "rel_err": err}))
        return 0
    print(f"encoder stack: {args.layers} layers, T={args.tokens}, D={args.width}, vocab={args.vocab}, "
          f"{rows[0]['params_m']} M parameters; converted vs onnxruntime max|err|/max|ref| = {err:.2e}")
    print("| runtime | load CPU s | x | peak RSS MB | x | RSS after imports MB |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['runtime']} | {r['load_cpu_s']:.2f} | {r['cpu_x']:.2f} | {r['peak_rss_mb']:.0f} | "
              f"{r['rss_x']:.2f} | {r['import_rss_mb']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
