"""The int8 quantize step: onnxruntime's ``quant_pre_process`` and ``quantize_static`` (QDQ format,
per-channel symmetric 8-bit weights, 8-bit activations: ``recipe.weight_bits``) on a float model, with the calibration feeds
of ``calibration.py``. The result is a QDQ model of the kind ``fuse/qdq.py`` imports.

Before quantizing, ``prepare`` puts the model in the form the quantizer and our import both
expect: initializers are no graph inputs (IR >= 4, so they are constants the optimizer can fold),
opset >= 13 (per-channel Q/DQ and our int8 layers), a two-input ``Sum`` is an ``Add`` (the
quantizer has a QDQ Add, no Sum). ``quant_pre_process`` then infers shapes and runs onnxruntime's
basic optimizations (BatchNormalization folded into the convs, so no float op is left between a
conv and its quantization).
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from typing import Dict, List, Sequence

import numpy as np
import onnx

from .. import file_weights
from ..errors import ModelError, MrvlError, UnsupportedError, UsageError

log = logging.getLogger(__name__)
METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}
# onnxruntime's quantize_static builds its Entropy calibrator with num_bins = num_quantized_bins = 128 (it
# passes no bin count on), so the KL search has one candidate threshold, the whole range: MinMax's. The
# entropy method needs a finer histogram than the 128 quantized bins it searches thresholds over:
# 2048 (TensorRT's choice; candidates from 1/16 of the range to all of it). onnxruntime's search is a
# Python loop over bins x candidates: the quantize step of a 179-tensor MobileNetV3 took 128 s against
# 7.6 s with minmax (512 bins: 25 s, but candidates only down to 1/4 of the range; measured worse).
ENTROPY_BINS = 2048
MIN_OPSET = 13
# The ops the quantizer may put between Q/DQ pairs: those fuse/qdq.py imports as int8 layers
# (Conv/Gemm/MatMul, pools, nearest Resize, Add) and the activations it folds into them (Relu,
# Clip). Everything else stays float -- Sigmoid, Mul, Softmax, ... and also the ops that only move
# values (Concat, Flatten, Reshape, ...): quantized, they put a Q -> DQ pair in front of themselves
# that no int8 layer absorbs when their input comes from a float op (a SiLU's Mul into a Concat:
# measured on yolo_like, 4 pairs left on the CPU). Float, they copy the dequantized values (exact
# in fp16, docs/simulator.md) and the next int8 layer quantizes them.


def int8_op_types(recipe=None) -> List[str]:
    """The op types the quantizer may quantize (``recipe.op_types``: the import's own lists, so the
    two stay in step)."""
    from .recipe import Recipe, op_types
    return op_types(recipe or Recipe())


def prepare(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` in the form the quantizer takes (see the module docstring)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {t.name for t in m.graph.initializer}
    keep = [i for i in m.graph.input if i.name not in inits]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    m.ir_version = max(m.ir_version, 8)
    for n in m.graph.node:
        if n.op_type == "Sum" and n.domain in ("", "ai.onnx") and len(n.input) == 2:
            n.op_type = "Add"
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), MIN_OPSET)
    if opset < MIN_OPSET:
        from onnx import version_converter
        try:
            m = version_converter.convert_version(m, MIN_OPSET)
        except Exception as exc:  # noqa: BLE001 - the converter raises several kinds
            raise ModelError(f"the model is opset {opset}; int8 quantization needs opset >= {MIN_OPSET} and "
                             f"onnx's version converter failed ({type(exc).__name__}: {exc})",
                             hint=f"export the model at opset {MIN_OPSET} or later") from None
        m.ir_version = max(m.ir_version, 8)
    return m


def _reader(samples: List[Dict[str, np.ndarray]]):
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)

        def rewind(self):
            self.it = iter(samples)
    return Reader()


def preprocess(model: onnx.ModelProto, workdir: str) -> onnx.ModelProto:
    """onnxruntime's ``quant_pre_process`` (ONNX shape inference + basic optimizations; the symbolic
    shape inference needs sympy and is skipped when it is missing)."""
    from onnxruntime.quantization import quant_pre_process
    src, dst = os.path.join(workdir, "float.onnx"), os.path.join(workdir, "pre.onnx")
    onnx.save(file_weights.inline(model), src)
    try:
        import sympy  # noqa: F401
        symbolic = True
    except ImportError:
        symbolic = False
    with contextlib.redirect_stdout(sys.stderr), _failure("quant_pre_process"):
        quant_pre_process(src, dst, skip_symbolic_shape=not symbolic)
    return onnx.load(dst)


@contextlib.contextmanager
def onnxruntime_failure(what: str, hint: str):
    """onnxruntime failing on the user's model is no bug of ours: an ``UnsupportedError`` of ``what``
    failed (with onnxruntime's message) and ``hint``."""
    try:
        yield
    except (MemoryError, KeyboardInterrupt, MrvlError):   # ours already says what to do
        raise
    except Exception as exc:  # noqa: BLE001 - whatever onnxruntime raises
        raise UnsupportedError(f"{what} ({type(exc).__name__}: {str(exc)[:300]})", hint=hint) from exc


def _failure(step: str):
    return onnxruntime_failure(f"onnxruntime's {step} failed on this model",
                               "keep the failing node float with fp16_layers=[...], quantize the model yourself "
                               "and convert the QDQ model, or use quantize='float16'")


def quantize_int8(model: onnx.ModelProto, samples: List[Dict[str, np.ndarray]], *, method: str = "minmax",
                  exclude: Sequence[str] = (), workdir: str, recipe=None) -> onnx.ModelProto:
    """``quantize_static`` of the pre-processed ``model`` (QDQ, per-channel symmetric int8 weights,
    int8 activations, ``method`` calibration, the options of ``recipe``: ``recipe.py``);
    ``exclude``: node names kept float."""
    from onnxruntime import quantization as q
    from .float_groups import rms_norms, signed_permutations, written_norms_softmaxes
    from .recipe import Recipe, float_fed_lookups, float_read_concats, not_lookups
    recipe = recipe or Recipe()
    if method not in METHODS:
        raise UsageError(f"calibration method '{method}' is not one of {sorted(METHODS)}",
                         hint="use minmax (default), entropy or percentile")
    src, dst = os.path.join(workdir, "to_quantize.onnx"), os.path.join(workdir, "qdq.onnx")
    from .bias_shapes import vector_biases
    flat = onnx.ModelProto()
    flat.CopyFrom(model)
    onnx.save(file_weights.inline(flat if vector_biases(flat) else model), src)   # 2-D biases fail its per-channel check
    extra = {"WeightSymmetric": True, "ActivationSymmetric": recipe.activation_symmetric,
             "CalibMovingAverage": recipe.moving_average, "CalibPercentile": recipe.percentile}
    # weight_bits=8: full-range weights as uint8 (zero point 128) with uint8 activations, onnxruntime's
    # U8U8 kernels (exact int32 sums on any x86); 7: S8S8 with 7-bit weights (its U8S8 kernels without
    # VNNI add pairs of products into a saturating int16: |q_w| <= 64 keeps them in range)
    qtype = q.QuantType.QUInt8 if recipe.weight_bits == 8 else q.QuantType.QInt8
    # its calibrators print progress: our stdout may be JSON
    with contextlib.redirect_stdout(sys.stderr), _failure("quantize_static"), entropy_bins(method):
        q.quantize_static(src, dst, _reader(samples), quant_format=q.QuantFormat.QDQ,
                          op_types_to_quantize=int8_op_types(recipe), per_channel=True, reduce_range=recipe.weight_bits == 7,
                          activation_type=qtype, weight_type=qtype,
                          nodes_to_exclude=sorted(set(exclude) | not_lookups(model, recipe)
                                                 | float_read_concats(model, recipe) | float_fed_lookups(model, recipe)
                                                 | signed_permutations(model) | rms_norms(model)
                                                 | written_norms_softmaxes(model, samples[0] if samples else None)),
                          calibrate_method=getattr(q.CalibrationMethod, METHODS[method]),
                          extra_options=extra)
    out = onnx.load(dst)
    out.ir_version = max(out.ir_version, 8)
    float_readers_read_float(out, model, set(exclude), recipe)
    return out


@contextlib.contextmanager
def entropy_bins(method: str, bins: int = ENTROPY_BINS):
    """For ``method="entropy"``: quantize_static's calibrator gets a ``bins``-bin histogram (its own
    choice, 128 bins for 128 quantized bins, reduces the method to MinMax; module comment above).
    onnxruntime's ``create_calibrator`` is wrapped for the duration of the call (process-wide) and
    restored after it. Fails closed (``UnsupportedError``) when that function is gone, takes no
    ``extra_options`` any more, or was not called through the module (the bins would not reach the
    calibrator: the method would silently be MinMax)."""
    if method != "entropy":
        yield
        return
    import importlib
    import inspect
    mod = importlib.import_module("onnxruntime.quantization.quantize")
    orig = getattr(mod, "create_calibrator", None)
    why = None
    if not callable(orig):
        why = "has no create_calibrator"
    else:
        try:
            params = inspect.signature(orig).parameters
        except (TypeError, ValueError):
            params = {}
        if "extra_options" not in params and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            why = "has a create_calibrator without extra_options"
    if why:
        raise UnsupportedError(f"calibration_method='entropy': this onnxruntime's quantize_static {why} to give "
                               "the entropy histogram its bins (with its own 128 bins the method is MinMax)",
                               hint="use calibration_method='percentile' (or 'minmax')")
    calls = []

    def create(*args, **kwargs):
        calls.append(1)
        if "extra_options" in params and len(args) > list(params).index("extra_options"):   # given by position
            args = list(args)
            i = list(params).index("extra_options")
            args[i] = dict(args[i] or {}, num_bins=(args[i] or {}).get("num_bins", bins))
        else:
            extra = dict(kwargs.get("extra_options") or {})
            extra.setdefault("num_bins", bins)
            kwargs["extra_options"] = extra
        return orig(*args, **kwargs)
    mod.create_calibrator = create
    try:
        yield
    finally:
        mod.create_calibrator = orig
    if not calls:
        raise UnsupportedError("calibration_method='entropy': this onnxruntime's quantize_static did not call "
                               "onnxruntime.quantization.quantize.create_calibrator, so the entropy histogram "
                               "did not get its bins (with its own 128 bins the method is MinMax)",
                               hint="use calibration_method='percentile' (or 'minmax')")


def float_readers_read_float(qdq: onnx.ModelProto, pre: onnx.ModelProto, exclude=frozenset(), recipe=None) -> int:
    """Give the float readers of a float op's quantized output the float tensor instead of its Q -> DQ.

    onnxruntime's quantizer hands one shared DQ output to every reader of a quantized tensor, float
    ops (a Concat, a SiLU's Mul, an ``fp16_layers`` conv) included. The int8 layers among the readers
    quantize the tensor themselves (fuse/qdq.py absorbs the pair), but a pair that a float op also
    reads has no int8 layer to go into and stays on the CPU (yolo_like: LeakyRelu -> conv + Concat;
    Inception v2: Concat -> convs + a MaxPool whose output onnxruntime leaves unquantized, so it is no
    int8 layer: a reader counts as int8 when its op is quantized and a Q reads its output).
    A float reader of the float tensor is what mixed precision means (it is an fp16 layer), and it is
    closer to the float model. Not done for the output of an int8 layer (its readers read what it
    computes: the Q -> DQ is that layer's output quantization), nor where the quantizer removed
    a Relu/Clip (the Q's input then is the pre-activation value under the activation's name): the
    tensor's writer must be the float model's. Q/DQ pairs left without readers are removed. Returns the number of inputs rewired."""
    int8 = set(int8_op_types(recipe)) - {"Relu", "Clip"}
    writer = {o: n.op_type for n in pre.graph.node for o in n.output}
    producer = {o: n for n in qdq.graph.node for o in n.output}
    readers: dict = {}
    for n in qdq.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)

    def quantized_out(n, hops: int = 2) -> bool:   # an int8 layer needs the Q after it (through a Relu/Clip)
        for r in readers.get(n.output[0], []):
            if r.op_type == "QuantizeLinear":
                return True
            if hops and r.op_type in ("Relu", "Clip") and quantized_out(r, hops - 1):
                return True
        return False

    def int8_reader(n) -> bool:
        return n.op_type in int8 and n.name not in exclude and quantized_out(n)

    graph_io = {i.name for i in qdq.graph.input}
    changed = 0
    for dq in [n for n in qdq.graph.node if n.op_type == "DequantizeLinear"]:
        q = producer.get(dq.input[0])
        if q is None or q.op_type != "QuantizeLinear":
            continue
        x = q.input[0]
        src = producer.get(x)
        same_writer = (x in graph_io and src is None) or (src is not None and writer.get(x) == src.op_type)
        if not same_writer or (src is not None and src.op_type in int8 | {"Relu", "Clip"} and src.name not in exclude):
            continue   # the output quantization of an int8 layer: its float readers read what it computes
        for n in list(readers.get(dq.output[0], [])):
            if int8_reader(n):
                continue
            for k, name in enumerate(n.input):
                if name == dq.output[0] and n is not dq:
                    n.input[k] = x
                    changed += 1
    read = {i for n in qdq.graph.node for i in n.input} | {o.name for o in qdq.graph.output}
    for _ in range(2):   # DQs without readers, then the Qs that fed only them
        dead = [n for n in qdq.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")
                and not any(o in read for o in n.output)]
        for n in dead:
            qdq.graph.node.remove(n)
        read = {i for n in qdq.graph.node for i in n.input} | {o.name for o in qdq.graph.output}
    return changed


def workdir():
    return tempfile.TemporaryDirectory(prefix="onnx_mrvl_quantize_")
