"""The recurrent node of a QDQ model alone: the fp16 layer on the dequantized W / R (before) against
the int8 recurrent layer (docs/fusion.md "int8 recurrent layers"), both on the input X onnxruntime's
run of the QDQ model gives the node, against that node's output in the same run and in the fp32
model's run.

    python benchmarks/bench_recurrent_qdq_layer.py [MODEL ...] [--acts s8 u8] [--inputs N]

Models: crnn_ocr, audio_gru (``arch_ocr_audio.py``) quantized as ``bench_int8_arch.py --recurrent``
does (onnxruntime's ``quantize_static`` QDQ, LSTM / GRU in ``op_types_to_quantize``, 4 calibration
inputs). ``max|y - ref| / max|ref|`` of Y (float, before its Q -> DQ), the worst of the inputs.
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


def run(name: str, act: str, n_inputs: int):
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper
    from onnx_mrvl.sim import recurrent as R
    from onnx_mrvl.sim.recurrent_int8 import Int8Recurrent
    from onnx_mrvl.testing import arch_ocr_audio, int8_zoo, qdq_variants
    fm = arch_ocr_audio.all_models()[name]()
    with tempfile.TemporaryDirectory(prefix="bench_rqdq_") as tmp:
        src, dst = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save(fm, src)
        int8_zoo.quantize_static_qdq(src, dst, [qdq_variants.feeds_for(fm, k) for k in range(4)], act=act,
                                     recurrent=True)
        q = onnx.load(dst)
    node = next(n for n in q.graph.node if n.op_type in ("LSTM", "GRU", "RNN"))
    fnode = next(n for n in fm.graph.node if n.op_type == node.op_type)
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    prod = {o: n for n in q.graph.node for o in n.output}

    def dq(t):
        p = prod[t]
        z = inits[p.input[2]] if len(p.input) > 2 and p.input[2] else np.zeros((), np.int8)
        return inits.get(p.input[0]), inits[p.input[1]], z

    _, sx, zx = dq(node.input[0])
    cell, kw_attrs = node.op_type, {a.name: helper.get_attribute_value(a) for a in node.attribute}
    weights = {}
    for role, k in (("W", 1), ("R", 2)):
        c, s, z = dq(node.input[k])
        if c.dtype == np.uint8:   # as fuse/qdq_recurrent.py: int8 codes q - 128, zero point z - 128
            c, z = (c.astype(np.int32) - 128).astype(np.int8), np.asarray(z).astype(np.int32) - 128
        weights[role] = (c, np.asarray(s, np.float32), np.asarray(z).astype(np.int32))
    bq, bs, bz = dq(node.input[3])
    b = ((bq.astype(np.int32) - bz.astype(np.int32)) * bs).astype(np.float32)
    d = weights["W"][0].shape[0]
    n_acts = {"LSTM": 3, "GRU": 2, "RNN": 1}[cell]
    acts = R.activation_fns(["sigmoid", "tanh", "tanh"][:n_acts] * d if cell != "RNN" else ["tanh"] * d,
                            [0.0] * n_acts * d, [0.0] * n_acts * d)
    kw = dict(bias=b, direction="bidirectional" if d == 2 else "forward", activations=acts,
              linear_before_reset=int(kw_attrs.get("linear_before_reset", 0)))
    f16 = lambda a: a.astype(np.float16).astype(np.float32)   # noqa: E731
    deq = {r: f16(((c.astype(np.int32) - z) * s).astype(np.float32)) for r, (c, s, z) in weights.items()}
    fp16 = R.Recurrent(cell, deq["W"], deq["R"], **kw)
    int8 = Int8Recurrent(cell, weights["W"][0], weights["R"][0], np.broadcast_to(weights["W"][1], (1,)),
                         np.broadcast_to(weights["R"][1], (1,)),
                         (float(sx), int(zx), "uint8" if np.asarray(zx).dtype == np.uint8 else "int8"),
                         kernel_zero_point=weights["W"][2], recurrence_zero_point=weights["R"][2], **kw)

    def session(model, outs):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        for o in outs:
            m.graph.output.append(helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None))
        return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    sq, sf = session(q, [node.input[0], node.output[0]]), session(fm, [fnode.output[0]])
    err = {"fp16": [0.0, 0.0], "int8": [0.0, 0.0]}
    for k in range(n_inputs):
        f = qdq_variants.feeds_for(q, 10 + k)
        o = sq.run(None, f)
        x, yq, yf = o[-2], o[-1], sf.run(None, f)[-1]
        for key, layer in (("fp16", fp16), ("int8", int8)):
            y = layer.apply(f16(x))[0]
            err[key][0] = max(err[key][0], float(np.abs(y - yq).max() / np.abs(yq).max()))
            err[key][1] = max(err[key][1], float(np.abs(y - yf).max() / np.abs(yf).max()))
    return err


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=None)
    ap.add_argument("--acts", nargs="+", default=["s8", "u8"], choices=["s8", "u8"])
    ap.add_argument("--inputs", type=int, default=3)
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    print("| model | act | fp16 layer, dequantized W / R: vs onnxruntime QDQ / vs fp32 | int8 recurrent layer: vs "
          "onnxruntime QDQ / vs fp32 |")
    print("| --- | --- | --- | --- |")
    for name in args.models or ["crnn_ocr", "audio_gru"]:
        for act in args.acts:
            e = run(name, act, args.inputs)
            print(f"| {name} | {act} | {e['fp16'][0]:.2e} / {e['fp16'][1]:.2e} | {e['int8'][0]:.2e} / "
                  f"{e['int8'][1]:.2e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
