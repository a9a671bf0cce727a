"""The quantization recipe's options (``convert(..., quantize_options={...})``, CLI
``--quantize-option KEY=VALUE``) and which nodes the quantizer may quantize.

Options (defaults chosen by measurement on the zoo architectures, docs/quantize.md "Measured"):

- ``equalize`` (bool, default False): cross-layer equalization (``equalize.py``) of the float
  model before calibration.
- ``activation_symmetric`` (bool, default False): symmetric activation ranges (zero point 0;
  onnxruntime's ``ActivationSymmetric``).
- ``moving_average`` (bool, default False): activation ranges as a moving average of the
  per-sample min/max instead of the overall min/max (``CalibMovingAverage``, MinMax only).
- ``percentile`` (float in (90, 100], default 99.999): the ``percentile`` method's clip point
  (``CalibPercentile``).
- ``output_layers_fp16`` (bool, default False): keep the layers that write a model output (through
  Softmax, Flatten, ... ) fp16, as TIDL's 16-bit output layers: their output is not rounded to
  int8 before a Softmax or the user.
- ``elementwise`` (bool, default True): also quantize Concat and the element-wise functions of one
  tensor that ``fuse/qdq_lookup.py`` imports as int8 table lookups (Sigmoid, LeakyRelu,
  HardSwish, SiLU's ``x * Sigmoid(x)``, ...); False leaves them float (fp16 layers).
- ``bias_correction`` (bool, default False): empirical bias correction (``bias_correction.py``) of
  the QDQ model: each int8 Conv / Gemm's int32 bias absorbs the per-channel mean of its output
  error on the calibration data, layer by layer.
- ``recurrent`` (bool, default False): also quantize LSTM / GRU / RNN (int8 W / R, calibrated X and
  Y scales: int8 recurrent layers, ``fuse/qdq_recurrent.py``); False leaves them fp16 layers
  (measured closer to fp32, docs/quantize.md).
- ``weight_bits`` (7 or 8, default 8): 8 writes full-range weight codes in onnxruntime's U8U8 form
  (uint8 weights symmetric around 128 -- int8 codes ``q - 128`` to the import -- and uint8
  activations), which MLAS sums exactly on every x86 CPU; 7 writes S8S8 with ``reduce_range``
  (|q_w| <= 64: its U8S8 kernels' int16 pairs cannot clamp without VNNI), one bit of weight
  precision less (docs/quantize.md step 4).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Dict, List, Mapping, Optional, Set, Tuple

import onnx

from ..errors import UsageError
from ..options import close_matches


@dataclass(frozen=True)
class Recipe:
    equalize: bool = False
    activation_symmetric: bool = False
    moving_average: bool = False
    percentile: float = 99.999
    elementwise: bool = True
    output_layers_fp16: bool = False
    bias_correction: bool = False
    recurrent: bool = False
    weight_bits: int = 8

    def as_dict(self) -> Dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _bool(key: str, v) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in _TRUE + _FALSE:
        return v.strip().lower() in _TRUE
    raise UsageError(f"quantize_options: {key}={v!r} is not a boolean", hint=f"{key}=true or {key}=false")


def make_recipe(options: Optional[Mapping] = None) -> Recipe:
    """The ``Recipe`` of ``options`` (a mapping; CLI values may be strings), checked."""
    if options is None:
        return Recipe()
    if isinstance(options, Recipe):
        return options
    if not isinstance(options, Mapping):
        raise UsageError(f"quantize_options must be a dict, not {type(options).__name__}",
                         hint="e.g. quantize_options={'equalize': True}")
    known = {f.name: f for f in fields(Recipe)}
    out = {}
    for key, v in options.items():
        if key not in known:
            close = close_matches(str(key), set(known))
            raise UsageError(f"quantize_options: unknown option '{key}'",
                             hint=(f"did you mean {close[0]!r}? " if close else "") + f"known: {sorted(known)}")
        if key == "percentile":
            try:
                p = float(v)
            except (TypeError, ValueError):
                p = float("nan")
            if not 90.0 < p <= 100.0:
                raise UsageError(f"quantize_options: percentile={v!r} is not a number in (90, 100]",
                                 hint="e.g. percentile=99.99")
            out[key] = p
        elif key == "weight_bits":
            if str(v).strip() not in ("7", "8") or isinstance(v, bool):
                raise UsageError(f"quantize_options: weight_bits={v!r} is not 7 or 8",
                                 hint="weight_bits=8 (full range, U8U8) or weight_bits=7 (S8S8, reduce_range)")
            out[key] = int(str(v).strip())
        elif key == "recurrent" and isinstance(v, str) and v.strip().lower() in ("int8", "fp16"):
            out[key] = v.strip().lower() == "int8"   # the dynamic models' spelling of the same option
        else:
            out[key] = _bool(key, v)
    return Recipe(**out)


def parse_cli(items) -> Dict[str, str]:
    """``["equalize=true", ...]`` -> ``{"equalize": "true", ...}`` (checked by ``make_recipe``)."""
    out = {}
    for item in items or ():
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--quantize-option '{item}' is not KEY=VALUE", hint="e.g. --quantize-option equalize=true")
        out[key.strip()] = value.strip()
    return out


# --- which nodes the quantizer quantizes -------------------------------------------------------

UNARY_LOOKUPS = ("Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Elu", "Selu", "Softplus",
                 "Softsign", "Exp", "Neg", "Abs", "Erf")
BINARY_LOOKUPS = ("Mul", "Sub", "Div")      # int8 only as part of a function of one tensor (SiLU's Mul)


def op_types(recipe: Recipe) -> List[str]:
    """The op types the quantizer may quantize: the int8 layers ``fuse/qdq.py`` imports (Conv, Gemm,
    MatMul, pools, Resize, Add) with the Relu/Clip it folds, and with ``elementwise`` Concat
    (``fuse/qdq_concat.py``) and the table lookups (``fuse/qdq_lookup.py``)."""
    from ..fuse.qdq import ANCHORS
    from ..fuse.qdq_pool import POOL_ANCHORS
    from ..fuse.qdq_lookup import ANCHORS as LOOKUP
    out = set(ANCHORS) | set(POOL_ANCHORS) | {"Relu", "Clip"}
    if recipe.elementwise:
        out |= {"Concat"} | (set(UNARY_LOOKUPS) & set(LOOKUP)) | (set(BINARY_LOOKUPS) & set(LOOKUP))
    if recipe.recurrent:   # int8 recurrent layers (fuse/qdq_recurrent.py)
        from ..fuse.qdq_recurrent import ANCHORS as RECURRENT
        out |= set(RECURRENT)
    return sorted(out)


def float_read_concats(model: onnx.ModelProto, recipe: Recipe) -> Set[str]:
    """Names of the Concats whose output no int8 layer reads (only float ops, e.g. DenseNet's
    Concat -> BatchNormalization, or graph outputs): quantized, such a Concat only adds rounding
    -- one per-tensor scale over inputs of different ranges, which the float reader (a per-channel
    BN) would have kept apart -- and no int8 layer gains from it. A Concat read by a kept Concat
    counts as read by an int8 layer."""
    if not recipe.elementwise:
        return set()
    from ..fuse.qdq import ANCHORS
    from ..fuse.qdq_pool import POOL_ANCHORS
    from ..fuse.qdq_lookup import ANCHORS as LOOKUP
    int8 = set(ANCHORS) | set(POOL_ANCHORS) | ((set(UNARY_LOOKUPS) | set(BINARY_LOOKUPS)) & set(LOOKUP))
    skip = not_lookups(model, recipe)
    readers: Dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    concats = [n for n in model.graph.node if n.op_type == "Concat"]
    kept: Set[str] = set()
    changed = True
    while changed:
        changed = False
        for n in concats:
            if n.name in kept:
                continue
            rs = readers.get(n.output[0], [])
            if any((r.op_type in int8 and r.name not in skip) or r.name in kept for r in rs):
                kept.add(n.name)
                changed = True
    return {n.name for n in concats} - kept


def float_fed_lookups(model: onnx.ModelProto, recipe: Recipe) -> Set[str]:
    """Names of the element-wise lookup nodes whose input a float op writes (a standalone
    BatchNormalization, a Softmax, ...): quantized, the lookup adds a rounding of its input that no
    int8 layer needed (measured on DenseNet-121: BN -> Mul -> Add, 62 more quantizations, 35.6 ->
    34.6 dB). A lookup on the output of an int8 layer (conv -> SiLU) or of the model input is kept."""
    if not recipe.elementwise:
        return set()
    from ..fuse.qdq import ANCHORS
    from ..fuse.qdq_pool import POOL_ANCHORS
    from ..fuse.qdq_lookup import ANCHORS as LOOKUP
    lookups = (set(UNARY_LOOKUPS) | set(BINARY_LOOKUPS)) & set(LOOKUP)
    int8 = set(ANCHORS) | set(POOL_ANCHORS) | {"Relu", "Clip", "Concat"}
    consts = {t.name for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    for n in model.graph.node:
        if n.op_type == "Constant":
            consts.update(n.output)
    out = set()
    for n in model.graph.node:
        if n.op_type not in lookups:
            continue
        srcs = set()
        for i in n.input:
            if not i or i in consts:
                continue
            t, p = i, producer.get(i)
            while p is not None and p.op_type in lookups:   # through the group (SiLU's Sigmoid) to its input
                t = next((j for j in p.input if j and j not in consts), None)
                p = producer.get(t) if t else None
            srcs.add(p.op_type if p is not None else "<input>")
        if any(s not in int8 and s != "<input>" for s in srcs):
            out.add(n.name)
    return out


def not_lookups(model: onnx.ModelProto, recipe: Recipe) -> Set[str]:
    """Names of the Mul/Sub/Div nodes that are no function of one tensor (two different tensors,
    e.g. an attention product): quantized, their Q/DQ would stay on the CPU, so they stay float."""
    if not recipe.elementwise:
        return set()
    consts = {t.name for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    for n in model.graph.node:
        if n.op_type == "Constant":
            consts.update(n.output)

    def root(t: str, hops: int = 8) -> Tuple[str, int]:
        p = producer.get(t)
        while hops and p is not None and p.op_type in UNARY_LOOKUPS + ("Relu", "Clip") \
                and sum(1 for i in p.input if i and i not in consts) == 1:
            t = p.input[0]
            p = producer.get(t)
            hops -= 1
        return t, hops

    out = set()
    for n in model.graph.node:
        if n.op_type not in BINARY_LOOKUPS:
            continue
        live = [i for i in n.input if i and i not in consts]
        if len({root(i)[0] for i in live}) > 1:
            out.add(n.name)
    return out
