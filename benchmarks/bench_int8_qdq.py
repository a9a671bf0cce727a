"""int8 QDQ zoo benchmark: the five architectures of ``onnx_mrvl/testing/int8_zoo.py`` quantized by onnxruntime
(quant_pre_process, quantize_static QDQ, per-channel int8 weights, S8S8 and U8S8), converted, and
compared with onnxruntime's own execution of the same QDQ model.

    python benchmarks/bench_int8_qdq.py [MODEL ...] [--size 224] [--acts s8 u8] [--inputs 10] [--samples 4]

Prints a markdown table: model, activation type, CPU ops left (by op type), Q/DQ on the CPU other
than at graph inputs/outputs, share of output elements identical to onnxruntime's, the largest
difference in output quantization steps, top-1 agreement (classifiers), regions, seconds.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from onnx_mrvl.testing import int8_zoo  # noqa: E402


def table(rows) -> str:
    out = ["| model | act | CPU ops left | inner Q/DQ | identical | max quanta off | top-1 | regions | convert s | sim s | ORT s |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ops = ", ".join(f"{k} {v}" for k, v in sorted(r.cpu_ops.items())) or "-"
        top1 = "-" if r.top1 is None else f"{r.top1:.0%}"
        out.append(f"| {r.model} | {r.act} | {ops} | {r.inner_qdq} | {r.identical:.4%} | {r.max_quanta:g} | {top1} "
                   f"| {r.regions} | {r.convert_s:.1f} | {r.run_s:.1f} | {r.ort_s:.1f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(int8_zoo.MODELS))
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--acts", nargs="+", default=["s8", "u8"], choices=["s8", "u8"])
    ap.add_argument("--inputs", type=int, default=10)
    ap.add_argument("--samples", type=int, default=4, help="calibration samples")
    ap.add_argument("--keep", help="folder for the models (default: a temporary one)")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_int8_") as tmp:
        base = args.keep or tmp
        for name in args.models:
            size = args.size if name != "yolo" or args.size != 224 else 256
            model = int8_zoo.float_model(name, size)
            for act in args.acts:
                d = os.path.join(base, f"{name}_{act}")
                t = time.perf_counter()
                qpath = int8_zoo.quantize(model, d, act, samples=args.samples)
                print(f"# {name} {act}: quantized in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
                try:
                    rows.append(int8_zoo.measure(name, qpath, os.path.join(d, "out"), act, args.inputs))
                except Exception as exc:   # a failing model is a row, not the end of the table
                    print(f"# {name} {act}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                    rows.append(int8_zoo.Row(name, act, cpu_ops={f"ERROR {type(exc).__name__}": 1}))
                print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
