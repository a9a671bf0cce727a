"""Is a dynamic-int8 model's difference onnxruntime's U8S8 saturation or the conversion's error?

    python tools/ort_int8_saturation.py MODEL.onnx [CONVERTED.onnx] [--inputs N]

MODEL with a ``<name>_feeds.npz`` beside it (the survey tools' convention; the survey inputs:
``survey_torch_exports._feeds``, seed 2). Prints, per input:

- each ``MatMulInteger``: onnxruntime's int32 against the exact sum of its own uint8 inputs, and
  whether the difference is exactly the int16 pair clamp's deficit (``sim/mlas_u8s8.deficit``);
- each ``DynamicQuantizeLSTM`` alone on the input the model gives it: onnxruntime's output against
  its run of the node with u8-re-coded weights (the layer's own saturation share);
- per model output: ours against onnxruntime, ours against onnxruntime's run of the u8-re-coded model
  (exact sums: ``inspection/exact_int8.py``) and the two onnxruntime runs against each other.

``max|a - b| / max|b|``. Measured with it: docs/surveys/regression-sweep.md (voicefilter-mask, rawi).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (ROOT, os.path.join(ROOT, "tools")):
    if p not in sys.path:
        sys.path.insert(0, p)


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / (np.abs(b).max() or 1))


def _session(model):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _exposed(model, names_types):
    import onnx
    from onnx import helper
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.output.extend(helper.make_tensor_value_info(t, ty, None) for t, ty in names_types)
    return m


def _alone(model, node, feed):
    """``node`` as the only node of a model on ``feed`` (its non-constant inputs)."""
    import onnx
    from onnx import helper
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = [t for t in m.graph.initializer if t.name in set(node.input)]
    g = helper.make_graph([node], "alone", [helper.make_tensor_value_info(k, onnx.TensorProto.FLOAT, None)
                                            for k in feed],
                          [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in node.output], inits)
    m.graph.CopyFrom(g)
    return m


def main(argv=None) -> int:
    import onnx
    from onnx import TensorProto, numpy_helper
    import survey_torch_exports as ste
    from onnx_mrvl.inspection import exact_int8
    from onnx_mrvl.sim import mlas_u8s8

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("converted", nargs="?")
    ap.add_argument("--inputs", type=int, default=3)
    args = ap.parse_args(argv)
    model = onnx.load(args.model)
    recoded = exact_int8.u8_recoded(model)[0]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    mmis = [n for n in model.graph.node if n.op_type == "MatMulInteger" and n.input[1] in inits]
    lstms = [n for n in model.graph.node if n.op_type == "DynamicQuantizeLSTM"]
    probes = [(t, TensorProto.UINT8) for n in mmis for t in (n.input[0], n.input[2])]
    probes += [(n.output[0], TensorProto.INT32) for n in mmis]
    probes += [(t, TensorProto.FLOAT) for n in lstms for t in [n.input[0]] + list(n.input[5:7])
               if t and t not in inits and t not in {i.name for i in model.graph.input}]
    sess, exact = _session(_exposed(model, probes)), _session(recoded)
    ours = None
    if args.converted:
        import onnx_mrvl
        ours = onnx_mrvl.InferenceSession(args.converted)
    print(f"this CPU saturates U8S8 (no VNNI): {mlas_u8s8.saturates()}; saturable ops: {exact_int8.saturable(model)}")
    n_out = len(model.graph.output)
    for j, feed in enumerate(ste._feeds(args.model, args.inputs, 2)):
        got = sess.run(None, feed)
        vals = dict(zip([o.name for o in sess.get_outputs()], got))
        for n in mmis:
            x = vals[n.input[0]].reshape(-1, vals[n.input[0]].shape[-1]).astype(np.int64) - int(vals[n.input[2]])
            zw = inits[n.input[3]].astype(np.int64) if len(n.input) > 3 and n.input[3] else 0
            w = inits[n.input[1]].astype(np.int64) - zw
            acc = vals[n.output[0]].reshape(x.shape[0], -1).astype(np.int64)
            d = acc - x @ w
            clamp = mlas_u8s8.deficit(x.astype(np.float64), w.astype(np.float64), int(vals[n.input[2]]), None)
            print(f"input {j} {n.name}: int32 != exact {100 * np.mean(d != 0):.1f}%, max|ort - exact| "
                  f"{np.abs(d).max()} of max|exact| {np.abs(x @ w).max()}; == exact + int16 pair clamp: "
                  f"{np.array_equal(d, clamp)}")
        for n in lstms:
            fd = {t: vals.get(t, feed.get(t)) for t in [n.input[0]] + list(n.input[5:7]) if t and t not in inits}
            one = _alone(model, n, fd)
            a, b = _session(one).run(None, fd), _session(exact_int8.u8_recoded(one)[0]).run(None, fd)
            errs = ", ".join(f"{o} {_rel(x, y):.2e}" for o, x, y in zip(("Y", "Y_h", "Y_c"), a, b))
            print(f"input {j} {n.name} alone: {errs} (onnxruntime vs its exact sums)")
        ref = exact.run(None, feed)
        mine = ours.run(None, feed) if ours else [None] * n_out
        for o, a, e, m in zip(model.graph.output, got[:n_out], ref, mine):
            line = f"input {j} {o.name}: onnxruntime vs exact {_rel(a, e):.2e}"
            if m is not None:
                line += f"; ours vs onnxruntime {_rel(m, a):.2e}, ours vs exact {_rel(m, e):.2e}"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
