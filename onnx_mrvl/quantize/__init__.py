"""Quantize in the flow: ``convert(model, quantize="int8" | "mixed", calibration=...)``.

onnxruntime's quantizer does the work (``static.py``: ``quant_pre_process`` + ``quantize_static``,
QDQ, per-channel symmetric int8 weights, int8 activations, MinMax / Entropy / Percentile
calibration); ``recipe.py`` holds the recipe's options (``quantize_options``) and which nodes are
quantized; ``equalize.py`` is the optional cross-layer equalization, ``bias_correction.py`` the optional
empirical bias correction; ``calibration.py`` reads and
checks the samples; ``snr.py`` measures the noise;
this module picks each layer's precision and returns the QDQ model the pipeline converts
(``fuse/qdq.py`` imports it as int8 layers) and the record of what it did (``report.quantization``).

- ``quantize="int8"``: every layer int8 but ``fp16_layers`` (node names or op types of the model,
  kept float: ``nodes_to_exclude``), which run as fp16 layers on the dequantized values.
- ``quantize="mixed"``: int8 where quantization keeps the signal-to-noise ratio at or above
  ``snr_budget_db`` (default 30 dB), fp16 elsewhere. A quantized activation tensor whose own
  quantization (measured on the calibration data) falls under the budget stays float, with the
  layer that writes it and the layers that read it; a weight under the budget keeps its layer
  fp16. Re-quantized and re-measured until no quantized tensor is under the budget.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence

import onnx

from ..errors import ModelError, UsageError
from ..options import as_names, close_matches
from .nonfinite import non_finite_nodes
from . import static
from .bias_correction import correct_biases
from .calibration import load_calibration
from .equalize import check_exact, equalize
from .recipe import Recipe, make_recipe
from .layers import Structure, quantized_tensors
from .snr import activation_qparams, measure

log = logging.getLogger(__name__)
MODES = ("float16", "int8", "mixed")
DEFAULT_SNR_BUDGET_DB = 30.0
MAX_ROUNDS = 8
DROP_DB = 6.0          # a layer "causes" noise when its output SNR is this much below its inputs'


@dataclass
class Quantized:
    model: onnx.ModelProto          # the QDQ model (or the input model for quantize="float16")
    info: Dict = field(default_factory=dict)


def check_options(quantize: str, calibration, calibration_method: str, fp16_layers, snr_budget_db,
                  quantize_options=None) -> Recipe:
    if quantize not in MODES:
        raise UsageError(f"quantize='{quantize}' is not one of {list(MODES)}",
                         hint="quantize='float16' (default), 'int8' or 'mixed'")
    if calibration_method not in static.METHODS:
        raise UsageError(f"calibration_method='{calibration_method}' is not one of {sorted(static.METHODS)}",
                         hint="use minmax (default), entropy or percentile")
    if quantize == "float16" and (calibration is not None or list(fp16_layers or ()) or quantize_options):
        raise UsageError("calibration / fp16_layers / quantize_options are given but quantize='float16' "
                         "(nothing is quantized)",
                         hint="pass quantize='int8' or 'mixed' (--quantize int8), or leave them out")
    if quantize == "float16" and calibration_method != "minmax":   # was ignored without a word
        raise UsageError(f"calibration_method='{calibration_method}' is given but quantize='float16' (nothing is "
                         f"calibrated)", hint="pass quantize='int8' or 'mixed' with calibration=..., or leave it out")
    if not isinstance(snr_budget_db, (int, float)) or not math.isfinite(snr_budget_db) or snr_budget_db <= 0:
        raise UsageError(f"snr_budget_db={snr_budget_db!r} is not a positive number of dB",
                         hint=f"e.g. snr_budget_db={DEFAULT_SNR_BUDGET_DB:g}")
    return make_recipe(quantize_options)


def _resolve(names: Iterable[str], model: onnx.ModelProto) -> List[str]:
    """Node names of ``model`` named by ``names`` (node names or op types)."""
    names = list(names or ())
    out = []
    for want in names:
        hit = [n.name for n in model.graph.node if want in (n.name, n.op_type)]
        if not hit:
            close = close_matches(want, {n.name for n in model.graph.node} | {n.op_type for n in model.graph.node})
            raise UsageError(f"fp16_layers: '{want}' is no node name or op type of the model (after onnxruntime's "
                             f"pre-processing, which folds BatchNormalization into the convs)",
                             hint=(f"did you mean {close[0]!r}? " if close else "") + "name a node or an op type")
        out.extend(h for h in hit if h not in out)
    return out


def quantize_model(model: onnx.ModelProto, *, quantize: str = "int8", calibration=None,
                   calibration_method: str = "minmax", fp16_layers: Sequence[str] = (),
                   snr_budget_db: float = DEFAULT_SNR_BUDGET_DB, input_shapes=None,
                   quantize_options=None) -> Quantized:
    """The QDQ model of ``model`` and ``info`` (mode, method, samples, per-layer precision and SNR);
    ``quantize_options``: the recipe's options (``recipe.py``)."""
    fp16_layers = as_names(fp16_layers)   # "conv1": one name, not four letters
    recipe = check_options(quantize, calibration, calibration_method, fp16_layers, snr_budget_db, quantize_options)
    if quantize == "float16":
        return Quantized(model, {})   # nothing to record: the default flow
    samples, source = load_calibration(calibration, model, input_shapes)
    equalized = 0
    with static.workdir() as tmp:
        pre = static.preprocess(static.prepare(model), tmp)
        if recipe.equalize:
            eq, equalized = equalize(pre)
            why = check_exact(pre, eq, samples[:2]) if equalized else None
            if why:
                raise ModelError(f"cross-layer equalization changed the float model: {why}",
                                 hint="quantize without it (quantize_options={'equalize': False})")
            pre = eq
        user = _resolve(fp16_layers, pre)
        structure = Structure(pre)
        exclude = {n: "fp16_layers names it" for n in user}
        for n, why in non_finite_nodes(pre, samples[:4]).items():   # -inf masks: no int8 range holds them
            exclude.setdefault(n, why)
        if recipe.output_layers_fp16:
            for n in sorted(structure.output_layers([o.name for o in pre.graph.output])):
                exclude.setdefault(n, "it writes a model output (quantize_options output_layers_fp16)")
        first: Dict[str, str] = {}
        for rounds in range(1, MAX_ROUNDS + 1):
            qdq = static.quantize_int8(pre, samples, method=calibration_method, exclude=sorted(exclude), workdir=tmp,
                                       recipe=recipe)
            corrected = correct_biases(pre, qdq, samples) if recipe.bias_correction else None
            layer_out, qparams = {}, activation_qparams(qdq)
            for layer in structure.layers():
                _, out = quantized_tensors(qdq, layer.name, qparams)
                if out:
                    layer_out[layer.name] = out
            m = measure(pre, qdq, samples, layer_out)
            if rounds == 1:
                as_int8 = {r["layer"]: r for r in _layer_records(qdq, structure, m, {}, quantize, snr_budget_db)}
            if quantize != "mixed":
                break
            if rounds == MAX_ROUNDS:   # what was measured is what is reported: no exclusion left unmeasured
                log.warning("quantize='mixed' did not settle in %d rounds; the last one is kept", MAX_ROUNDS)
                break
            more = _over_budget(qdq, structure, m, snr_budget_db, exclude, first)
            if not more:
                break
            exclude.update(more)
        layers = _layer_records(qdq, structure, m, exclude, quantize, snr_budget_db)
        for r in layers:     # a layer kept fp16 by the budget: the SNRs it had as int8 (the first round)
            if r["layer"] in first and r["layer"] in as_int8:
                r.update(snr_db=as_int8[r["layer"]]["snr_db"], output_snr_db=as_int8[r["layer"]]["output_snr_db"])
    int8 = sum(1 for r in layers if r["precision"] == "int8")
    info = {"mode": quantize, "method": calibration_method, "samples": len(samples),
            "calibration": {"source": source, "samples": len(samples)},
            "activation_type": f"{'uint8' if recipe.weight_bits == 8 else 'int8'} "
                               f"({'symmetric' if recipe.activation_symmetric else 'asymmetric'}, per tensor)",
            "weight_type": ("uint8 codes, zero point 128 (8-bit symmetric, per channel)" if recipe.weight_bits == 8
                            else "int8 (7-bit symmetric: reduce_range, per channel)"),
            "library": "onnxruntime.quantization (quant_pre_process + quantize_static, QDQ)",
            "fp16_layers": list(fp16_layers or ()), "rounds": rounds,
            "options": recipe.as_dict(), "equalized_pairs": equalized,
            **({"bias_correction": corrected} if corrected is not None else {}),
            "int8_layers": int8, "layers_total": len(layers),
            "output_snr_db": {k: _num(v) for k, v in m["outputs"].items()}, "layers": layers}
    if quantize == "mixed":
        info["snr_budget_db"] = float(snr_budget_db)
    return Quantized(qdq, info)


