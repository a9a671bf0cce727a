"""Quantization noise measured on the calibration data, in dB (onnxruntime's
``qdq_loss_debug.compute_signal_to_quantization_noice_ratio``: ``20 log10(|x| / |x - x_q|)`` over
all samples):

- per quantized activation tensor: the tensor of the **float** model quantized with the QDQ
  model's scale and zero point (ONNX QuantizeLinear: round half to even, saturate) against itself
  -- the noise that tensor's own quantization adds, independent of the layers before it;
- per quantized weight: the dequantized int8 weight against the float weight;
- per layer output and per model output: the QDQ model's value against the float model's
  (onnxruntime runs both), the accumulated noise of everything before it.
"""
from __future__ import annotations

import math
from typing import Dict, Iterable, List, Optional

import numpy as np
import onnx
from onnx import numpy_helper
from .. import file_weights

QRANGE = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}


def snr_db(signal: float, noise: float) -> float:
    """``10 log10(signal energy / noise energy)``; inf without noise."""
    if noise <= 0:
        return math.inf
    return 10.0 * math.log10(max(signal, np.finfo(np.float32).tiny) / noise)


class Energy:
    """Running sums of signal and noise energy per name."""

    def __init__(self):
        self.sums: Dict[str, List[float]] = {}

    def add(self, name: str, ref: np.ndarray, got: np.ndarray) -> None:
        ref64 = np.asarray(ref, np.float64)
        s = self.sums.setdefault(name, [0.0, 0.0])
        s[0] += float(np.sum(ref64 * ref64))
        s[1] += float(np.sum((ref64 - np.asarray(got, np.float64)) ** 2))

    def db(self) -> Dict[str, float]:
        return {k: snr_db(*v) for k, v in self.sums.items()}


def quantize_dequantize(x: np.ndarray, scale: float, zero_point: int, dtype) -> np.ndarray:
    """ONNX QuantizeLinear then DequantizeLinear in fp32 (round half to even, saturate)."""
    lo, hi = QRANGE[np.dtype(dtype)]
    q = np.clip(np.rint(x.astype(np.float32) / np.float32(scale)) + zero_point, lo, hi)
    return ((q - zero_point) * np.float32(scale)).astype(np.float32)


def activation_qparams(qdq: onnx.ModelProto) -> Dict[str, tuple]:
    """{float tensor name: (scale, zero point, quantized dtype, DQ output name)} of every Q of a
    non-constant tensor followed by a DQ in ``qdq``."""
    inits = {t.name: t for t in qdq.graph.initializer}
    dq_of = {n.input[0]: n.output[0] for n in qdq.graph.node if n.op_type == "DequantizeLinear"}
    out = {}
    for n in qdq.graph.node:
        if n.op_type != "QuantizeLinear" or n.input[0] in inits or len(n.input) < 3:
            continue
        if n.input[1] not in inits or n.input[2] not in inits:
            continue
        s, z = numpy_helper.to_array(inits[n.input[1]]), numpy_helper.to_array(inits[n.input[2]])
        if s.size != 1 or z.dtype not in (np.int8, np.uint8):
            continue
        out[n.input[0]] = (float(s.reshape(-1)[0]), int(z.reshape(-1)[0]), z.dtype, dq_of.get(n.output[0]))
    return out


def weight_snr(float_model: onnx.ModelProto, qdq: onnx.ModelProto) -> Dict[str, float]:
    """{node name: SNR of its dequantized 8-bit weight (input 1)} for the quantized Conv/Gemm/MatMul of ``qdq``."""
    f_inits = {t.name: t for t in float_model.graph.initializer}
    q_inits = {t.name: t for t in qdq.graph.initializer}
    f_nodes = {n.name: n for n in float_model.graph.node}
    producer = {o: n for n in qdq.graph.node for o in n.output}
    out = {}
    for n in qdq.graph.node:
        if n.op_type not in ("Conv", "Gemm", "MatMul") or len(n.input) < 2 or n.name not in f_nodes:
            continue
        dq, fn = producer.get(n.input[1]), f_nodes[n.name]
        if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in q_inits or fn.input[1] not in f_inits:
            continue
        q = numpy_helper.to_array(q_inits[dq.input[0]]).astype(np.float32)
        s = numpy_helper.to_array(q_inits[dq.input[1]]).astype(np.float32)
        z = (numpy_helper.to_array(q_inits[dq.input[2]]).astype(np.float32)
             if len(dq.input) > 2 and dq.input[2] in q_inits else np.zeros(1, np.float32))   # uint8 weights: 128
        axis = next((a.i for a in dq.attribute if a.name == "axis"), 1) % q.ndim
        s, z = ([v.reshape([-1 if i == axis else 1 for i in range(q.ndim)]) if v.size > 1 else v.reshape(())
                 for v in (s, z)])
        w = numpy_helper.to_array(f_inits[fn.input[1]]).astype(np.float32)
        e = Energy()
        e.add("w", w, (q - z) * s)
        out[n.name] = e.db()["w"]
    return out


def _with_outputs(model: onnx.ModelProto, names: Iterable[str]) -> bytes:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in names:
        if name not in have:
            m.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
            have.add(name)
    return file_weights.serialized(m)


def measure(float_model: onnx.ModelProto, qdq: onnx.ModelProto, samples: List[Dict[str, np.ndarray]],
            layer_outputs: Optional[Dict[str, str]] = None) -> dict:
    """SNRs (dB) on ``samples``: ``tensors`` {activation: own quantization}, ``weights`` {node: ...},
    ``layers`` {layer: its output in the QDQ model against the float model}, ``accumulated`` {activation:
    the same for every quantized activation}, ``outputs`` {model output: ...}.
    ``layer_outputs``: {layer name: the float tensor its quantization reads}."""
    import onnxruntime as ort
    qp = activation_qparams(qdq)
    f_names = {o for n in float_model.graph.node for o in n.output} | {i.name for i in float_model.graph.input}
    tensors = [t for t in qp if t in f_names]
    layer_outputs = {k: v for k, v in (layer_outputs or {}).items() if v in qp and qp[v][3] and v in f_names}
    carried = [t for t in tensors if qp[t][3]]
    outputs = [o.name for o in float_model.graph.output]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    inputs = {i.name for i in float_model.graph.input}
    fsess = ort.InferenceSession(_with_outputs(float_model, [t for t in tensors if t not in inputs]), so,
                                 providers=["CPUExecutionProvider"])
    qwant = sorted({qp[t][3] for t in carried})
    qsess = ort.InferenceSession(_with_outputs(qdq, qwant), so, providers=["CPUExecutionProvider"])
    fnames = [o.name for o in fsess.get_outputs()]
    qnames = [o.name for o in qsess.get_outputs()]
    own, cum, outs, acc = Energy(), Energy(), Energy(), Energy()
    for feed in samples:
        fv = dict(zip(fnames, fsess.run(None, feed)), **feed)
        qv = dict(zip(qnames, qsess.run(None, feed)))
        for t in tensors:
            s, z, dt, _ = qp[t]
            own.add(t, fv[t], quantize_dequantize(fv[t], s, z, dt))
        for layer, t in layer_outputs.items():
            cum.add(layer, fv[t], qv[qp[t][3]])
        for t in carried:
            acc.add(t, fv[t], qv[qp[t][3]])
        for o in outputs:
            outs.add(o, fv[o], qv[o])
    return {"tensors": own.db(), "weights": weight_snr(float_model, qdq), "layers": cum.db(), "outputs": outs.db(),
            "accumulated": acc.db(), "qparams": qp}
