"""Empirical bias correction of a QDQ model (Nagel et al. 2019, "Data-Free Quantization", section
4.2, empirical variant; AIMET's / SNPE's bias correction, TIDL's bias calibration).

Rounding the weights and the activations shifts the mean of a layer's output: per output channel
``E[y_q] - E[y]`` is not zero (a per-channel weight error times the mean of a non-negative input,
the asymmetric clipping of a calibrated range). Layer by layer in topological order, the
calibration samples run through the float model and through onnxruntime's run of the QDQ model
(which our int8 layers reproduce bit-exactly); each int8 Conv / Gemm gets the per-channel mean of
``y_float - y_qdq`` (its output before the activation and the output quantization) added to its
bias, stored as the int32 bias the QDQ model holds (scale ``s_in * s_w``, round half to even).
Sequential: a layer is measured on the model in which every layer before it is already corrected.
Layers with no path between them (the same depth in layers) are measured in one run. The QDQ
model runs without onnxruntime's graph optimizations (its ONNX semantics: DQ -> float layer -> Q;
the fused QLinearConv that our import reproduces differs from it only where a value lies next to a
rounding tie), so a layer computes the same whichever outputs a run fetches.

Checked: after the correction each layer's mean error is re-measured (in the next depth's run,
which computes it anyway, or one last run) and must be within half an int32 bias step of zero,
the shift being linear in the bias; otherwise a ``ModelError``. Nothing else of the model changes:
the int32 bias values (a layer without a bias gets one, with the scale the import requires).
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from .. import file_weights
from ..errors import ModelError

LAYERS = ("Conv", "Gemm")


class _Layer:
    def __init__(self, node: onnx.NodeProto, float_out: str, bias: str, scale: np.ndarray, ints: np.ndarray):
        self.node, self.float_out, self.bias, self.scale, self.ints = node, float_out, bias, scale, ints
        self.level = 0


def _consts(model: onnx.ModelProto) -> Dict[str, onnx.TensorProto]:
    return {t.name: t for t in model.graph.initializer}


def _layers(pre: onnx.ModelProto, qdq: onnx.ModelProto) -> List[_Layer]:
    """The int8 Conv / Gemm of ``qdq`` (activation DQ -> layer <- 8-bit weight DQ, per output channel)
    that ``pre`` has under the same name; a layer without a bias gets an int32 zero bias (DQ with
    scale ``s_in * s_w``, as onnxruntime writes it)."""
    inits = _consts(qdq)
    producer = {o: n for n in qdq.graph.node for o in n.output}
    readers: Dict[str, int] = {}
    for n in qdq.graph.node:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    fnodes = {n.name: n for n in pre.graph.node}
    out = []
    for n in list(qdq.graph.node):
        f = fnodes.get(n.name)
        if n.op_type not in LAYERS or f is None or f.op_type != n.op_type or len(n.input) < 2:
            continue
        if n.op_type == "Gemm" and (any(a.name == "transA" and a.i for a in n.attribute)
                                    or any(a.name == "beta" and a.f != 1.0 for a in n.attribute)):
            continue   # the bias enters as beta * C: only beta = 1 is shifted by what we add
        dq_x, dq_w = producer.get(n.input[0]), producer.get(n.input[1])
        if dq_x is None or dq_x.op_type != "DequantizeLinear" or dq_x.input[0] in inits or len(dq_x.input) < 2 \
                or dq_x.input[1] not in inits:
            continue
        if dq_w is None or dq_w.op_type != "DequantizeLinear" or dq_w.input[0] not in inits:
            continue
        w = numpy_helper.to_array(inits[dq_w.input[0]])
        s_w = numpy_helper.to_array(inits[dq_w.input[1]]).astype(np.float32).reshape(-1)
        s_x = numpy_helper.to_array(inits[dq_x.input[1]]).astype(np.float32).reshape(-1)
        if w.dtype not in (np.int8, np.uint8) or s_x.size != 1:   # uint8: weight_bits=8 (zero point 128)
            continue
        transb = any(a.name == "transB" and a.i for a in n.attribute)
        channels = w.shape[0] if n.op_type == "Conv" or transb else w.shape[1]
        if s_w.size == 1:
            s_w = np.full(channels, s_w[0], np.float32)
        if s_w.size != channels:
            continue
        if len(n.input) > 2 and n.input[2]:
            dq_b = producer.get(n.input[2])
            if dq_b is None or dq_b.op_type != "DequantizeLinear" or dq_b.input[0] not in inits \
                    or readers.get(n.input[2], 0) != 1 or readers.get(dq_b.input[0], 0) != 1:
                continue
            ints = numpy_helper.to_array(inits[dq_b.input[0]])
            scale = numpy_helper.to_array(inits[dq_b.input[1]]).astype(np.float32).reshape(-1)
            if ints.dtype != np.int32 or ints.size != channels or scale.size not in (1, channels):
                continue
            out.append(_Layer(n, f.output[0], dq_b.input[0], np.broadcast_to(scale, (channels,)).copy(),
                              ints.reshape(-1).copy()))
        else:
            name = f"{n.name}.bias_corrected"
            scale = (s_x[0] * s_w).astype(np.float32)
            qdq.graph.initializer.extend([
                numpy_helper.from_array(np.zeros(channels, np.int32), name + "_quantized"),
                numpy_helper.from_array(scale, name + "_quantized_scale"),
                numpy_helper.from_array(np.zeros(channels, np.int32), name + "_quantized_zero_point")])
            dq = onnx.helper.make_node("DequantizeLinear", [name + "_quantized", name + "_quantized_scale",
                                                            name + "_quantized_zero_point"], [name],
                                       name=name + "_DequantizeLinear", axis=0)
            qdq.graph.node.insert(list(qdq.graph.node).index(n), dq)
            if len(n.input) == 2:
                n.input.append(name)
            else:
                n.input[2] = name
            out.append(_Layer(n, f.output[0], name + "_quantized", scale, np.zeros(channels, np.int32)))
    return out


def _write(tensor: onnx.TensorProto, codes: np.ndarray) -> None:
    """The int32 bias initializer ``tensor`` now holds ``codes``."""
    tensor.CopyFrom(numpy_helper.from_array(codes.astype(np.int32), tensor.name))


def _levels(qdq: onnx.ModelProto, layers: List[_Layer]) -> int:
    """Each layer's depth in layers (1 + the deepest layer it depends on); returns the deepest."""
    by_name = {l.node.name: l for l in layers}
    depth: Dict[str, int] = {}
    for n in qdq.graph.node:          # ONNX graphs are topologically sorted
        d = max((depth.get(i, 0) for i in n.input), default=0)
        if n.name in by_name:
            d += 1
            by_name[n.name].level = d
        for o in n.output:
            depth[o] = d
    return max((l.level for l in layers), default=0)


