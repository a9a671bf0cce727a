"""Pre-quantized transformer and speech encoders as real pipelines export them (issue #19;
``onnx_mrvl/testing/int8_exports.py``): onnxruntime's quantize_dynamic (per tensor / per channel,
reduce_range, QInt8 / QUInt8 weights, Optimum's avx512_vnni / arm64 settings) and quantize_static QDQ
(S8, U8 with QDQKeepRemovableActivations, DedicatedQDQPair, QDQOpTypePerChannelSupportToAxis, A16W8),
of the encoders as exported and after onnxruntime's transformer optimizer, converted without and with
calibration (8 samples). Prints a markdown table.

    python benchmarks/bench_int8_exports.py [--models M ...] [--variants V ...] [--no-optimized]

Columns: regions; the nodes left on the CPU by type; accelerator node decisions by precision (int8,
int8 in / fp16 out, fp16); ``max|ours - onnxruntime| / max|onnxruntime|`` over 2 inputs against
onnxruntime's run of the quantized model, with its default graph optimizations and with them off
(the model's ONNX semantics); calibrated dynamic models also against onnxruntime's run of
the rewritten static model (``result.stages["quantize"]``), beside onnxruntime's run of that model
with only the float layers' outputs rounded to fp16 before each QuantizeLinear
(``int8_exports.fp16_before_quantize``): "within" = at most 1e-2 of max|ref| or 2x that run's error
(docs/simulator.md's fp16 bound; compare_models' whole-model fp16 baseline overflows on HF's finfo.min
mask). A failed conversion prints its error in the row.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

OPTIMIZED = ("bert_embed_slice", "whisper_encoder")          # also run after the transformer optimizer
OPTIMIZED_VARIANTS = ("dyn_s8", "optimum_avx512_vnni", "qdq_s8")


def _short(counter: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items())) or "none"


def _precisions(p: dict) -> str:
    keys = (("int8", "int8"), ("int8 in, fp16 out", "int8-in"), ("fp16", "fp16"))
    return " / ".join(f"{p.get(k, 0)} {label}" for k, label in keys)


def row(name: str, variant: str, folder: str, optimize: bool, calibration: int) -> str:
    from onnx_mrvl.testing import int8_exports as X
    tag = f"{name}{' (optimized)' if optimize else ''} | {variant} | {calibration or '-'}"
    try:
        m = X.run(name, variant, folder, optimize=optimize, calibration=calibration)
    except Exception as e:   # noqa: BLE001  (the row reports it)
        return f"| {tag} | **failed**: {type(e).__name__}: {str(e)[:160]} | | | |"
    if m["rel_static"] is None:
        static = "-"
    else:
        base = m["rel_fp16_before_q"]
        ok = m["rel_static"] <= max(1e-2, 2 * base)
        static = f"{m['rel_static']:.1e} (fp16 before Q: {base:.1e}; {'within' if ok else 'beyond'})"
    return f"| {tag} | {m['regions']} | {_short(m['cpu'])} | {_precisions(m['precisions'])} | {m['rel']:.1e} / {m['rel_plain']:.1e} | {static} |"


def main(argv=None) -> int:
    from onnx_mrvl.testing import int8_exports as X
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(X.MODELS), choices=list(X.MODELS))
    ap.add_argument("--variants", nargs="+", default=list(X.VARIANTS), choices=list(X.VARIANTS))
    ap.add_argument("--no-optimized", action="store_true", help="skip the transformer-optimizer rows")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f}")
    print("| model | variant | calibration | regions | CPU ops | decisions by precision | ours vs onnxruntime "
          "(default / optimizations off) | calibrated: ours vs static |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    runs = [(n, v, False) for n in args.models for v in args.variants]
    if not args.no_optimized:
        runs += [(n, v, True) for n in OPTIMIZED if n in args.models for v in OPTIMIZED_VARIANTS if v in args.variants]
    with tempfile.TemporaryDirectory(prefix="bench_int8_exports-") as d:
        for name, variant, optimize in runs:
            for calib in ((0, 8) if X.VARIANTS[variant][0] == "dynamic" else (0,)):
                print(row(name, variant, d, optimize, calib), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
