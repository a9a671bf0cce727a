"""DynamicQuantizeLSTM (onnxruntime's ``quantize_dynamic`` of an LSTM) converted with calibration:
the fp16 LSTM with dequantized weights (the default) against the int8 recurrent layer
(``quantize_options={"recurrent": "int8"}``), each against onnxruntime's run of the dynamic model and
against the fp32 model (docs/quantize.md "Dynamic int8 models").

    python benchmarks/bench_dynamic_lstm.py [MODEL ...] [--calibration N] [--held-out N] [--per-channel]

Models: LSTMs of ``onnx_mrvl/testing/recurrent_models.py`` (one layer forward / reverse /
bidirectional with a MatMul head, stacked BiLSTM, keras_lstm_tf2onnx) and crnn_ocr
(``arch_ocr_audio.py``), seeded weights, ``quantize_dynamic`` QInt8 weights (per tensor, or per
channel with ``--per-channel``). Inputs standard normal, seeded (calibration 1000+, held-out 2000+).
Errors are ``max|y - ref| / max|ref|``, the worst over the held-out inputs.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def builders():
    from onnx_mrvl.testing import arch_ocr_audio, recurrent_models as rm
    return {
        "lstm_forward": lambda: rm.cell_model("LSTM", steps=16, feat=16, hid=20, seed=0, head=True),
        "lstm_reverse": lambda: rm.cell_model("LSTM", steps=16, feat=16, hid=20, seed=2, head=True, direction="reverse"),
        "lstm_bidirectional": lambda: rm.cell_model("LSTM", steps=16, feat=16, hid=20, seed=1, head=True,
                                                    direction="bidirectional"),
        "lstm_long_t64": lambda: rm.cell_model("LSTM", steps=64, feat=32, hid=48, seed=3, head=True),
        "stacked_bilstm": lambda: rm.stacked_bilstm(seed=0),
        "keras_lstm_tf2onnx": lambda: rm.keras_lstm_tf2onnx(seed=0),
        "crnn_ocr": arch_ocr_audio.crnn_ocr,
    }


def feeds(model, seed: int):
    import numpy as np
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input if i.name not in inits}


def run(name: str, n_calib: int, n_held: int, per_channel: bool) -> dict:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic
    import onnx_mrvl
    with tempfile.TemporaryDirectory(prefix="bench_dynlstm_") as tmp:
        src, dyn = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "dynamic.onnx")
        model = builders()[name]()
        onnx.save(model, src)
        quantize_dynamic(src, dyn, weight_type=QuantType.QInt8, per_channel=per_channel)
        calib = [feeds(model, 1000 + i) for i in range(n_calib)]
        held = [feeds(model, 2000 + i) for i in range(n_held)]
        ref_dyn = ort.InferenceSession(dyn, providers=["CPUExecutionProvider"])
        ref_f32 = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
        row = {"lstms": sum(n.op_type == "DynamicQuantizeLSTM" for n in onnx.load(dyn).graph.node)}
        runs = {"plain": dict(), "fp16": dict(calibration=calib),
                "int8": dict(calibration=calib, quantize_options={"recurrent": "int8"})}
        for key, kw in runs.items():
            r = onnx_mrvl.convert(dyn, **kw)
            d = os.path.join(tmp, key)
            r.save(d, overwrite=True)
            sess = onnx_mrvl.InferenceSession(os.path.join(d, "model.onnx"))
            e_dyn = e_f32 = 0.0
            for f in held:
                y = sess.run(None, f)[0]
                yd, yf = ref_dyn.run(None, f)[0], ref_f32.run(None, f)[0]
                e_dyn = max(e_dyn, float(np.abs(y - yd).max() / np.abs(yd).max()))
                e_f32 = max(e_f32, float(np.abs(y - yf).max() / np.abs(yf).max()))
            prec = [x["precision"] for x in r.report.quantization.get("layers", []) if x["op_type"] == "DynamicQuantizeLSTM"]
            row[key] = dict(dyn=e_dyn, f32=e_f32, regions=len(r.subgraphs), precision=prec,
                            cycles=r.perf.cycles if getattr(r, "perf", None) is not None else None)
        e = 0.0
        for f in held:
            yd, yf = ref_dyn.run(None, f)[0], ref_f32.run(None, f)[0]
            e = max(e, float(np.abs(yd - yf).max() / np.abs(yf).max()))
        row["dyn_vs_f32"] = e
        return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*")
    ap.add_argument("--calibration", type=int, default=32)
    ap.add_argument("--held-out", type=int, default=10)
    ap.add_argument("--per-channel", action="store_true")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    names = args.models or list(builders())
    print("| model | LSTMs | fp16 layer (default) vs dynamic / vs fp32 | int8 recurrent vs dynamic / vs fp32 "
          "| no calibration vs dynamic / vs fp32 | onnxruntime dynamic vs fp32 | regions (fp16 / int8) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in names:
        try:
            r = run(name, args.calibration, args.held_out, args.per_channel)
        except Exception as exc:   # noqa: BLE001 - a failing model is a row
            print(f"| {name} | {type(exc).__name__}: {str(exc)[:160]} | | | | | |", flush=True)
            continue
        f, i, p = r["fp16"], r["int8"], r["plain"]
        print(f"| {name} | {r['lstms']} | {f['dyn']:.2e} / {f['f32']:.2e} | {i['dyn']:.2e} / {i['f32']:.2e} "
              f"| {p['dyn']:.2e} / {p['f32']:.2e} | {r['dyn_vs_f32']:.2e} | {f['regions']} / {i['regions']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