def _num(v: float):
    return None if v is None else (round(v, 2) if math.isfinite(v) else "inf")


def _over_budget(qdq, structure: Structure, m: dict, budget: float, exclude: Dict[str, str],
                 first: Dict[str, str]) -> Dict[str, str]:
    """Nodes to keep float because a tensor or weight they quantize is under the budget."""
    more: Dict[str, str] = {}
    for t, db in m["tensors"].items():
        if db < budget:
            why = f"activation '{t}' quantizes at {db:.1f} dB < budget {budget:g} dB"
            for name in structure.keep_float(t):
                if name not in exclude and name not in more:
                    more[name] = why
    # a layer whose output loses >= DROP_DB against its inputs (all within the budget) and falls under
    # the budget: the quantization of what it reads hurts it (e.g. one channel far larger than the
    # others: the tensor's overall SNR hides the crushed channels). Its inputs stay float.
    for layer in structure.layers():
        ins, out = quantized_tensors(qdq, layer.name, m["qparams"])
        c_out = m["accumulated"].get(out) if out else None
        c_in = [m["accumulated"].get(t, math.inf) for t in ins]
        if c_out is None or not ins or c_out >= budget or min(c_in) < budget or min(c_in) - c_out < DROP_DB:
            continue
        why = (f"its output falls to {c_out:.1f} dB (< budget {budget:g} dB) from {min(c_in):.1f} dB at its "
               f"quantized input(s) {ins}")
        for t in ins:
            for name in structure.keep_float(t) | {layer.name}:
                if name not in exclude and name not in more:
                    more[name] = why if name == layer.name else f"keeps '{t}' float for '{layer.name}': {why}"
    for name, db in m["weights"].items():
        if db < budget and name not in exclude and name not in more:
            more[name] = f"its int8 weights are at {db:.1f} dB < budget {budget:g} dB"
    first.update({k: v for k, v in more.items() if k not in first})
    return more


