"""onnxruntime's own graph fusions (com.microsoft), which a model saved with
``SessionOptions.optimized_model_filepath`` (ORT_ENABLE_EXTENDED) holds -> the standard ops:

    FusedMatMul(A, B; alpha, transA, transB)  -> [Transpose] MatMul [* alpha]   (transBatchA/B refused)
    FusedGemm(A, B, C; Gemm attributes, activation)   -> Gemm -> activation
    FusedConv(X, W, B, Z; Conv attributes, activation, activation_params) -> Conv [+ Z] -> activation

Activations (onnxruntime's fused_activation): Relu, Tanh, Sigmoid, LeakyRelu (alpha), HardSigmoid
(alpha, beta), Clip (FusedConv: min, max). Legalize's other rules then canonicalize the Gemm / Conv and
fuse absorbs the activation.
"""
from __future__ import annotations

from typing import Optional

from .base import Match, attr, inp
from .contrib_ops import Writer, float32_check, float_attr, shape_of
from .contrib_ops import REPORT_SKIPS, match  # noqa: F401  (the contrib rules' own)

NAME = "contrib_fused"
OPS = ("FusedMatMul", "FusedGemm", "FusedConv")
GEMM_ATTRS = ("alpha", "beta", "transA", "transB")
CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "LeakyRelu", "HardSigmoid", "Clip")


def _activation(n):
    """(op, its attributes / Clip bounds, reason): the fused activation (None: none), or a reason."""
    act = attr(n, "activation")
    if not act:
        return None, None, None
    if act not in ACTIVATIONS or (act == "Clip" and n.op_type != "FusedConv"):
        return None, None, f"{n.op_type} '{n.name}': fused activation {act} is not decomposed"
    if n.op_type == "FusedConv":
        p = [float(v) for v in (attr(n, "activation_params") or [])]
        need = {"LeakyRelu": 1, "HardSigmoid": 2, "Clip": 2}.get(act, 0)
        if len(p) < need:
            return None, None, f"FusedConv '{n.name}': {act} without its {need} activation_params"
        params = {"LeakyRelu": lambda: {"alpha": p[0]}, "HardSigmoid": lambda: {"alpha": p[0], "beta": p[1]},
                  "Clip": lambda: {"bounds": (p[0], p[1])}}.get(act, dict)()
    else:
        params = {"LeakyRelu": {"alpha": float_attr(n, "activation_alpha", 0.01)},
                  "HardSigmoid": {"alpha": float_attr(n, "activation_alpha", 0.2),
                                  "beta": float_attr(n, "activation_beta", 0.5)}}.get(act, {})
    return act, params, None


@float32_check
def check(m: Match, g, n) -> Optional[str]:
    if n.op_type == "FusedMatMul":
        if attr(n, "transBatchA", 0) or attr(n, "transBatchB", 0):
            return f"FusedMatMul '{n.name}': transBatchA / transBatchB are not decomposed"
        for idx, t in (("transA", 0), ("transB", 1)):
            s = shape_of(g, n.input[t])
            if attr(n, idx, 0) and (s is None or len(s) < 2):
                return f"FusedMatMul '{n.name}': {idx} on an input without a static rank >= 2"
        return None
    act, params, why = _activation(n)
    if why:
        return why
    m.data.update(act=act, params=params)
    return None


def _apply(w: Writer, x: str, act: Optional[str], params, out: str, shape) -> str:
    if not act:
        return w.op("Identity", [x], shape, tag="out", out=out)
    if act == "Clip":
        lo, hi = params["bounds"]
        return w.op("Clip", [x, w.const("clip_min", lo), w.const("clip_max", hi)], shape, tag="clip", out=out)
    return w.op(act, [x], shape, tag=act.lower(), out=out, **params)


def rewrite(m: Match, g) -> str:
    n = m.node
    w = Writer(g, n, m.origin)
    out = n.output[0]
    oshape = shape_of(g, out)
    shape = list(oshape) if oshape is not None else None
    g.remove(n)
    if n.op_type == "FusedMatMul":
        a, b = n.input[0], n.input[1]
        for idx, key in ((0, "transA"), (1, "transB")):
            if attr(n, key, 0):
                s = list(shape_of(g, n.input[idx]))
                perm = list(range(len(s) - 2)) + [len(s) - 1, len(s) - 2]
                t = w.op("Transpose", [n.input[idx]], s[:-2] + [s[-1], s[-2]], tag=f"{key}", perm=perm)
                a, b = (t, b) if idx == 0 else (a, t)
        alpha = float_attr(n, "alpha", 1.0)
        y = w.op("MatMul", [a, b], shape, tag="matmul", out=None if alpha != 1.0 else out)
        if alpha != 1.0:
            w.op("Mul", [y, w.const("alpha", alpha)], shape, tag="alpha", out=out)
        return f"FusedMatMul -> MatMul (alpha {alpha:g})"
    act, params = m.data["act"], m.data["params"]
    if n.op_type == "FusedGemm":
        gattrs = {k: attr(n, k) for k in GEMM_ATTRS if attr(n, k) is not None}
        y = w.op("Gemm", [i for i in n.input[:3]], shape, tag="gemm", out=None if act else out, **gattrs)
    else:
        cattrs = {k: attr(n, k) for k in CONV_ATTRS if attr(n, k) is not None}
        y = w.op("Conv", list(n.input[:3]), shape, tag="conv", out=None if (act or inp(n, 3)) else out, **cattrs)
        if inp(n, 3):
            y = w.op("Add", [y, inp(n, 3)], shape, tag="sum", out=None if act else out)
    if act:
        _apply(w, y, act, params, out, shape)
    return f"{n.op_type} -> {'Gemm' if n.op_type == 'FusedGemm' else 'Conv'}{' + ' + act if act else ''}"

