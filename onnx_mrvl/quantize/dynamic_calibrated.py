"""Dynamic-int8 models with calibration data: ``convert(dynamic_model, calibration=...)``.

A model of onnxruntime's ``quantize_dynamic`` computes each activation's scale at run time
(``DynamicQuantizeLinear``), which the accelerator's int8 layers (a fixed ``in_scale``) cannot
take. With calibration samples the run-time ranges are measured instead: the model runs in
onnxruntime with every ``DynamicQuantizeLinear`` input and every layer's float result as extra
outputs (min / max over all samples), and the scale and zero point are computed the way
``DynamicQuantizeLinear`` computes them (uint8, range widened to include 0, ``scale = (max - min) /
255`` (1 for an empty range), ``zp = saturate(round_half_even(-min / scale))``). Each layer then
becomes the QDQ form ``fuse/qdq.py`` / ``fuse/qdq_int8_in.py`` import (docs/quantize.md "Dynamic
int8 models"). By default (``layer_outputs="fp16"``) only each layer's input is quantized, in front
of that layer alone as the dynamic model does, and the layer writes float with its fp32 bias: an
int8-in / fp16-out layer. With ``quantize_options={"layer_outputs": "int8"}`` the layers are int8
layers:

``DynamicQuantizeLinear(x) -> MatMulInteger / ConvInteger(W_q) -> Cast -> Mul(s_x * s_w) [-> Add(b)]
[-> Relu/Clip]`` (also com.microsoft ``MatMulIntegerToFloat`` / ``DynamicQuantizeMatMul``) ->
``Q(x) -> DQ -> MatMul / Conv(DQ(W_q int8, s_w)[, DQ(b int32, s_x * s_w)]) [-> Relu/Clip] -> Q -> DQ``.

The int8 weights are kept as they are (per tensor or per output channel); uint8 weights only when
``W_q - z_w`` fits int8 (then recoded exactly: the accelerator takes symmetric int8 weights). The
int8 layer writes int8 codes, so its float result gets a calibrated quantization too (the dynamic
model has none there: the one added rounding). A MatMul's bias ``Add`` stays an ``Add`` with its own
calibrated output quantization (an int8 Sum2D, as ``quantize_static`` writes a MatMul + bias); a
Conv's bias goes into the layer as int32 ``round(b / (s_x s_w))``. What this module does not take
stays for legalize's ``dynamic_int8`` / ``dynamic_lstm`` (an fp16 layer with dequantized weights),
with the reason in ``report.quantization["layers"]`` and in the node's decision; a
DynamicQuantizeLSTM too, unless ``quantize_options={"recurrent": "int8"}`` (``dynamic_lstm_int8.py``:
an int8 recurrent layer). The ranges: ``dynamic_ranges.py``; the rewrite: ``dynamic_qdq.py``.
"""
from __future__ import annotations

import logging
import math
from typing import Dict, Sequence

import numpy as np
import onnx

from .. import file_weights
from ..errors import MrvlError, UsageError
from ..model_checks import ort_domain_imports
from .calibration import load_calibration
from . import dynamic_lstm_int8 as lstm_int8
from . import dynamic_qattention, dynamic_qdq
from .dynamic_layers import Graph, is_dynamic, pool_points, prepared, qparams, take
from .dynamic_ranges import ort_failure, tensor_ranges
from ..ort_plan import session as ort_session

log = logging.getLogger(__name__)
NOTE_INT8 = "dynamic int8 -> int8 with calibrated activation scales"


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


# quantize_options={"layer_outputs": ...} of a dynamic model, the default first: "fp16" (int8-in /
# fp16-out layers) measured closer to fp32 and to onnxruntime's dynamic run than "int8" on 6 / 7 of
# benchmarks/bench_dynamic_calibrated.py's models (docs/quantize.md "Dynamic int8 models")
LAYER_OUTPUTS = ("fp16", "int8")
PRECISION = {"int8": "int8", "fp16": "int8 in, fp16 out"}


