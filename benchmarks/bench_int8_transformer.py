"""QDQ transformers and recurrent models (onnxruntime's quantize_static, QDQ, per-channel int8
weights): regions, CPU ops left by type, and agreement with onnxruntime's execution of the same
QDQ model (max|err| / max|ref|, identical-element share, max error in output quantization steps).

    python benchmarks/bench_int8_transformer.py [--act s8 u8] [--variant default symmetric const_b_only] [MODEL ...]

Models: onnx_mrvl/testing/qdq_transformers.py MODELS (small sizes: T 12-17, D 32). Prints a markdown table.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(argv=None) -> int:
    from onnx_mrvl.testing.qdq_transformers import MODELS, VARIANTS, convert_and_measure
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=list(MODELS))
    ap.add_argument("--act", nargs="+", default=["s8", "u8"], choices=["s8", "u8"])
    ap.add_argument("--variant", nargs="+", default=["default"], choices=list(VARIANTS))
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    print("| model | act | extra_options | regions | CPU ops | output: max err / max ref, identical, steps |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory(prefix="bench_int8_transformer-") as d:
        for name in args.models:
            for variant in args.variant:
                for act in args.act:
                    m = convert_and_measure(name, d, act, variant)
                    cpu = ", ".join(f"{k} {v}" for k, v in sorted(m["cpu"].items())) or "none"
                    agree = "; ".join(f"{o}: {a['rel']:.2e}, {a['identical']:.1%}"
                                      + (f", {a['steps']:.0f} steps" if a["steps"] is not None else "")
                                      for o, a in m["agreement"].items())
                    print(f"| {name} | {act} | {variant} | {m['regions']} | {cpu} | {agree} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