def _layer_records(qdq, structure: Structure, m: dict, exclude: Dict[str, str], mode: str,
                   budget: float) -> List[dict]:
    qp = m["qparams"]
    out = []
    for layer in structure.layers():
        ins, o = quantized_tensors(qdq, layer.name, qp)
        parts = {f"input '{t}'": m["tensors"].get(t) for t in ins}
        if o:
            parts[f"output '{o}'"] = m["tensors"].get(o)
        if layer.name in m["weights"]:
            parts["weights"] = m["weights"][layer.name]
        parts = {k: v for k, v in parts.items() if v is not None}
        own = min(parts.values()) if parts else None
        rec = {"layer": layer.name, "op_type": layer.op_type, "snr_db": _num(own),
               "output_snr_db": _num(m["layers"].get(layer.name, m["outputs"].get(layer.output[0])))}
        if layer.name in exclude:
            rec.update(precision="fp16", reason=exclude[layer.name])
        elif ins:
            what = ", ".join(f"{k} {v:.1f} dB" for k, v in parts.items())
            rec.update(precision="int8", reason=(f"within budget {budget:g} dB: {what}" if mode == "mixed"
                                                 else f"quantize='int8': {what}"))
        else:
            rec.update(precision="fp16", reason="not quantized by onnxruntime's quantizer (no quantized input)")
        out.append(rec)
    return out
