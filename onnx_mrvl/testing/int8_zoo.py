"""QDQ int8 versions of five zoo architectures and their agreement with onnxruntime.

Models (``MODELS``): ResNet-50, DenseNet-121 and Inception-v2 (BN-Inception) from the onnx wheel's
light zoo files with seeded weights (``randomize_weights.load_zoo``, upgraded to opset 13), the
project's ``mobilenetv2_like`` and ``yolo_like`` (SiLU, LeakyRelu, SPP, nearest upsample, Concat).
``float_model(name, size)`` builds one at ``size`` x ``size`` (a zoo model's fixed final
AveragePool becomes a GlobalAveragePool below 224, so the small versions keep their topology).

``quantize`` runs onnxruntime's ``quant_pre_process`` then ``quantize_static`` (QDQ, int8 weights
per channel, S8S8 or U8S8, a seeded calibration reader); ``measure`` converts the QDQ model, runs
it through ``onnx_mrvl.InferenceSession`` and onnxruntime's own execution of the same QDQ model on
seeded inputs and returns the figures of ``benchmarks/bench_int8_qdq.py``.
"""
from __future__ import annotations

import collections
import os
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np
import onnx
from onnx import helper, shape_inference, version_converter

MODELS = ("resnet50", "mobilenetv2", "yolo", "densenet121", "inception_v2")
CLASSIFIERS = ("resnet50", "mobilenetv2", "densenet121", "inception_v2")
QDQ = ("QuantizeLinear", "DequantizeLinear")


def _zoo(name: str, size: int) -> onnx.ModelProto:
    from . import randomize_weights as rw
    m = rw.load_zoo(name, 0)
    inits = {t.name for t in m.graph.initializer}
    real = [i for i in m.graph.input if i.name not in inits]
    del m.graph.input[:]
    m.graph.input.extend(real)
    m.ir_version = max(m.ir_version, 4)   # initializers need not be inputs
    m = version_converter.convert_version(m, 13)
    if size != 224:
        dims = m.graph.input[0].type.tensor_type.shape.dim
        dims[2].dim_value = dims[3].dim_value = size
        for n in m.graph.node:   # the classifier's fixed 7x7 average: a global one
            if n.op_type == "AveragePool" and list(helper.get_attribute_value(a) for a in n.attribute
                                                    if a.name == "kernel_shape") == [[7, 7]]:
                n.op_type = "GlobalAveragePool"
                del n.attribute[:]
        del m.graph.value_info[:]
        for o in m.graph.output:
            o.type.tensor_type.ClearField("shape")
    m.ir_version = 8
    return shape_inference.infer_shapes(m, strict_mode=True)