def calibrate(model: onnx.ModelProto, calibration, *, calibration_method: str = "minmax",
              fp16_layers: Sequence[str] = (), input_shapes=None, layer_outputs: str = LAYER_OUTPUTS[0],
              recurrent: str = lstm_int8.RECURRENT[0]):
    """The static QDQ model of the dynamic-int8 ``model`` with activation scales from ``calibration``,
    and ``info`` for ``report.quantization``. Returns ``quantize.Quantized``. ``layer_outputs``:
    "fp16" (the default: only the inputs quantized, int8-in / fp16-out layers, the dynamic model's
    own roundings) or "int8" (each layer's result quantized with a calibrated scale: int8 layers)."""
    from . import Quantized
    if calibration_method != "minmax":
        raise UsageError(f"calibration_method='{calibration_method}' on a dynamic-int8 model: its layers quantize "
                         f"with the run-time min / max, which the calibration replaces by the min / max over the "
                         f"samples", hint="leave calibration_method at 'minmax'")
    samples, source = load_calibration(calibration, model, input_shapes)
    g = Graph(prepared(model))
    layers, reasons = take(g, fp16_layers)
    lstms = []   # DynamicQuantizeLSTM: an int8 recurrent layer on request (dynamic_lstm_int8.py)
    if recurrent == "int8":
        lstms, why = lstm_int8.take(g, fp16_layers)
        reasons = {k: v for k, v in reasons.items() if k not in {L.node.name for L in lstms}}
        reasons.update(why)
    qatt, qatt_kept = dynamic_qattention.find(g)          # fused int8 attention: its input calibrated
    for n in [n for n in qatt if n.name in set(fp16_layers or ()) or n.op_type in set(fp16_layers or ())]:
        qatt.remove(n)
        qatt_kept[n.name] = dynamic_qattention.KEPT.format(why="fp16_layers names it")
    reasons.update({name: (why, [name]) for name, why in qatt_kept.items()})
    derived = {f"{L.node.name}/matmul": (L.y, L.bias) for L in layers if L.bias is not None and not L.conv}
    extra = pool_points(g, layers)
    tensors = sorted(({L.x for L in layers} | {t for L in layers for t in L.points} | set(extra)
                      | set(dynamic_qattention.inputs(g, qatt)) | {L.x for L in lstms}) - set(derived))
    ranges, ref_outs, ranks = (tensor_ranges(g.model, tensors, samples, derived) if layers or lstms or qatt
                               else ({}, [], {}))
    for L in layers:   # [M, K] x [K, N] + bias: one Gemm with an int32 bias (no rounding before the bias)
        if not L.conv and ranks.get(L.x) == 2 and (L.add is not None or L.bias is not None):
            L.gemm = True
            if L.add is not None:
                L.bias = L.add_bias
                L.removed.append(L.add)
                L.points.remove(L.y)
                L.y = L.add.output[0]
            else:
                L.points.remove(f"{L.node.name}/matmul")
    qp = {t: qparams(*r) for t, r in ranges.items()}
    int8_outputs = layer_outputs == "int8"
    static = dynamic_qdq.rewrite(g.model, g, layers, qp, extra, int8_outputs) if layers else g.model
    if lstms:
        static = static if static is not g.model else _copy(g.model)
        lstm_int8.rewrite(static, lstms, qp)
    if qatt:
        dynamic_qattention.rewrite(static, qatt, qp)
    ort_domain_imports(static)   # a body's com.microsoft op the model did not import (EnableSubgraph)
    try:
        onnx.checker.check_model(file_weights.inline(static))
    except onnx.checker.ValidationError as exc:
        raise MrvlError(f"the calibrated dynamic-int8 rewrite wrote an invalid model: {exc}",
                        hint="report this model; convert it without calibration (fp16 layers)") from None
    out_snr = _output_snr(static, samples, ref_outs) if layers or lstms or qatt else {}
    records = []
    for L in layers:
        s, z = qp[L.x]
        outs = ", ".join(f"'{t}' {float(qp[t][0]):.4g} / {int(qp[t][1])}" for t in L.points)
        if not int8_outputs:
            outs = "float (not quantized: int8 in, fp16 out)"
        records.append({"layer": L.node.name, "op_type": L.node.op_type, "precision": PRECISION[layer_outputs],
                        "input": L.x, "input_scale": float(s), "input_zero_point": int(z),
                        "weights": f"int8, {'per channel' if L.ws.size > 1 else 'per tensor'} (as quantize_dynamic "
                                   f"wrote them)",
                        "replaces": [n.name for n in L.removed] + ([L.dql.name] if L.dql is not None else []),
                        "reason": f"{NOTE_INT8}: input '{L.x}' scale {float(s):.4g} zero point {int(z)} "
                                  f"(range {ranges[L.x][0]:.4g}..{ranges[L.x][1]:.4g} over {len(samples)} "
                                  f"samples); output(s) {outs}"})
    records += lstm_int8.records(lstms, qp, ranges, len(samples))
    for n in qatt:
        x = g.producer[n.input[0]].input[0]
        s, z = qp[x]
        records.append({"layer": n.name, "op_type": n.op_type, "precision": PRECISION["fp16"], "input": x,
                        "input_scale": float(s), "input_zero_point": int(z),
                        "weights": "int8 Q / K / V projections (as quantize_dynamic wrote them)",
                        "replaces": [g.producer[n.input[0]].name],
                        "reason": f"{NOTE_INT8}: input '{x}' scale {float(s):.4g} zero point {int(z)} (range "
                                  f"{ranges[x][0]:.4g}..{ranges[x][1]:.4g} over {len(samples)} samples); "
                                  f"QAttention's projections int8 in, fp16 out"})
    for name, (why, nodes) in reasons.items():
        n = next(x for x in g.model.graph.node if x.name == name)
        records.append({"layer": name, "op_type": n.op_type, "precision": "fp16", "nodes": nodes or [name],
                        "not_int8": why, "reason": f"dynamic int8 kept as an fp16 layer with dequantized weights: {why}"})
    info = {"mode": "dynamic-calibrated", "method": "minmax", "samples": len(samples),
            "calibration": {"source": source, "samples": len(samples)},
            "activation_type": "uint8 (asymmetric, per tensor; DynamicQuantizeLinear's formula on the calibrated "
                               "range)",
            "weight_type": "int8 (the dynamic model's, per tensor or per channel)",
            "library": "onnx_mrvl.quantize.dynamic_calibrated (ranges: onnxruntime run of the dynamic model)",
            "fp16_layers": list(fp16_layers or ()), "rounds": 1, "layer_outputs": layer_outputs,
            "recurrent": recurrent, "int8_layers": len(layers) + len(lstms) + len(qatt), "layers_total": len(records),
            "output_snr_db": out_snr, "layers": records}
    return Quantized(static, info)


