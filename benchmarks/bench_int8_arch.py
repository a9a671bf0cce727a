"""QDQ imports of exporter-style architectures: each builder of ``onnx_mrvl/testing/arch_detect_classify.py``
and ``arch_ocr_audio.py`` quantized by onnxruntime's ``quantize_static`` (QDQ, per-channel int8
weights, S8 or U8 activations, 4 calibration samples), converted, and compared with onnxruntime's
execution of the same QDQ model on 3 inputs.

    python benchmarks/bench_int8_arch.py [MODEL ...] [--acts s8 u8] [--why] [--recurrent]

Also the onnx wheel's zoo architectures not in bench_int8_qdq.py (``zoo_inception_v1``,
``zoo_shufflenet``, ``zoo_squeezenet``; ``zoo_bvlc_alexnet``, ``zoo_zfnet512``, ``zoo_vgg19`` when named),
seeded weights, 224 x 224.

Prints a markdown table: regions, ops left on the CPU by type, layers by precision, the share of
output elements identical to onnxruntime's, the largest difference in output quantization steps
and max|err| / max|ref|. ``--why`` adds, per model, the reasons of the CPU ops and of the layers
that are not int8 (fp16; int8-out: fp32 math writing int8 codes). ``--recurrent`` quantizes LSTM /
GRU / RNN too (onnxruntime's default op types leave them float: they are fp16 layers then; named,
they get int8 W / R and become int8 recurrent layers, fuse/qdq_recurrent.py).
Models of opset < 13 are converted to opset 13 first (onnx.version_converter), as onnxruntime's
quantizer asks: its per-channel Q/DQ in an opset 11/12 model is invalid (onnxruntime cannot load it).
"""
from __future__ import annotations

import argparse
import collections
import logging
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


ZOO_DEFAULT = ("inception_v1", "shufflenet", "squeezenet")   # the onnx wheel's, beside int8_zoo's five
ZOO_LARGE = ("bvlc_alexnet", "zfnet512", "vgg19")            # on request (quantizing them takes minutes)


def builders(large: bool = False):
    import functools
    from onnx_mrvl.testing import arch_detect_classify, arch_ocr_audio, int8_zoo
    out = dict(arch_detect_classify.ALL)
    out.update(arch_ocr_audio.all_models())
    for name in ZOO_DEFAULT + (ZOO_LARGE if large else ()):
        out[f"zoo_{name}"] = functools.partial(int8_zoo.float_model, name, 224)
    return out


def reasons(result) -> list:
    """(count, op type, placement or precision, reason) of the CPU ops and fp16 layers."""
    c = collections.Counter()
    for d in result.report.decisions.values():
        if d.placement == "cpu" or (d.placement == "accelerator" and d.precision not in ("int8", None)):
            c[(d.op_type, d.placement if d.placement == "cpu" else d.precision, (d.reason or "")[:160])] += 1
    return [(n, *k) for k, n in c.most_common()]


def measure(name: str, folder: str, act: str, recurrent: bool = False) -> dict:
    import onnx
    import onnx.version_converter
    from onnx_mrvl.testing import int8_zoo, qdq_variants
    model = builders(large=True)[name]()
    if next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) < 13:
        model = onnx.version_converter.convert_version(model, 13)
    src, dst = os.path.join(folder, f"{name}.onnx"), os.path.join(folder, f"{name}_{act}.onnx")
    onnx.save(model, src)
    int8_zoo.quantize_static_qdq(src, dst, [qdq_variants.feeds_for(model, k) for k in range(4)], act=act,
                                 recurrent=recurrent)
    q = onnx.load(dst)
    r = qdq_variants.convert_and_compare(f"{name}_{act}", folder, model=q)
    res = r.pop("result")
    prec = collections.Counter(d.precision for d in res.report.decisions.values()
                               if d.placement == "accelerator" and d.precision)
    return dict(r, precision=dict(prec), why=reasons(res))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=None)
    ap.add_argument("--acts", nargs="+", default=["s8", "u8"], choices=["s8", "u8"])
    ap.add_argument("--why", action="store_true", help="list the reasons of CPU ops and fp16 layers")
    ap.add_argument("--recurrent", action="store_true",
                    help="quantize LSTM / GRU / RNN too (op_types_to_quantize: the QDQ defaults + LSTM, GRU, RNN)")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    names = args.models or list(builders())
    print("| model | act | regions | CPU ops | int8 / int8-out / fp16 layers | identical | max steps | max err / max ref |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    notes = []
    with tempfile.TemporaryDirectory(prefix="bench_int8_arch-") as d:
        for name in names:
            for act in args.acts:
                try:
                    m = measure(name, d, act, args.recurrent)
                except Exception as exc:   # noqa: BLE001 - a failing model is a row, not the end of the table
                    print(f"| {name} | {act} | {type(exc).__name__}: {str(exc)[:160]} | | | | | |", flush=True)
                    continue
                cpu = ", ".join(f"{k} {v}" for k, v in sorted(m["cpu"].items())) or "none"
                p = m["precision"]
                print(f"| {name} | {act} | {m['regions']} | {cpu} | {p.get('int8', 0)} / {p.get('fp32, int8 out', 0)} / {p.get('fp16', 0)} "
                      f"| {m['identical']:.2%} | {m['steps']:g} | {m['rel']:.2e} |", flush=True)
                if args.why and act == args.acts[0]:
                    notes += [f"- {name}: {n} x {op} ({where}): {why}" for n, op, where, why in m["why"]]
    if notes:
        print("\n" + "\n".join(notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