def _with_outputs(model: onnx.ModelProto, names: Sequence[str]) -> bytes:
    """``model`` computing only ``names`` (as its outputs): the nodes they need, nothing after."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    producer = {o: n for n in m.graph.node for o in n.output}
    need, todo = set(), list(names)
    keep = set()
    while todo:
        t = todo.pop()
        if t in need:
            continue
        need.add(t)
        p = producer.get(t)
        if p is not None and id(p) not in keep:
            keep.add(id(p))
            todo.extend(i for i in p.input if i)
    nodes = [n for n in m.graph.node if id(n) in keep]
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    del m.graph.output[:]
    m.graph.output.extend(onnx.helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None) for t in names)
    used = {i for n in nodes for i in n.input}
    kept = [t for t in m.graph.initializer if t.name in used]
    del m.graph.initializer[:]
    m.graph.initializer.extend(kept)
    return file_weights.serialized(m)


def _channel_means(model_bytes: bytes, names: Sequence[str], samples, exact: bool = False) -> Dict[str, np.ndarray]:
    """Per-channel (axis 1) means and mean magnitudes (``[2, channels]``) of the tensors ``names``
    over ``samples`` (float64); ``exact``:
    onnxruntime without graph optimizations (the QDQ model's ONNX semantics, every layer in the
    same float form whichever outputs are fetched)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if exact:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in sess.get_inputs()}
    sums: Dict[str, np.ndarray] = {}
    for feed in samples:
        for name, v in zip(names, sess.run(list(names), {k: x for k, x in feed.items() if k in wanted})):
            v = np.asarray(v, np.float64)
            if v.ndim < 2:
                raise ModelError(f"bias correction: '{name}' has rank {v.ndim}, no channel axis")
            v = v.swapaxes(0, 1).reshape(v.shape[1], -1)
            sums[name] = sums.get(name, 0) + np.stack([v.mean(axis=1), np.abs(v).mean(axis=1)])
    return {k: v / len(samples) for k, v in sums.items()}


