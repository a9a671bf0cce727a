"""The state of an int8 recurrent layer: fp16 or int8 (docs/fusion.md "int8 recurrent layers").

    python benchmarks/bench_recurrent_state.py [MODEL ...] [--calibration N] [--held-out N]

Each LSTM of the models below, quantized by onnxruntime's ``quantize_dynamic`` (QInt8, per tensor),
runs alone on the simulator's recurrent layers (``sim/recurrent.py``, ``sim/recurrent_int8.py``) on
the input onnxruntime's dynamic model gives it: the fp16 layer on the dequantized W / R (what the
flow does without the option), the int8 layer with an fp16 state (X quantized with the calibrated
uint8 scale of its range over the calibration samples, DynamicQuantizeLinear's formula) and the int8
layer with an int8 state (h quantized per step with the calibrated scale of Y's range). References:
the LSTM's output in onnxruntime's run of the dynamic model (its per-run x scale and per-step h
scale) and in the fp32 model. ``max|y - ref| / max|ref|``, the worst held-out input.
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
    return {"lstm_forward": lambda: rm.cell_model("LSTM", steps=16, feat=16, hid=20, seed=0),
            "lstm_bidirectional": lambda: rm.cell_model("LSTM", steps=16, feat=16, hid=20, seed=1,
                                                        direction="bidirectional"),
            "lstm_reverse": lambda: rm.cell_model("LSTM", steps=16, feat=16, hid=20, seed=2, direction="reverse"),
            "stacked_bilstm": lambda: rm.stacked_bilstm(seed=0),
            "crnn_ocr": arch_ocr_audio.crnn_ocr,
            "lstm_long_t64": lambda: rm.cell_model("LSTM", steps=64, feat=32, hid=48, seed=3)}


def feeds(model, seed):
    import numpy as np
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input if i.name not in inits}


def _session(model, nodes):
    import onnx
    import onnxruntime as ort
    from onnx import helper
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in nodes:
        for o in (n.input[0], n.output[0]):
            m.graph.output.append(helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None))
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]), len(model.graph.output)


def run(name: str, n_calib: int, n_held: int):
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnx_mrvl.quantize.dynamic_layers import qparams
    from onnx_mrvl.sim import recurrent as R
    from onnx_mrvl.sim.recurrent_int8 import Int8Recurrent
    with tempfile.TemporaryDirectory(prefix="bench_rstate_") as tmp:
        fm = builders()[name]()
        src, dst = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "d.onnx")
        onnx.save(fm, src)
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        dm = onnx.load(dst)
        inits = {t.name: numpy_helper.to_array(t) for t in dm.graph.initializer}
        lstms = [n for n in dm.graph.node if n.op_type == "DynamicQuantizeLSTM"]
        sd, nd = _session(dm, lstms)
        sf, nf = _session(fm, [n for n in fm.graph.node if n.op_type == "LSTM"])
        calib = [feeds(fm, 1000 + i) for i in range(n_calib)]
        held = [feeds(fm, 2000 + i) for i in range(n_held)]
        rows = []
        for li, n in enumerate(lstms):
            xs, ys = zip(*[(o[2 * li], o[2 * li + 1]) for o in (sd.run(None, f)[nd:] for f in calib)])
            sx, zx = qparams(min(a.min() for a in xs), max(a.max() for a in xs))
            sh, zh = qparams(min(a.min() for a in ys), max(a.max() for a in ys))
            wq = np.transpose(inits[n.input[1]], (0, 2, 1)).astype(np.int8)
            rq = np.transpose(inits[n.input[2]], (0, 2, 1)).astype(np.int8)
            d = wq.shape[0]
            ws = np.broadcast_to(inits[n.input[8]].reshape(d, -1), (d, wq.shape[1]))
            rs = np.broadcast_to(inits[n.input[10]].reshape(d, -1), (d, rq.shape[1]))
            b = inits.get(n.input[3]) if len(n.input) > 3 and n.input[3] else None
            direction = next((a.s.decode() for a in n.attribute if a.name == "direction"), "forward")
            kw = dict(bias=b, direction=direction,
                      activations=R.activation_fns(["sigmoid", "tanh", "tanh"] * d, [0.0] * 3 * d, [0.0] * 3 * d))
            f16 = lambda a: a.astype(np.float16).astype(np.float32)   # noqa: E731
            wd = f16((wq.astype(np.float32) * ws[:, :, None]).astype(np.float32))
            rd = f16((rq.astype(np.float32) * rs[:, :, None]).astype(np.float32))
            layers = {"fp16": R.Recurrent("LSTM", wd, rd, **kw),
                      "int8_h16": Int8Recurrent("LSTM", wq, rq, ws, rs, (sx, zx, "uint8"), None, **kw),
                      "int8_h8": Int8Recurrent("LSTM", wq, rq, ws, rs, (sx, zx, "uint8"), (sh, zh, "uint8"), **kw)}
            err = {k: [0.0, 0.0] for k in layers}
            for f in held:
                od, of = sd.run(None, f)[nd:], sf.run(None, f)[nf:]
                x, yd, yf = f16(od[2 * li]), od[2 * li + 1], of[2 * li + 1]
                for k, layer in layers.items():
                    y = layer.apply(x)[0]
                    err[k][0] = max(err[k][0], float(np.abs(y - yd).max() / np.abs(yd).max()))
                    err[k][1] = max(err[k][1], float(np.abs(y - yf).max() / np.abs(yf).max()))
            rows.append((f"{name}" + (f" #{li}" if len(lstms) > 1 else ""), err))
        return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*")
    ap.add_argument("--calibration", type=int, default=32)
    ap.add_argument("--held-out", type=int, default=10)
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    print("| LSTM | fp16 layer, dequantized W (before) vs onnxruntime dynamic / vs fp32 | int8, fp16 state vs dynamic "
          "/ fp32 | int8, int8 state vs dynamic / fp32 |")
    print("| --- | --- | --- | --- |")
    for name in args.models or list(builders()):
        for label, e in run(name, args.calibration, args.held_out):
            print(f"| {label} | " + " | ".join(f"{e[k][0]:.2e} / {e[k][1]:.2e}" for k in ("fp16", "int8_h16", "int8_h8"))
                  + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
