"""Recurrent models quantized by the flow (``convert(quantize="int8", calibration=...)``): the LSTM /
GRU as the fp16 layer (default) or as an int8 recurrent layer (``quantize_options={"recurrent":
True}``), against the fp32 model and against onnxruntime's run of the QDQ model the quantize stage
wrote (docs/quantize.md, docs/fusion.md "int8 recurrent layers").

    python benchmarks/bench_int8_recurrent.py [MODEL ...] [--calibration N] [--held-out N]

Models: crnn_ocr, audio_gru (``arch_ocr_audio.py``) and recurrent models of
``recurrent_models.py`` (LSTM / GRU heads, stacked BiLSTM, conv GRUs, keras LSTM), seeded weights;
inputs standard normal (calibration seeds 1000+, held-out 2000+); ``max|y - ref| / max|ref|``, the
worst held-out input.
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
    return {"crnn_ocr": arch_ocr_audio.crnn_ocr, "audio_gru": arch_ocr_audio.audio_gru,
            "lstm_head": lambda: rm.cell_model("LSTM", steps=16, feat=16, hid=20, seed=0, head=True),
            "bigru_head": lambda: rm.cell_model("GRU", steps=16, feat=16, hid=20, seed=1, head=True,
                                                direction="bidirectional", linear_before_reset=1),
            "stacked_bilstm": lambda: rm.stacked_bilstm(seed=0),
            "conv_gru_hidden": lambda: rm.conv_gru_hidden(seed=0),
            "keras_lstm_tf2onnx": lambda: rm.keras_lstm_tf2onnx(seed=0)}


def feeds(model, seed):
    import numpy as np
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input if i.name not in inits}


def run(name: str, n_calib: int, n_held: int) -> dict:
    import numpy as np
    import onnxruntime as ort
    import onnx_mrvl
    model = builders()[name]()
    calib = [feeds(model, 1000 + i) for i in range(n_calib)]
    held = [feeds(model, 2000 + i) for i in range(n_held)]
    f32 = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    out = {}
    with tempfile.TemporaryDirectory(prefix="bench_i8rnn_") as tmp:
        for key, rec in (("fp16", False), ("int8", True)):
            r = onnx_mrvl.convert(model, quantize="int8", calibration=calib, quantize_options={"recurrent": rec})
            d = os.path.join(tmp, key)
            r.save(d, overwrite=True)
            sess = onnx_mrvl.InferenceSession(os.path.join(d, "model.onnx"))
            qdq = ort.InferenceSession(r.stages["quantize"].SerializeToString(), providers=["CPUExecutionProvider"])
            e_f, e_q = 0.0, 0.0
            for f in held:
                y, yf, yq = sess.run(None, f)[0], f32.run(None, f)[0], qdq.run(None, f)[0]
                e_f = max(e_f, float(np.abs(y - yf).max() / np.abs(yf).max()))
                e_q = max(e_q, float(np.abs(y - yq).max() / np.abs(yq).max()))
            prec = sorted({d.precision for d in r.report.decisions.values()
                           if d.op_type in ("LSTM", "GRU", "RNN") and d.placement == "accelerator"})
            e_qf = max(float(np.abs(qdq.run(None, f)[0] - f32.run(None, f)[0]).max()
                             / np.abs(f32.run(None, f)[0]).max()) for f in held)
            out[key] = dict(f32=e_f, qdq=e_q, qdq_f32=e_qf, regions=len(r.subgraphs), precision=prec)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*")
    ap.add_argument("--calibration", type=int, default=16)
    ap.add_argument("--held-out", type=int, default=5)
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    print("| model | recurrent fp16 (default): ours vs fp32 / vs its QDQ stage | recurrent int8: ours vs fp32 / vs its QDQ "
          "stage | QDQ stage vs fp32 (fp16 / int8) | regions (fp16 / int8) | recurrent layer precision (int8 run) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in args.models or list(builders()):
        try:
            r = run(name, args.calibration, args.held_out)
        except Exception as exc:   # noqa: BLE001 - a failing model is a row
            print(f"| {name} | {type(exc).__name__}: {str(exc)[:160]} | | | | |", flush=True)
            continue
        a, b = r["fp16"], r["int8"]
        print(f"| {name} | {a['f32']:.2e} / {a['qdq']:.2e} | {b['f32']:.2e} / {b['qdq']:.2e} | "
              f"{a['qdq_f32']:.2e} / {b['qdq_f32']:.2e} | {a['regions']} / {b['regions']} | "
              f"{', '.join(b['precision'])} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