def correct_biases(pre: onnx.ModelProto, qdq: onnx.ModelProto, samples: List[Dict[str, np.ndarray]]) -> dict:
    """Correct the int32 biases of ``qdq``'s int8 Conv / Gemm in place (module docstring) with the
    float model ``pre`` and the calibration ``samples``; returns what it did: ``layers`` corrected,
    ``runs`` of the QDQ model, the mean |per-channel mean error| relative to each layer's mean output
    magnitude before and after (``mean_error_before`` / ``after``) and the largest shift in bias steps."""
    layers = _layers(pre, qdq)
    if not layers or not samples:
        return {"layers": 0, "runs": 0}
    depth = _levels(qdq, layers)
    ref = _channel_means(_with_outputs(pre, sorted({l.float_out for l in layers})), sorted({l.float_out for l in layers}),
                         samples)
    inits = _consts(qdq)
    mag = {}
    before, after, shift, runs = [], [], 0.0, 0
    pending: List[_Layer] = []
    for level in range(1, depth + 2):
        now = [l for l in layers if l.level == level]
        if not now and not pending:
            continue
        names = [l.node.output[0] for l in now + pending]
        got = _channel_means(_with_outputs(qdq, names), names, samples, exact=True)
        runs += 1
        for l in pending:          # the previous depth after its correction: linear in the bias
            err = ref[l.float_out][0] - got[l.node.output[0]][0]
            # half a bias step, and the fp32 rounding of the sum the bias enters (relative to the values)
            tol = 0.5 * l.scale.astype(np.float64) * 1.001 + 1e-5 * ref[l.float_out][1]
            if np.any(np.abs(err) > tol) and not np.any(np.abs(l.ints) == np.iinfo(np.int32).max):
                c = int(np.argmax(np.abs(err) - tol))
                raise ModelError(f"bias correction of '{l.node.name}': channel {c} still has mean error {err[c]:.3g} "
                                 f"(> half a bias step {0.5 * l.scale[c]:.3g}) after the correction",
                                 hint="quantize without it (quantize_options={'bias_correction': False})")
            after.append(float(np.mean(np.abs(err))) / mag[l.node.name])
        for l in now:
            err = ref[l.float_out][0] - got[l.node.output[0]][0]
            mag[l.node.name] = max(float(np.mean(ref[l.float_out][1])), 1e-30)
            before.append(float(np.mean(np.abs(err))) / mag[l.node.name])
            steps = np.rint(err / l.scale.astype(np.float64))
            shift = max(shift, float(np.max(np.abs(steps))))
            new = np.clip(l.ints.astype(np.float64) + steps, -2 ** 31 + 1, 2 ** 31 - 1).astype(np.int32)
            l.ints = new
            _write(inits[l.bias], new)
        pending = now
    return {"layers": len(layers), "runs": runs,
            "mean_error_before": float(np.mean(before)), "mean_error_after": float(np.mean(after)),
            "max_shift_steps": shift}