def float_model(name: str, size: int = 224) -> onnx.ModelProto:
    """The float32 opset-13 model ``name`` (one of ``MODELS`` or of randomize_weights.ZOO) at ``size`` x ``size``."""
    from .models import mobilenetv2_like, yolo_like
    from .randomize_weights import ZOO
    if name in ZOO:   # the onnx wheel's architectures (resnet50, densenet121, inception_v2, ... shufflenet)
        return _zoo(name, size)
    if name == "mobilenetv2":
        return mobilenetv2_like(seed=0, input_size=size)
    if name == "yolo":
        return yolo_like(seed=0, input_size=max(64, size // 32 * 32))
    raise KeyError(f"unknown model {name!r}; known: {MODELS}")


def _input_shape(m: onnx.ModelProto):
    inp = m.graph.input[0]
    return inp.name, [d.dim_value for d in inp.type.tensor_type.shape.dim]


def inputs(m: onnx.ModelProto, n: int, seed: int) -> List[Dict[str, np.ndarray]]:
    name, shape = _input_shape(m)
    rng = np.random.default_rng(seed)
    return [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(n)]


def quantize_static_qdq(src: str, dst: str, feeds: Sequence[Dict[str, np.ndarray]], act: str = "s8",
                       per_channel: bool = True, recurrent: bool = False) -> str:
    """onnxruntime's ``quantize_static`` of the model at ``src`` into a QDQ model at ``dst``: int8
    weights, int8 (``act="s8"``) or uint8 (``"u8"``) activations calibrated (MinMax) on ``feeds``.
    ``recurrent``: LSTM / GRU / RNN quantized too (its default op types leave them float; named in
    ``op_types_to_quantize`` they get DQ on X, W, R, B and Q -> DQ on their outputs)."""
    from onnxruntime import quantization as q
    data = iter(feeds)

    class Reader(q.CalibrationDataReader):
        def get_next(self):
            return next(data, None)

    from onnxruntime.quantization.registry import QDQRegistry
    ops = {"op_types_to_quantize": sorted(set(QDQRegistry) | {"LSTM", "GRU", "RNN"})} if recurrent else {}
    q.quantize_static(src, dst, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=per_channel,
                      weight_type=q.QuantType.QInt8,
                      activation_type=q.QuantType.QInt8 if act == "s8" else q.QuantType.QUInt8, **ops)
    return dst


def quantize(model: onnx.ModelProto, folder: str, act: str = "s8", per_channel: bool = True,
             samples: int = 4) -> str:
    """quant_pre_process + quantize_static (QDQ) of ``model``; returns the QDQ model's path."""
    from onnxruntime.quantization.shape_inference import quant_pre_process
    os.makedirs(folder, exist_ok=True)
    src, pre, out = (os.path.join(folder, f) for f in ("float.onnx", "pre.onnx", f"qdq_{act}.onnx"))
    onnx.save(model, src)
    quant_pre_process(src, pre, skip_symbolic_shape=True)
    return quantize_static_qdq(pre, out, inputs(model, samples, seed=0), act, per_channel)


@dataclass
class Row:
    model: str
    act: str
    cpu_ops: Dict[str, int] = field(default_factory=dict)   # op type -> count left on the CPU
    inner_qdq: int = 0          # Q/DQ on the CPU other than at a graph input / output (a Q -> DQ producing an output)
    identical: float = 0.0      # share of output elements equal to onnxruntime's
    max_quanta: float = 0.0     # largest difference in output quantization steps
    top1: Optional[float] = None
    regions: int = 0
    convert_s: float = 0.0
    run_s: float = 0.0
    ort_s: float = 0.0


def _output_steps(q: onnx.ModelProto) -> Dict[str, float]:
    """Output name -> the scale of the DequantizeLinear producing it (1.0 when it is no DQ)."""
    init = {t.name: t for t in q.graph.initializer}
    prod = {o: n for n in q.graph.node for o in n.output}
    steps = {}
    for o in q.graph.output:
        n = prod.get(o.name)
        while n is not None and n.op_type not in QDQ and n.op_type in ("Softmax", "Identity", "Reshape", "Flatten"):
            n = prod.get(n.input[0])   # a float op after the last DQ: compare in its input's steps
        steps[o.name] = float(onnx.numpy_helper.to_array(init[n.input[1]])) if n is not None and \
            n.op_type == "DequantizeLinear" and n.input[1] in init else 1.0
    return steps


def cpu_ops(model: onnx.ModelProto):
    """(op type -> count of the deployed model's CPU nodes, Q/DQ not at a graph input or output)."""
    g = model.graph
    ins, outs = {i.name for i in g.input}, {o.name for o in g.output}
    ops = collections.Counter(n.op_type for n in g.node if not n.op_type.startswith("Subgraph"))
    readers = collections.defaultdict(list)
    for n in g.node:
        for i in n.input:
            readers[i].append(n)
    at_output = {n.name for n in g.node if n.op_type == "QuantizeLinear" and readers[n.output[0]] and all(
        r.op_type == "DequantizeLinear" and r.output[0] in outs for r in readers[n.output[0]])}
    inner = sum(1 for n in g.node if n.op_type == "QuantizeLinear" and n.input[0] not in ins and n.name not in at_output
                or n.op_type == "DequantizeLinear" and n.output[0] not in outs)
    return dict(ops), inner


def measure(name: str, qpath: str, folder: str, act: str, n_inputs: int = 10, seed: int = 123) -> Row:
    """Convert ``qpath``, run it against onnxruntime on ``n_inputs`` seeded inputs (x 1.5)."""
    import onnxruntime as ort
    import onnx_mrvl
    q = onnx.load(qpath)
    t = time.perf_counter()
    result = onnx_mrvl.convert(qpath)
    row = Row(name, act, convert_s=time.perf_counter() - t, regions=len(result.subgraphs))
    row.cpu_ops, row.inner_qdq = cpu_ops(result.model)
    result.save(folder)
    sess = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    steps = _output_steps(q)
    names = [o.name for o in q.graph.output]
    same = total = agree = 0
    worst = 0.0
    for feed in inputs(q, n_inputs, seed):
        feed = {k: (v * 1.5).astype(np.float32) for k, v in feed.items()}
        t = time.perf_counter()
        want = ref.run(names, feed)
        row.ort_s += time.perf_counter() - t
        t = time.perf_counter()
        got = sess.run(names, feed)
        row.run_s += time.perf_counter() - t
        for o, a, b in zip(names, want, got):
            if not (b.dtype == np.float32 and np.isfinite(b).all()):
                raise AssertionError(f"{name}: output {o} is not finite float32")
            d = np.abs(a.astype(np.float64) - b.astype(np.float64)) / steps[o]
            same += int((d <= 1e-6).sum())
            total += d.size
            worst = max(worst, float(d.max()))
        if name in CLASSIFIERS:
            agree += int(np.argmax(want[0]) == np.argmax(got[0]))
    row.identical, row.max_quanta = same / total, worst
    row.top1 = agree / n_inputs if name in CLASSIFIERS else None
    return row