def _output_snr(static: onnx.ModelProto, samples, ref_outs) -> Dict[str, object]:
    """SNR (dB) of each output of the static model against the dynamic model's, over the samples."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 4
    with ort_failure("run the calibrated static model"):
        sess = ort_session(file_weights.serialized(static), so)
    names = [o.name for o in static.graph.output]
    num = {k: 0.0 for k in names}
    den = {k: 0.0 for k in names}
    for feed, ref in zip(samples, ref_outs):
        with ort_failure("run the calibrated static model"):
            got = sess.run(names, feed)
        for k, r, y in zip(names, ref, got):
            if np.asarray(r).dtype.kind != "f":
                continue
            r64 = np.asarray(r, np.float64)
            num[k] += float(np.sum(r64 ** 2))
            den[k] += float(np.sum((r64 - y) ** 2))
    return {k: ("inf" if den[k] == 0 else round(10 * math.log10(num[k] / den[k]), 2) if num[k] > 0 else None)
            for k in names}


def quantize_or_calibrate(model: onnx.ModelProto, *, quantize: str = "float16", calibration=None,
                          calibration_method: str = "minmax", fp16_layers: Sequence[str] = (),
                          snr_budget_db: float = 30.0, input_shapes=None, quantize_options=None):
    """The quantize step of ``convert()``: a dynamic-int8 model with ``calibration`` (and ``quantize``
    "float16" or "int8") -> ``calibrate``; anything else -> ``quantize.quantize_model`` (a dynamic
    model without calibration stays as it is: fp16 layers with dequantized weights)."""
    from . import quantize_model
    if calibration is not None and is_dynamic(model):
        if quantize not in ("float16", "int8"):
            raise UsageError(f"quantize='{quantize}' on a dynamic-int8 model (quantize_dynamic's "
                             f"DynamicQuantizeLinear / MatMulInteger / ConvInteger)",
                             hint="pass calibration=... alone (or quantize='int8'): its layers become int8 with "
                                  "calibrated activation scales; or quantize the float model instead")
        opts = dict(quantize_options or {})
        outputs = str(opts.pop("layer_outputs", LAYER_OUTPUTS[0])).strip().lower()
        recurrent = opts.pop("recurrent", lstm_int8.RECURRENT[0])
        recurrent = {True: "int8", False: "fp16", "true": "int8", "false": "fp16"}.get(
            recurrent.strip().lower() if isinstance(recurrent, str) else recurrent,
            str(recurrent).strip().lower())   # the float recipe's boolean spelling too
        if opts:
            raise UsageError(f"quantize_options {sorted(opts)} on a dynamic-int8 model",
                             hint="the recipe options apply to quantize='int8' / 'mixed' of a float model; "
                                  "calibrating a dynamic model takes calibration= (and fp16_layers=, "
                                  "quantize_options={'layer_outputs': 'int8' | 'fp16', "
                                  "'recurrent': 'fp16' | 'int8'}) only")
        if recurrent not in lstm_int8.RECURRENT:
            raise UsageError(f"recurrent='{recurrent}' on a dynamic-int8 model",
                             hint="'fp16' (DynamicQuantizeLSTM as an fp16 LSTM, the default) or 'int8' (an int8 "
                                  "recurrent layer with a calibrated input scale)")
        if outputs not in LAYER_OUTPUTS:
            raise UsageError(f"layer_outputs='{outputs}' on a dynamic-int8 model",
                             hint="'int8' (int8 layers) or 'fp16' (int8-in / fp16-out layers)")
        return calibrate(model, calibration, calibration_method=calibration_method, fp16_layers=fp16_layers,
                         input_shapes=input_shapes, layer_outputs=outputs, recurrent=recurrent)
    return quantize_model(model, quantize=quantize, calibration=calibration, calibration_method=calibration_method,
                          fp16_layers=fp16_layers, snr_budget_db=snr_budget_db, input_shapes=input_shapes,
                          quantize_options=quantize_options)


def annotate(decisions, info: dict) -> None:
    """The decisions of the rewritten layers say they are int8 with calibrated scales; those of
    dynamic layers left fp16 say why (instead of 'no calibration'). A layer made int8 that did
    not end as an int8 accelerator layer, or a kept one that did not end on the accelerator (folded,
    on the CPU), gets that in its record."""
    for r in info.get("layers", []):
        d = decisions.get(r["layer"])
        if r["precision"] in PRECISION.values():
            if d is None:
                continue
            if d.placement != "accelerator" or d.precision not in PRECISION.values():
                r["precision"] = "fp16" if d.placement == "accelerator" else "cpu"
                r["reason"] = f"rewritten to int8 QDQ, but the int8 import did not take it: {d.reason}"
                continue
            # layer_outputs="fp16": a layer whose float result only the next layer's input pair reads
            # (through Relu / Clip) writes that pair's codes: an int8 layer (same values, exact)
            if d.precision != r["precision"]:
                r["reason"] = r["reason"].replace(
                    "float (not quantized: int8 in, fp16 out)",
                    "the next layer's input quantization (its only reader, through Relu / Clip: an int8 layer)")
                r["precision"] = d.precision
            if NOTE_INT8 not in d.reason:
                d.reason = f"{NOTE_INT8} (input scale {r['input_scale']:.4g}, zero point {r['input_zero_point']}); " \
                           f"{d.reason}"
        else:
            why = r["not_int8"]
            for name in r.get("nodes", [r["layer"]]):
                dd = decisions.get(name)
                if dd is not None and "(no calibration)" in dd.reason:
                    dd.reason = dd.reason.replace("(no calibration)", f"(calibration given, kept: {why})")
            if d is not None and d.placement != "accelerator":   # folded (constant operands) or on the CPU
                r["precision"] = d.placement
                r["reason"] = f"dynamic int8 not made int8 ({why}); {d.placement}: {d.reason}"
    info["int8_layers"] = sum(1 for r in info.get("layers", []) if r["precision"] in PRECISION.values())


__all__ = ["is_dynamic", "calibrate", "quantize_or_calibrate", "annotate", "NOTE_INT8"]
