"""Program layers LayerNorm and Softmax (``log`` = 1: LogSoftmax) (docs/program.md) -> prepared closures (sim/layers.py)."""
from __future__ import annotations

import numpy as np

from .int8 import fake_quant
from .fp16 import round_fp16_
from .int8_transformer import AFFINE_FORMS, affine_inner, inner_points, int8_out_quant, layernorm_inner, rmsnorm_inner
from .norm_ops import layernorm, layernorm_onnxruntime, log_softmax, softmax
from .ort_reduce import instance_norm


def _axis(spec) -> int:
    try:
        return int(spec.param("axis", required=True))
    except (TypeError, ValueError):
        raise spec.error(f"axis must be an integer, got {spec.params.get('axis')!r}") from None


def _check_axis(spec, x, axis: int) -> None:
    if not -x.ndim <= axis < x.ndim or x.ndim < 2:
        raise ValueError(f"axis {axis} does not fit an input of shape {list(x.shape)}")


def build_layernorm(spec, n_inputs: int):
    if n_inputs != 1:
        raise spec.error(f"takes 1 input, the program gives {n_inputs}")
    axis = _axis(spec)
    try:
        eps = float(spec.param("epsilon", required=True))
    except (TypeError, ValueError):
        raise spec.error(f"epsilon must be a number, got {spec.params.get('epsilon')!r}") from None
    rms = bool(int(spec.param("rms", 0) or 0))
    gamma, beta = spec.weight("gamma", required=True).reshape(-1), spec.weight("beta")
    beta = None if beta is None else beta.reshape(-1)
    if beta is not None and beta.size != gamma.size:
        raise spec.error(f"gamma has {gamma.size} values, beta {beta.size}")

    out_q, in_q = int8_out_quant(spec), int8_out_quant(spec, "in")
    form = spec.param("form", None)   # x * inv + c (fuse/qdq_norm_affine.py): 11 interior points
    if form is not None and (form not in AFFINE_FORMS or rms):
        raise spec.error(f"form {form!r}: {' or '.join(AFFINE_FORMS)}, without rms")
    points = inner_points(spec, 11 if form else 5 if rms else (4, 8))   # RMSNorm: square, var, vareps, inv, norm
    if form is not None and points is None:
        raise spec.error(f"form {form!r} without its interior points (inner_scales)")
    mean_sum = spec.param("mean_sum", None)   # onnxruntime's order of the mean's sum (sim/ort_reduce.py)
    if mean_sum is not None and (mean_sum != "strided" or points is None or rms or form):
        raise spec.error(f"mean_sum {mean_sum!r}: \"strided\", on a layer norm with interior points only")
    mean_muls = spec.param("mean_muls", None)   # each mean times a constant (fuse/qdq_layernorm.py)
    if mean_muls is not None and (points is None or rms or form or len(mean_muls) != 2
                                  or not all(0 < float(k) < np.inf for k in mean_muls)):
        raise spec.error(f"mean_muls {mean_muls!r}: two positive factors, on a layer norm with interior points only")

    ort_kernel = spec.param("ort_kernel", None)   # onnxruntime's InstanceNorm order (fuse/transformer.py)
    if ort_kernel is not None:
        if ort_kernel != "instance_norm" or rms or form or points is not None or out_q is None:
            raise spec.error(f"ort_kernel {ort_kernel!r}: \"instance_norm\", on an int8_out layer norm only")
        if not (np.all(gamma == gamma[0]) and (beta is None or np.all(beta == beta[0]))):
            raise spec.error("ort_kernel \"instance_norm\" needs one gamma and one beta value for the row")

    def run(x):
        _check_axis(spec, x, axis)
        if x.shape[axis] != gamma.size:
            raise ValueError(f"gamma has {gamma.size} values for axis {axis} of an input of shape {list(x.shape)}")
        if out_q is None and points is None:
            return layernorm(x, axis, eps, gamma, beta, rms=rms)
        if in_q is not None:
            x = fake_quant(x, *in_q)   # the codes it reads (exact when x already holds them)
        if points is not None:         # a QDQ layer norm's interior quantization (int8_transformer.py)
            y, ok = affine_inner(x, axis, eps, gamma, beta, points, form) if form else \
                rmsnorm_inner(x, axis, eps, gamma, beta, points) if rms else \
                layernorm_inner(x, axis, eps, gamma, beta, points, mean_strided=mean_sum == "strided",
                                mean_muls=mean_muls)
        elif ort_kernel is not None:   # onnxruntime's InstanceNorm kernel over the last axis, then its Q
            if axis not in (-1, x.ndim - 1):
                raise ValueError(f"ort_kernel instance_norm over axis {axis} (the last axis only)")
            y = instance_norm(x.reshape(-1, x.shape[-1]), eps, float(gamma[0]),
                              0.0 if beta is None else float(beta[0])).reshape(x.shape)
            ok = bool(np.isfinite(y).all())
        elif out_q is not None:        # int8 codes out: onnxruntime's fp32 kernel, then its Q
            y, ok = layernorm_onnxruntime(x, axis, eps, gamma, beta, rms=rms)
        else:
            y, ok = layernorm(x, axis, eps, gamma, beta, fp16=False, rms=rms)
        if out_q is None:
            return y, round_fp16_(y) and ok
        return fake_quant(y, *out_q), ok
    return run


def build_softmax(spec, n_inputs: int):
    if n_inputs != 1:
        raise spec.error(f"takes 1 input, the program gives {n_inputs}")
    axis = _axis(spec)
    log = spec.param("log", 0)
    if log not in (0, 1, True, False):
        raise spec.error(f"log must be 0 or 1, got {log!r}")
    op = log_softmax if log else softmax
    if spec.params.get("precision") == "int8":   # QLinearSoftmax's semantics (int8_transformer.py)
        if log:
            raise spec.error("an int8 Softmax with log = 1 (int8 LogSoftmax is not supported)")
        from .int8_transformer import build_int8_softmax
        return build_int8_softmax(spec, axis)
    if spec.params.get("precision") == "fp32":   # an fp32 chain's: MLAS's fp32 Softmax, no fp16 rounding
        if log or spec.param("nan_fill", None) is not None:
            raise spec.error("an fp32 Softmax takes no log / nan_fill")
        from .mlas_softmax import softmax_last_axis

        def run_fp32(x):
            _check_axis(spec, x, axis)
            y = softmax_last_axis(np.moveaxis(np.asarray(x, np.float32), axis, -1))
            return np.ascontiguousarray(np.moveaxis(y, -1, axis)), bool(np.isfinite(y).all())
        return run_fp32

    fill = spec.param("nan_fill", None)
    if fill is not None:   # a NaN result (a row whose every score is -inf) written as the fill
        if log:
            raise spec.error("nan_fill on a Softmax with log = 1")

        def run_filled(x):
            _check_axis(spec, x, axis)
            return softmax(x, axis, nan_fill=float(fill))
        return run_filled

    def run(x):
        _check_axis(spec, x, axis)
        return op(x, axis)
    return run
